// grpo-cpp SDK version and ABI version.
//
// The ABI version is what the plugin host checks at load time:
//   - ABI major must be equal on both sides (a major bump breaks every plugin);
//   - host ABI minor must be >= the plugin's ABI minor (minor bumps only add).
// The release version (GRPO_SDK_VERSION_STRING) is informational.
#pragma once

#define GRPO_SDK_ABI_MAJOR 1
#define GRPO_SDK_ABI_MINOR 2

#define GRPO_SDK_VERSION_MAJOR 0
#define GRPO_SDK_VERSION_MINOR 1
#define GRPO_SDK_VERSION_PATCH 0
#define GRPO_SDK_VERSION_STRING "0.1.0"

// Every SDK symbol lives in grpo::sdk::abi_v<major>. Code names it as grpo::sdk::X; the
// inline namespace puts the ABI major into mangled names, so mixing two majors in one
// process fails at link/load time instead of corrupting memory.
#define GRPO_SDK_NAMESPACE_BEGIN \
  namespace grpo {               \
  namespace sdk {                \
  inline namespace abi_v1 {
#define GRPO_SDK_NAMESPACE_END \
  }                            \
  }                            \
  }
