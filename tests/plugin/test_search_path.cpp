#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>  // getpid

#include "core/plugin/search_path.h"

namespace grpo::core {
namespace {

namespace fs = std::filesystem;

class SearchPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(GRPO_TEST_TMP_DIR) / ("search_path_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const char* d : {"explicit", "config", "env1", "env2"}) fs::create_directories(root_ / d);
    saved_env_ = std::getenv("GRPO_PLUGIN_PATH") ? std::getenv("GRPO_PLUGIN_PATH") : "";
  }
  void TearDown() override {
    if (saved_env_.empty()) ::unsetenv("GRPO_PLUGIN_PATH");
    else ::setenv("GRPO_PLUGIN_PATH", saved_env_.c_str(), 1);
    fs::remove_all(root_);
  }
  void touch(const std::string& rel) { std::ofstream(root_ / rel) << "x"; }
  std::string dir(const char* d) const { return (root_ / d).string(); }

  fs::path root_;
  std::string saved_env_;
};

TEST_F(SearchPathTest, OrderIsExplicitThenConfigThenEnvironmentThenInstall) {
  ::setenv("GRPO_PLUGIN_PATH", (dir("env1") + ":" + dir("env2")).c_str(), 1);
  PluginSearchPath sp;
  sp.explicit_dirs = {dir("explicit")};
  sp.config_dirs = {dir("config")};
  auto dirs = sp.directories();
  ASSERT_GE(dirs.size(), 5u);
  EXPECT_EQ(dirs[0], dir("explicit"));
  EXPECT_EQ(dirs[1], dir("config"));
  EXPECT_EQ(dirs[2], dir("env1"));
  EXPECT_EQ(dirs[3], dir("env2"));
  EXPECT_EQ(dirs[4], bundled_plugin_dir());
  EXPECT_NE(bundled_plugin_dir().find("grpo/plugins"), std::string::npos);
}

TEST_F(SearchPathTest, FirstMatchWinsAndDuplicatesCollapse) {
  touch("config/libgrpo_a.so");
  touch("env1/libgrpo_a.so");
  touch("env1/libgrpo_b.so");
  touch("env1/not_a_plugin.so");
  ::setenv("GRPO_PLUGIN_PATH", dir("env1").c_str(), 1);
  PluginSearchPath sp;
  sp.config_dirs = {dir("config"), dir("config")};
  sp.use_install_dir = false;
  EXPECT_EQ(sp.directories().size(), 2u);
  EXPECT_EQ(*sp.find_plugin_file("a"), (root_ / "config" / "libgrpo_a.so").string());
  EXPECT_EQ(*sp.find_plugin_file("b"), (root_ / "env1" / "libgrpo_b.so").string());
  EXPECT_FALSE(sp.find_plugin_file("c").has_value());
  auto all = sp.all_plugin_files();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], (root_ / "config" / "libgrpo_a.so").string());
  EXPECT_EQ(all[1], (root_ / "env1" / "libgrpo_b.so").string());
}

TEST_F(SearchPathTest, EnvironmentCanBeDisabled) {
  ::setenv("GRPO_PLUGIN_PATH", dir("env1").c_str(), 1);
  PluginSearchPath sp;
  sp.use_environment = false;
  sp.use_install_dir = false;
  EXPECT_TRUE(sp.directories().empty());
}

TEST(PluginFileName, FollowsConvention) { EXPECT_EQ(plugin_file_name("math"), "libgrpo_math.so"); }

}  // namespace
}  // namespace grpo::core
