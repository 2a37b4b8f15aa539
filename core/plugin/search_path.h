// Where plugins are looked up: explicit dirs → the config files' folders → $GRPO_PLUGIN_PATH
// → the install's plugin dir. The first libgrpo_<name>.so found wins.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace grpo::core {

struct PluginSearchPath {
  std::vector<std::string> explicit_dirs;  // plugins.paths
  std::vector<std::string> config_dirs;    // the folders of the --config files
  bool use_environment = true;             // $GRPO_PLUGIN_PATH, ':'-separated
  bool use_install_dir = true;             // beside libgrpo-core, then the configured prefix

  // The ordered, de-duplicated directory list (non-existent ones kept: they show in errors).
  std::vector<std::string> directories() const;
  // The first <dir>/libgrpo_<plugin_name>.so that exists.
  std::optional<std::string> find_plugin_file(const std::string& plugin_name) const;
  // Every libgrpo_*.so on the path; for a file name present in several dirs, the first.
  std::vector<std::string> all_plugin_files() const;
};

// "libgrpo_<name>.so"
std::string plugin_file_name(const std::string& plugin_name);

// The plugin folder of this installation: <dir of libgrpo-core.so>/grpo/plugins. The build
// tree has the same layout, so this also finds the plugins of a build.
std::string bundled_plugin_dir();

}  // namespace grpo::core
