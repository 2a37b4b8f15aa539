// Builds the components a config names: verifiers, and (when configured) the advantage
// estimator, policy loss, KL estimator and rollout backend. Used by grpo-run's --validate
// and by the trainer, so that a config that validates is a config that runs.
#pragma once

#include <cstdint>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/plugin/plugin_registry.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/verifier.h"

namespace grpo::core {

struct VerifierSlot {
  std::string name;      // as written in the config ("exact_match", "my_plugin/score")
  std::string key_path;  // "verifiers[0]"
  double weight = 1.0;
  std::shared_ptr<sdk::Verifier> verifier;
};

// Torch-side components are held type-erased here so that this header stays torch-free;
// the trainer casts them with std::static_pointer_cast<sdk::PolicyLoss> etc.
struct ConfiguredComponent {
  std::string name;
  std::string key_path;
  sdk::ComponentKind kind;
  std::shared_ptr<void> object;  // null when the slot is not configured
};

struct RuntimeComponents {
  std::vector<VerifierSlot> verifiers;
  std::vector<ConfiguredComponent> others;  // advantage, policy_loss, kl_estimator, rollout backend
};

// The search path a config implies: plugins.paths, the --config files' folders,
// $GRPO_PLUGIN_PATH, the install's plugin dir.
PluginSearchPath plugin_search_path(const sdk::ConfigValue& root, const std::vector<std::string>& config_files);

// Loads every entry of plugins.load. Throws PluginError naming the entry's key path.
void load_configured_plugins(PluginRegistry& registry, const sdk::ConfigValue& root);

// Training runs the rollout backend on the policy it trains: when model.path is set, a null
// rollout.backend becomes the native backend, and the native backend's `model`, `tokenizer`,
// `dtype` and `logprobs` options default to model.path, tokenizer.path, model.dtype and
// `scaled` (the trainer's log-probs use the sampling temperature). Options the config gives win.
// Used by grpo-run's --validate and by the run, so both construct the same components.
void fill_rollout_backend_defaults(sdk::ConfigValue& root);

// Constructs every configured component. Throws PluginError or sdk::ConfigError.
RuntimeComponents create_components(PluginRegistry& registry, const sdk::ConfigValue& root);

// The node at root.k1.k2..., or nullptr when a key is missing or a parent is not a map.
const sdk::ConfigValue* find_config_node(const sdk::ConfigValue& root, std::initializer_list<const char*> keys);

// Throws sdk::ConfigError "<node's file:line:col>: <key>: <message>" (without a location when
// `node` is null): errors about a value found by find_config_node.
[[noreturn]] void fail_at_key(const sdk::ConfigValue* node, const std::string& key, const std::string& message);

// `value`, the integer key section.key of `root`, when it is >= min; else a ConfigError naming
// the key: "expected an integer >= MIN, got VALUE".
std::int64_t int_at_least(const sdk::ConfigValue& root, const char* section, const char* key, std::int64_t value,
                          std::int64_t min);

// fail_at_key for the key path {"train", "pack_length"} of `root` ("train.pack_length").
[[noreturn]] void fail_at_config_key(const sdk::ConfigValue& root, std::initializer_list<const char*> keys,
                                     const std::string& message);

// The component name of a component node: the string itself, or its `name` key.
std::string component_name(const sdk::ConfigValue& node, const std::string& key_path);

}  // namespace grpo::core
