// One PluginRegistry per test program over the build's plugin folder only (nothing from the
// environment or an installed prefix): plugins are loaded the way a run loads them.
#pragma once

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"

namespace grpo::testing {

inline grpo::core::PluginRegistry& build_plugin_registry() {
  static grpo::core::PluginRegistry* registry = [] {
    grpo::core::PluginSearchPath sp;
    sp.explicit_dirs = {GRPO_PLUGIN_BUILD_DIR};
    sp.use_environment = false;
    sp.use_install_dir = false;
    return new grpo::core::PluginRegistry(sp);  // never destroyed: components may outlive main()
  }();
  return *registry;
}

}  // namespace grpo::testing
