#include "core/plugin/search_path.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/util/strings.h"

namespace grpo::core {

namespace fs = std::filesystem;

std::string plugin_file_name(const std::string& plugin_name) { return "libgrpo_" + plugin_name + ".so"; }

std::string bundled_plugin_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&bundled_plugin_dir), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  fs::path lib = fs::canonical(info.dli_fname, ec);
  if (ec) lib = info.dli_fname;
  return (lib.parent_path() / GRPO_PLUGIN_DIR_FROM_LIBDIR).string();
}

std::vector<std::string> PluginSearchPath::directories() const {
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  auto add = [&](const std::string& d) {
    if (d.empty()) return;
    std::error_code ec;
    std::string key = fs::weakly_canonical(d, ec).string();
    if (ec) key = d;
    if (seen.insert(key).second) dirs.push_back(d);
  };
  for (const auto& d : explicit_dirs) add(d);
  for (const auto& d : config_dirs) add(d);
  if (use_environment) {
    if (const char* env = std::getenv("GRPO_PLUGIN_PATH")) {
      std::string s = env;
      std::size_t start = 0;
      while (start <= s.size()) {
        std::size_t colon = s.find(':', start);
        if (colon == std::string::npos) colon = s.size();
        add(s.substr(start, colon - start));
        start = colon + 1;
      }
    }
  }
  if (use_install_dir) {
    add(bundled_plugin_dir());
    add(GRPO_INSTALL_PLUGIN_DIR);
  }
  return dirs;
}

std::optional<std::string> PluginSearchPath::find_plugin_file(const std::string& plugin_name) const {
  const std::string file = plugin_file_name(plugin_name);
  for (const auto& dir : directories()) {
    std::error_code ec;
    fs::path candidate = fs::path(dir) / file;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return std::nullopt;
}

std::vector<std::string> PluginSearchPath::all_plugin_files() const {
  std::vector<std::string> out;
  std::set<std::string> names;
  for (const auto& dir : directories()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<std::string> here;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (starts_with(name, "libgrpo_") && ends_with(name, ".so") && it->is_regular_file(ec)) here.push_back(name);
    }
    std::sort(here.begin(), here.end());
    for (const auto& name : here)
      if (names.insert(name).second) out.push_back((fs::path(dir) / name).string());
  }
  return out;
}

}  // namespace grpo::core
