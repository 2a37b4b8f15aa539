// File helpers with the project's durability rule: outputs are written to a temp file in
// the same directory, flushed, then renamed over the target, so a reader (or a crash) never
// sees a half-written file.
#pragma once

#include <string>
#include <string_view>

namespace grpo::core {

// Writes `content` to `path` atomically (temp file + fsync + rename). Creates parent
// directories. Throws std::runtime_error naming the path and the OS error.
void atomic_write_file(const std::string& path, std::string_view content);

// Reads a whole file. Throws std::runtime_error naming the path and the OS error.
std::string read_file(const std::string& path);

}  // namespace grpo::core
