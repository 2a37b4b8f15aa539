// Logging set-up: spdlog to the console (stderr) and, once a run directory exists, to a
// log file in it. Plugins log through the same logger (core/plugin/plugin_log.h).
//
// Every sink set up here writes a message's invalid UTF-8 bytes as \xNN (escape_invalid_utf8 of
// core/util/strings.h): messages quote untrusted text (data rows, model output, plugin messages),
// and the log must stay valid UTF-8. Well-formed text is written unchanged.
#pragma once

#include <string>

namespace grpo::core {

// Console sink at `level` ("trace", "debug", "info", "warn", "error"). Idempotent.
// Throws std::invalid_argument for an unknown level.
void init_console_logging(const std::string& level);

// Data-parallel runs: console lines carry "[rank N]"; ranks other than 0 log warnings and
// errors only (rank 0 reports the run) unless the level is debug or trace.
void set_log_rank(int rank);

// Adds a file sink (appending) at the same level. Throws std::runtime_error naming the path.
void add_log_file(const std::string& path);

}  // namespace grpo::core
