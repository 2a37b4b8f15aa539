// Logging from plugins into the host's log (console and run directory), without linking
// spdlog: the host hands a callback over at registration time.
#pragma once

#include <cstdio>
#include <string>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4 };

// C calling convention so that the callback stays valid across compilers of one ABI.
extern "C" typedef void (*HostLogFn)(int level, const char* plugin, const char* message);

namespace detail {
// One copy per shared object (plugins hide every symbol but the entry point), set by the
// registration trampoline in plugin.h.
struct PluginLogSink {
  HostLogFn fn = nullptr;
  const char* plugin = "";
};
inline PluginLogSink& plugin_log_sink() {
  static PluginLogSink sink;
  return sink;
}
}  // namespace detail

// Thread-safe (the host's sink is). Before registration, messages go to stderr.

inline void log(LogLevel level, const std::string& message) {
  const detail::PluginLogSink& sink = detail::plugin_log_sink();
  if (sink.fn) {
    sink.fn(static_cast<int>(level), sink.plugin, message.c_str());
  } else {
    std::fputs(message.c_str(), stderr);
    std::fputc('\n', stderr);
  }
}
inline void log_debug(const std::string& m) { log(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log(LogLevel::kError, m); }

GRPO_SDK_NAMESPACE_END
