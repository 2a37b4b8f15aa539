// Logging set-up: spdlog to the console (stderr) and, once a run directory exists, to a
// log file in it. Plugins log through host_log_callback (see grpo/sdk/log.h).
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

// The callback handed to plugins in sdk::HostInfo.
extern "C" void host_log_callback(int level, const char* plugin, const char* message);

}  // namespace grpo::core
