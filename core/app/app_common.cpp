#include "core/app/app_common.h"

#include <fstream>
#include <iostream>

#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

int run_app_guarded(const char* app, const std::function<int()>& body) {
  try {
    return body();
  } catch (const sdk::ConfigError& e) {
    std::cerr << app << ": configuration error: " << e.what() << "\n";
    return kAppExitConfig;
  } catch (const PluginError& e) {
    std::cerr << app << ": plugin error: " << e.what() << "\n";
    return kAppExitPlugin;
  } catch (const AppError& e) {
    std::cerr << app << ": " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::invalid_argument& e) {
    std::cerr << app << ": " << e.what() << "\n";
    return kAppExitUsage;
  } catch (const std::exception& e) {
    std::cerr << app << ": internal error: " << e.what() << "\n";
    return kAppExitInternal;
  } catch (...) {
    std::cerr << app << ": internal error: an exception not derived from std::exception\n";
    return kAppExitInternal;
  }
}

int report_usage_error(const char* app, const std::string& message) {
  std::cerr << app << ": " << message << "\n(see " << app << " --help)\n";
  return kAppExitUsage;
}

std::vector<JsonlLine> read_jsonl_lines(const std::string& path, const std::string& flag) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw std::invalid_argument("cannot open " + flag + " '" + path + "'");
    in = &file;
  }
  std::vector<JsonlLine> lines;
  std::string text;
  std::size_t line = 0;
  while (std::getline(*in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (trim(text).empty()) continue;
    lines.push_back(JsonlLine{line, std::move(text)});
  }
  if (in->bad()) throw std::runtime_error("cannot read " + flag + " '" + path + "'");
  return lines;
}

PluginSearchPath app_plugin_search_path(const sdk::ConfigValue& config, const std::vector<std::string>& config_files,
                                        const std::vector<std::string>& plugin_paths) {
  PluginSearchPath search = plugin_search_path(config, config_files);
  search.explicit_dirs.insert(search.explicit_dirs.begin(), plugin_paths.begin(), plugin_paths.end());
  return search;
}

}  // namespace grpo::core
