#include "core/plugin/plugin_log.h"

#include <spdlog/spdlog.h>

namespace grpo::core {

extern "C" void host_log_callback(int level, const char* plugin, const char* message) {
  const char* who = (plugin && *plugin) ? plugin : "plugin";
  const char* what = message ? message : "";
  switch (level) {
    case 0: spdlog::trace("[{}] {}", who, what); break;
    case 1: spdlog::debug("[{}] {}", who, what); break;
    case 2: spdlog::info("[{}] {}", who, what); break;
    case 3: spdlog::warn("[{}] {}", who, what); break;
    default: spdlog::error("[{}] {}", who, what); break;
  }
}

}  // namespace grpo::core
