// What the command-line programs of apps/ share: the exit codes and their mapping
// (exit_codes.h), running a program's body under that mapping, reading JSONL input, parsing one
// line as a JSON object, a job's configuration and run directory, and a program's plugin
// search path. Compiled into the grpo_cli library with every program's code.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "apps/cli/exit_codes.h"
#include "core/plugin/search_path.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "grpo/sdk/config_value.h"

namespace grpo::cli {

// Runs a program's body; what it throws becomes an exit code and a message (exit_status_of),
// handed to `report` (grpo-run logs it; run_app_guarded prints it).
int run_guarded(const std::function<int()>& body, const std::function<void(const ExitStatus&)>& report);

// run_guarded printing "APP: MESSAGE" on stderr.
int run_app_guarded(const char* app, const std::function<int()>& body);

// Runs a program's job inside run_app_guarded's body: the exceptions exit_status_of names pass
// through; a std::logic_error (a bug) passes through too (exit code 1). Any other exception
// derived from std::exception, a failure while the job runs (a file that cannot be written, a
// failed generation, out of memory), becomes AppError(kExitRuntime, context + its message).
void run_job(const std::function<void()>& job, const std::string& context = "");

// "APP: MESSAGE\n(see APP --help)\n" on stderr; returns kExitUsage.
int report_usage_error(const char* app, const std::string& message);

// One non-blank line of a JSONL file.
struct JsonlLine {
  std::size_t line = 0;  // 1-based line number in the file (blank lines count)
  std::string text;      // without the line end (a trailing '\r' is removed)
};

// The non-blank lines of `path` ("-" = stdin). Throws std::invalid_argument
// "cannot open FLAG 'PATH'" (e.g. FLAG = "--input") when the file cannot be opened, and
// "FLAG 'PATH' is a folder; ..." for a folder.
std::vector<JsonlLine> read_jsonl_lines(const std::string& path, const std::string& flag);

// Parses `text` as one JSON object into `out` (nlohmann::json or nlohmann::ordered_json).
// Returns "" on success, else what is wrong: "JSON nested deeper than ...", "not valid JSON:
// ...", "expected a JSON object, got array".
template <class Json>
std::string parse_json_object(std::string_view text, Json& out) {
  if (auto deep = core::json_nesting_error(text)) return *deep;
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

// A job's run directory, held for the job's life: one run per directory.
struct RunDir {
  std::string path;     // run.output_dir
  core::FileLock lock;  // on RUN_DIR/.lock; released when this is destroyed or the process ends
};

// Prepares a job's run directory (run.output_dir, checked first: check_run_output_dir): creates
// it, takes its lock (RUN_DIR/.lock, flock, holding this process's PID and host: a second run on
// the directory, fresh or resumed, would delete the first's checkpoint in progress), removes the
// staging folders of interrupted checkpoint saves (core/model/checkpoint_dirs.h) and starts the
// log file (log.file). The effective configuration is written later, once the job's checks
// have passed (core/train/run_dir.h). In data-parallel jobs rank 0 alone calls it. A directory
// another process holds is AppError(kExitConfig, "... in use by PID N on HOST ..."); one that
// cannot be created, a ConfigError naming run.output_dir.
[[nodiscard]] RunDir prepare_run_dir(const sdk::ConfigValue& config);

// An app's plugin search path: the --plugin-path folders first, then what the configuration
// implies (plugins.paths, the --config files' folders, $GRPO_PLUGIN_PATH, the install's
// plugin folder; see plugin_search_path in core/runtime/components.h).
core::PluginSearchPath app_plugin_search_path(const sdk::ConfigValue& config, const std::vector<std::string>& config_files,
                                        const std::vector<std::string>& plugin_paths);

}  // namespace grpo::cli
