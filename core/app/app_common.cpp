#include "core/app/app_common.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/config/config_loader.h"
#include "core/config/yaml_loader.h"
#include "core/data/dataset.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/runtime/policy.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

sdk::ConfigValue load_job_config(const std::vector<std::string>& files, std::vector<std::string> overrides,
                                 const std::string& log_level, bool resume) {
  init_console_logging(log_level.empty() ? "info" : log_level);
  if (!log_level.empty()) overrides.push_back("log.level=" + log_level);
  if (resume) overrides.push_back("run.resume=true");
  ConfigSources sources;
  sources.files = files;
  sources.overrides = std::move(overrides);
  sdk::ConfigValue config = load_config(sources);
  init_console_logging(sdk::ConfigView(find_config_node(config, {"log"}), "log").require_string("level"));
  resolve_model_path(config);
  return config;
}

std::string prepare_run_dir(const sdk::ConfigValue& config) {
  const std::string run_dir = sdk::ConfigView(find_config_node(config, {"run"}), "run").require_string("output_dir");
  const std::string effective = (std::filesystem::path(run_dir) / "effective_config.yaml").string();
  atomic_write_file(effective, to_yaml(config));
  if (const std::string log_file = sdk::ConfigView(find_config_node(config, {"log"}), "log").require_string("file");
      !log_file.empty())
    add_log_file((std::filesystem::path(run_dir) / log_file).string());
  spdlog::info("run directory: {} (effective config: {})", run_dir, effective);
  return run_dir;
}

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
  } catch (const DataError& e) {
    std::cerr << app << ": data error: " << e.what() << "\n";
    return kAppExitConfig;
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

void run_job(const std::function<void()>& job, const std::string& context) {
  try {
    job();
  } catch (const sdk::ConfigError&) {
    throw;
  } catch (const PluginError&) {
    throw;
  } catch (const DataError&) {
    throw;
  } catch (const AppError&) {
    throw;
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw AppError(5, context + e.what());
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
