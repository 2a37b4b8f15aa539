// A fresh scratch folder for the running test: GRPO_TEST_TMP_DIR/GROUP/Suite.Name, emptied
// first so that a test never sees what an earlier run left.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

namespace grpo::testing {

inline std::string fresh_test_dir(const std::string& group) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(GRPO_TEST_TMP_DIR) / group /
                                    (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// A fresh scratch folder shared by a test suite (GRPO_TEST_TMP_DIR/NAME-PID), for fixtures
// made in SetUpTestSuite, where no test is running yet.
inline std::string fresh_suite_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(GRPO_TEST_TMP_DIR) / (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace grpo::testing
