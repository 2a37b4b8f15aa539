#include "core/util/fs.h"

#include <fcntl.h>
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

}  // namespace grpo::core
