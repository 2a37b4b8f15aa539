#include "core/util/fs.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace grpo::core {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(err));
}
}  // namespace

void atomic_write_file(const std::string& path, std::string_view content) {
  // A short write shows up as ferror() in atomic_write_file_with, which then fails.
  atomic_write_file_with(path, [&](std::FILE* file) { std::fwrite(content.data(), 1, content.size(), file); });
}

void atomic_write_file_with(const std::string& path, const std::function<void(std::FILE*)>& write) {
  namespace fs = std::filesystem;
  fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw std::runtime_error("cannot create directory '" + target.parent_path().string() + "': " + ec.message());
  }
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail("cannot create temporary file for", path, errno);
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot open", tmp, err);
  }
  try {
    write(file);
  } catch (...) {
    std::fclose(file);
    ::unlink(tmp.c_str());
    throw;
  }
  // mkstemp creates 0600; outputs are ordinary files.
  ::fchmod(fd, 0644);
  errno = 0;
  if (std::fflush(file) != 0 || std::ferror(file) != 0 || ::fsync(fd) != 0) {
    int err = errno ? errno : EIO;
    std::fclose(file);
    ::unlink(tmp.c_str());
    fail("cannot write", tmp, err);
  }
  if (std::fclose(file) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot flush", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename temporary file onto", path, err);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open", path, errno ? errno : ENOENT);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read", path, errno ? errno : EIO);
  return ss.str();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open folder", dir, errno);
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    fail("cannot sync folder", dir, err);
  }
  ::close(fd);
}

void replace_directory(const std::string& staging, const std::string& target) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::absolute(target).parent_path();
  fsync_directory(staging);  // its entries, before they become visible under target's name
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) {
    fsync_directory(parent.string());
    return;
  }
  const int err = errno;
  const bool no_flags = err == EINVAL || err == ENOSYS;  // a filesystem without renameat2's flags
  std::error_code ec;
  if (no_flags && !fs::exists(target, ec)) {
    if (::rename(staging.c_str(), target.c_str()) != 0) fail("cannot rename '" + staging + "' to", target, errno);
    fsync_directory(parent.string());
    return;
  }
  if (err != EEXIST && !no_flags) fail("cannot rename '" + staging + "' to", target, err);
  if (!fs::is_directory(target, ec)) throw std::runtime_error("'" + target + "' exists and is not a folder; refusing to replace it");
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_directory(parent.string());
    fs::remove_all(staging, ec);  // the previous contents
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) fail("cannot swap '" + staging + "' with", target, errno);
  // No RENAME_EXCHANGE here: the old folder steps aside first. A crash in between leaves it as
  // STAGING.old next to the complete new one under the staging name.
  const std::string aside = staging + ".old";
  if (::rename(target.c_str(), aside.c_str()) != 0) fail("cannot move the previous folder aside:", target, errno);
  if (::rename(staging.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::rename(aside.c_str(), target.c_str());
    fail("cannot rename '" + staging + "' to", target, err);
  }
  fsync_directory(parent.string());
  fs::remove_all(aside, ec);
}

std::optional<FileLock> FileLock::try_acquire(const std::string& path, std::string* holder) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open lock file", path, errno);
  FileLock lock(fd);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) fail("cannot lock", path, errno);
    if (holder) {
      char buf[256];
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      *holder = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
      while (!holder->empty() && (holder->back() == '\n' || holder->back() == ' ')) holder->pop_back();
    }
    return std::nullopt;
  }
  char host[256] = "unknown-host";
  ::gethostname(host, sizeof host - 1);
  const std::string text = std::to_string(::getpid()) + " " + host + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    fail("cannot write", path, errno ? errno : EIO);
  return lock;
}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace grpo::core
