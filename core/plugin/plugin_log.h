// How plugins log: the host hands this callback to every plugin (sdk::HostInfo::log, see
// grpo/sdk/log.h); messages go to the process's spdlog logger tagged with the plugin's name,
// so they land in the console and the run's log file with the host's own lines.
#pragma once

namespace grpo::core {

// level: 0 trace, 1 debug, 2 info, 3 warn, anything else error.
extern "C" void host_log_callback(int level, const char* plugin, const char* message);

}  // namespace grpo::core
