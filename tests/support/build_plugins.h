// One PluginRegistry per test program over the build's plugin folder only (nothing from the
// environment or an installed prefix): plugins are loaded the way a run loads them.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/verifier.h"

#include <nlohmann/json.hpp>

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

// One option of a component's config map, as the YAML loader would produce it: `value` is an
// unquoted scalar, a quoted string with `quoted`, and YAML null when it is an unquoted "null".
struct PluginOption {
  std::string key;
  std::string value;
  bool quoted = false;
};

inline grpo::sdk::ConfigValue plugin_options(const std::vector<PluginOption>& options) {
  grpo::sdk::ConfigValue node = grpo::sdk::ConfigValue::make_map();
  for (const PluginOption& o : options)
    node.set(o.key, !o.quoted && o.value == "null" ? grpo::sdk::ConfigValue::make_null()
                                                   : grpo::sdk::ConfigValue::make_scalar(o.value, {}, o.quoted));
  return node;
}

// Constructs `name` from the build's plugins with `options`, as the config at `key_path` would.
template <typename Interface>
std::shared_ptr<Interface> create_component(const std::string& name, const std::vector<PluginOption>& options,
                                            const std::string& key_path) {
  const grpo::sdk::ConfigValue node = plugin_options(options);
  std::shared_ptr<Interface> component = build_plugin_registry().create<Interface>(name, &node, key_path);
  if (!component) throw std::runtime_error("create returned null for '" + name + "'");
  return component;
}

// One verify() call the way the trainer makes it: `ground_truth` is the row's JSON value.
inline grpo::sdk::VerifierResult verify_once(const grpo::sdk::Verifier& verifier, const std::string& completion,
                                             const nlohmann::json& ground_truth, const std::string& dataset = "test") {
  const std::string truth = ground_truth.dump();
  grpo::sdk::VerifierInput in;
  in.prompt = "p";
  in.completion = completion;
  in.ground_truth = truth;
  in.dataset = dataset;
  in.metadata = "{}";
  return verifier.verify(in);
}

}  // namespace grpo::testing
