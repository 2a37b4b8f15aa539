#include "apps/cli/app_common.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "core/config/config_loader.h"
#include "core/config/yaml_loader.h"
#include "core/model/checkpoint_dirs.h"
#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "core/runtime/logging.h"
#include "core/runtime/policy.h"
#include "core/train/run_dir.h"
#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

using namespace grpo::core;

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

RunDir prepare_run_dir(const sdk::ConfigValue& config) {
  const std::string run_dir = check_run_output_dir(config);  // --validate's words
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) fail_at_config_key(config, {"run", "output_dir"}, "cannot create the run directory '" + run_dir + "': " + ec.message());
  // First the lock: nothing of another run's is touched, not even its log.
  const std::string lock_path = (std::filesystem::path(run_dir) / ".lock").string();
  std::string holder;
  std::optional<FileLock> lock = FileLock::try_acquire(lock_path, &holder);
  if (!lock) {
    const auto space = holder.find(' ');
    const std::string who = holder.empty() ? std::string("another process (it has not recorded its PID yet)")
                            : space == std::string::npos ? "PID " + holder
                                                         : "PID " + holder.substr(0, space) + " on " + holder.substr(space + 1);
    throw AppError(kExitConfig, "run.output_dir '" + run_dir + "' is in use by another run: " + who + " holds " + lock_path +
                                    ". One run per directory: wait for it to end, stop it, or choose another run.output_dir.");
  }
  // Before anything is written: a save that was killed may have left the disk full.
  const std::vector<std::string> stale = remove_checkpoint_staging(run_dir);
  // effective_config.yaml waits for the checks (write_effective_config): a rejected --resume must
  // leave the file the run resumes from.
  if (const std::string log_file = sdk::ConfigView(find_config_node(config, {"log"}), "log").require_string("file");
      !log_file.empty())
    add_log_file((std::filesystem::path(run_dir) / log_file).string());
  spdlog::info("run directory: {}", run_dir);
  if (!stale.empty())
    spdlog::info("removed {} unfinished checkpoint folder(s) an interrupted save left in {}: {}", stale.size(),
                 checkpoint_root(run_dir), join(stale, ", "));
  return RunDir{run_dir, std::move(*lock)};
}

int run_guarded(const std::function<int()>& body, const std::function<void(const ExitStatus&)>& report) {
  try {
    return body();
  } catch (...) {
    const ExitStatus status = exit_status_of(std::current_exception());
    report(status);
    return status.code;
  }
}

int run_app_guarded(const char* app, const std::function<int()>& body) {
  return run_guarded(body, [app](const ExitStatus& status) { std::cerr << app << ": " << status.message << "\n"; });
}

void run_job(const std::function<void()>& job, const std::string& context) {
  try {
    job();
  } catch (const std::logic_error&) {
    throw;  // a bug (exit code 1), or std::invalid_argument: a bad command line (2)
  } catch (const std::exception& e) {
    // What exit_status_of maps itself passes through; only the rest is a runtime error.
    if (exit_status_of(std::current_exception()).code != kExitInternal) throw;
    throw AppError(kExitRuntime, context + e.what());
  }
}

int report_usage_error(const char* app, const std::string& message) {
  std::cerr << app << ": " << message << "\n(see " << app << " --help)\n";
  return kExitUsage;
}

std::vector<JsonlLine> read_jsonl_lines(const std::string& path, const std::string& flag) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    // A folder opens as a stream on Linux and fails at the first read: a usage error, said first.
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw std::invalid_argument(flag + " '" + path + "' is a folder; expected a JSONL file (or - for standard input)");
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

}  // namespace grpo::cli
