// File helpers with the project's durability rule: outputs are written to a temp file in
// the same directory, flushed, then renamed over the target, so a reader (or a crash) never
// sees a half-written file.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
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

// fsync(2) of a folder: makes the creation, rename or removal of its entries durable (a file's
// own fsync does not). Throws std::runtime_error naming the folder and the OS error; a
// filesystem that cannot sync folders (EINVAL) is not an error.
void fsync_directory(const std::string& dir);

// Moves the complete folder `staging` to `target` in one step, so that `target` always names
// either its old or its new contents: a rename when `target` does not exist, an atomic swap
// (renameat2 RENAME_EXCHANGE) when it does, after which the old contents (then under the
// staging name) are removed. Filesystems without RENAME_EXCHANGE move the old folder aside to
// `staging + ".old"` first. `staging` is fsynced before the move and target's parent after it.
// Throws std::runtime_error naming the folders; `staging` is left in place on failure.
void replace_directory(const std::string& staging, const std::string& target);

// An exclusive flock(2) on a file, held while the object lives. The kernel releases it with
// the descriptor, so a holder that exits or is killed never leaves a stale lock; the descriptor
// is close-on-exec, so child programs do not keep it. Not shared between threads.
class FileLock {
 public:
  // Locks `path` (created 0644 if missing) without waiting and records "PID HOST" in it.
  // When another open file already holds the lock (another process, or this one through
  // another FileLock), returns nullopt and sets `*holder` to what the holder recorded ("" when
  // it has not written it yet). Throws std::runtime_error naming the path on other errors.
  static std::optional<FileLock> try_acquire(const std::string& path, std::string* holder);

  FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace grpo::core
