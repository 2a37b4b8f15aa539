// atomic_write_file / read_file: the durability rule for every output of a run; folder
// fsync and replacement; the run directory's lock.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/util/fs.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::core;

std::string test_dir() { return grpo::testing::fresh_test_dir("fs"); }

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

template <typename Fn>
std::string runtime_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a std::runtime_error";
  return {};
}

TEST(AtomicWrite, CreatesParentDirectories) {
  const std::string dir = test_dir();
  const std::string path = dir + "/a/b/c/out.txt";
  atomic_write_file(path, "hello\n");
  EXPECT_EQ(read_file(path), "hello\n");
}

TEST(AtomicWrite, ReplacesContentAndLeavesNoTempFile) {
  const std::string dir = test_dir();
  const std::string path = dir + "/out.yaml";
  atomic_write_file(path, "first version, longer than the second\n");
  atomic_write_file(path, "second\n");
  EXPECT_EQ(read_file(path), "second\n");
  EXPECT_EQ(fs::file_size(path), 7u);
  EXPECT_EQ(entries_in(dir), 1u) << "a temporary file was left behind";
}

TEST(AtomicWrite, BinaryContentAndOrdinaryPermissions) {
  const std::string dir = test_dir();
  const std::string path = dir + "/bin";
  const std::string content("a\0b\xff\n", 5);
  atomic_write_file(path, content);
  EXPECT_EQ(read_file(path), content);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  atomic_write_file(dir + "/empty", "");
  EXPECT_EQ(read_file(dir + "/empty"), "");
}

TEST(AtomicWrite, UnwritableLocationThrowsNamingThePath) {
  const std::string dir = test_dir();
  // A regular file where a directory is needed: fails even for root.
  const std::string blocker = dir + "/not_a_dir";
  std::ofstream(blocker) << "x";
  const std::string msg = runtime_error_of([&] { atomic_write_file(blocker + "/out.txt", "x"); });
  EXPECT_NE(msg.find(blocker), std::string::npos) << msg;
  EXPECT_EQ(entries_in(dir), 1u);
}

TEST(AtomicWrite, ReadOnlyDirectoryThrowsNamingThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const std::string dir = test_dir() + "/ro";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string path = dir + "/out.txt";
  const std::string msg = runtime_error_of([&] { atomic_write_file(path, "x"); });
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_NE(msg.find("'" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_EQ(entries_in(dir), 0u);
}

TEST(FsyncDirectory, MissingFolderThrowsNamingIt) {
  const std::string dir = test_dir();
  fsync_directory(dir);
  const std::string msg = runtime_error_of([&] { fsync_directory(dir + "/gone"); });
  EXPECT_EQ(msg, "cannot open folder '" + dir + "/gone': No such file or directory");
}

TEST(ReplaceDirectory, MovesIntoPlaceOrSwapsAndLeavesNoStaging) {
  const std::string dir = test_dir();
  fs::create_directories(dir + "/staging");
  atomic_write_file(dir + "/staging/a", "first");
  replace_directory(dir + "/staging", dir + "/target");
  EXPECT_EQ(read_file(dir + "/target/a"), "first");
  fs::create_directories(dir + "/staging");
  atomic_write_file(dir + "/staging/b", "second");
  replace_directory(dir + "/staging", dir + "/target");
  EXPECT_EQ(read_file(dir + "/target/b"), "second");
  EXPECT_FALSE(fs::exists(dir + "/target/a")) << "the old contents were merged, not replaced";
  EXPECT_EQ(entries_in(dir), 1u) << "staging or the old contents left behind";
}

TEST(ReplaceDirectory, RefusesToReplaceAFile) {
  const std::string dir = test_dir();
  fs::create_directories(dir + "/staging");
  std::ofstream(dir + "/target") << "x";
  const std::string msg = runtime_error_of([&] { replace_directory(dir + "/staging", dir + "/target"); });
  EXPECT_EQ(msg, "'" + dir + "/target' exists and is not a folder; refusing to replace it");
  EXPECT_TRUE(fs::is_directory(dir + "/staging"));
}

// flock locks belong to open files, so a second FileLock in this process contends like another
// process would.
TEST(FileLock, SecondLockFailsNamingTheHolderUntilTheFirstIsReleased) {
  const std::string path = test_dir() + "/.lock";
  std::string holder = "untouched";
  std::optional<FileLock> first = FileLock::try_acquire(path, &holder);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(holder, "untouched");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(read_file(path), std::to_string(::getpid()) + " " + host + "\n");

  EXPECT_FALSE(FileLock::try_acquire(path, &holder).has_value());
  EXPECT_EQ(holder, std::to_string(::getpid()) + " " + host);

  FileLock moved = std::move(*first);  // the lock goes with the object
  first.reset();
  EXPECT_FALSE(FileLock::try_acquire(path, &holder).has_value());
  { FileLock gone = std::move(moved); }
  EXPECT_TRUE(FileLock::try_acquire(path, &holder).has_value());
}

TEST(FileLock, UnopenablePathThrowsNamingIt) {
  const std::string path = test_dir() + "/missing/.lock";
  const std::string msg = runtime_error_of([&] { FileLock::try_acquire(path, nullptr); });
  EXPECT_EQ(msg, "cannot open lock file '" + path + "': No such file or directory");
}

TEST(ReadFile, MissingFileThrowsNamingThePath) {
  const std::string path = test_dir() + "/missing.txt";
  const std::string msg = runtime_error_of([&] { read_file(path); });
  EXPECT_EQ(msg, "cannot open '" + path + "': No such file or directory");
}

}  // namespace
