// Log lines quote untrusted text (data rows, model output, plugin messages): invalid UTF-8 in a
// message reaches run.log and the console escaped as \xNN (core/runtime/logging.h), while valid
// text, multi-byte characters included, is written unchanged.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/plugin/plugin_log.h"
#include "core/runtime/logging.h"

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Logging, InvalidUtf8IsEscapedInEverySinkAndValidTextIsKept) {
  const fs::path dir = fs::path(GRPO_TEST_TMP_DIR) / ("logging-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The console is stderr: pointed at a file for the test, then restored.
  std::fflush(stderr);
  const int saved_stderr = ::dup(STDERR_FILENO);
  std::FILE* console = std::fopen((dir / "console.txt").c_str(), "w");
  ASSERT_NE(console, nullptr);
  ::dup2(::fileno(console), STDERR_FILENO);

  grpo::core::init_console_logging("info");
  grpo::core::add_log_file((dir / "run.log").string());
  // A data row with a lead byte cut from its continuation (\xC3 before '('), a byte that is never
  // UTF-8 (\xFF), and valid 2-, 3- and 4-byte characters.
  spdlog::info("row: {}", std::string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 bad \xC3( end \xFF"));
  // A plugin's message through the host's log bridge: a truncated 3-byte sequence.
  grpo::core::host_log_callback(3, "sandbox", "out: x\xE2\x82y");
  spdlog::default_logger()->flush();

  std::fflush(stderr);
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  std::fclose(console);

  for (const char* file : {"run.log", "console.txt"}) {
    const std::string text = read_all(dir / file);
    EXPECT_NE(text.find("row: caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 bad \\xc3( end \\xff\n"), std::string::npos) << file << ":\n" << text;
    EXPECT_NE(text.find("[sandbox] out: x\\xe2\\x82y\n"), std::string::npos) << file << ":\n" << text;
    EXPECT_EQ(text.find('\xFF'), std::string::npos) << file;
  }
  fs::remove_all(dir);
}

}  // namespace
