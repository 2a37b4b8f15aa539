// File helpers with the project's durability rule: outputs are written to a temp file in
// the same directory, flushed, then renamed over the target, so a reader (or a crash) never
// sees a half-written file.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace grpo::core {

// Writes `content` to `path` atomically (temp file + fsync + rename). Creates parent
// directories. Throws std::runtime_error naming the path and the OS error.
void atomic_write_file(const std::string& path, std::string_view content);

// Streaming form of atomic_write_file for outputs too large to build in memory: creates
// parent directories and a temp file `<path>.tmp.XXXXXX` in the same folder, calls
// `write(file)`, then checks the stream, fsyncs and renames it onto `path`. When `write`
// throws, or any step fails, the temp file is removed, `path` is untouched, and the
// exception propagates (std::runtime_error naming the path and the OS error for I/O).
void atomic_write_file_with(const std::string& path, const std::function<void(std::FILE*)>& write);

// Reads a whole file. Throws std::runtime_error naming the path and the OS error.
std::string read_file(const std::string& path);

}  // namespace grpo::core
