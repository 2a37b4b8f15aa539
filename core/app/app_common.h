// What the command-line apps of core/app/ (grpo-verify, grpo-generate) share: reading JSONL
// input, parsing one line as a JSON object, the plugin search path of an app, and the mapping
// of exceptions to exit codes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/plugin/search_path.h"
#include "core/util/json_limits.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

// An error with its own exit code (documented by the app that throws it). The message is
// printed as "APP: MESSAGE".
class AppError : public std::runtime_error {
 public:
  AppError(int exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// The exit codes every app shares.
inline constexpr int kAppExitOk = 0, kAppExitInternal = 1, kAppExitUsage = 2, kAppExitConfig = 3, kAppExitPlugin = 4;

// Runs an app's body and turns what it throws into one line on stderr and an exit code:
//   sdk::ConfigError       "APP: configuration error: ..."  3
//   PluginError            "APP: plugin error: ..."         4
//   AppError               "APP: ..."                       its exit_code()
//   DataError              "APP: data error: ..."           3 (a row: file and line)
//   std::invalid_argument  "APP: ..."                       2 (a bad command line)
//   anything else          "APP: internal error: ..."       1
int run_app_guarded(const char* app, const std::function<int()>& body);

// Runs a job inside run_app_guarded's body: configuration, plugin, data and usage errors pass
// through (run_app_guarded maps them); any other std::runtime_error, a failure while the job
// runs (a file that cannot be written, a failed generation), becomes AppError(5, context +
// its message).
void run_job(const std::function<void()>& job, const std::string& context = "");

// "APP: MESSAGE\n(see APP --help)\n" on stderr; returns 2.
int report_usage_error(const char* app, const std::string& message);

// One non-blank line of a JSONL file.
struct JsonlLine {
  std::size_t line = 0;  // 1-based line number in the file (blank lines count)
  std::string text;      // without the line end (a trailing '\r' is removed)
};

// The non-blank lines of `path` ("-" = stdin). Throws std::invalid_argument
// "cannot open FLAG 'PATH'" (e.g. FLAG = "--input") when the file cannot be opened.
std::vector<JsonlLine> read_jsonl_lines(const std::string& path, const std::string& flag);

// Parses `text` as one JSON object into `out` (nlohmann::json or nlohmann::ordered_json).
// Returns "" on success, else what is wrong: "JSON nested deeper than ...", "not valid JSON:
// ...", "expected a JSON object, got array".
template <class Json>
std::string parse_json_object(std::string_view text, Json& out) {
  if (auto deep = json_nesting_error(text)) return *deep;
  try {
    out = Json::parse(text.begin(), text.end());
  } catch (const typename Json::parse_error& e) {
    return std::string("not valid JSON: ") + e.what();
  }
  if (!out.is_object()) return std::string("expected a JSON object, got ") + out.type_name();
  return "";
}

// A job's configuration: built-in defaults < --config files (in order) < --set overrides
// (log_level, when not empty, as log.level; resume as run.resume), validated; then console
// logging at log.level and model.path resolved (a run directory means its newest
// checkpoint, see resolve_model_path). Throws sdk::ConfigError naming file, line and key.
sdk::ConfigValue load_job_config(const std::vector<std::string>& files, std::vector<std::string> overrides,
                                 const std::string& log_level, bool resume);

// A job's run directory (run.output_dir): writes the effective configuration there
// (effective_config.yaml, atomically) and starts the log file (log.file). Returns the folder.
std::string prepare_run_dir(const sdk::ConfigValue& config);

// An app's plugin search path: the --plugin-path folders first, then what the configuration
// implies (plugins.paths, the --config files' folders, $GRPO_PLUGIN_PATH, the install's
// plugin folder; see plugin_search_path in core/runtime/components.h).
PluginSearchPath app_plugin_search_path(const sdk::ConfigValue& config, const std::vector<std::string>& config_files,
                                        const std::vector<std::string>& plugin_paths);

}  // namespace grpo::core
