// Builds the components a config names: verifiers, and (when configured) the advantage
// estimator, policy loss, KL estimator and rollout backend. Used by grpo-run's --validate
// and by the trainer, so that a config that validates is a config that runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config_access.h"
#include "core/plugin/plugin_registry.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/tool.h"
#include "grpo/sdk/verifier.h"

namespace grpo::core {

struct VerifierSlot {
  std::string name;      // as written in the config ("exact_match", "my_plugin/score")
  std::string key_path;  // "verifiers[0]"
  double weight = 1.0;
  std::shared_ptr<sdk::Verifier> verifier;
  // The entry's `label` (a string or a list): the row labels it answers to instead of its
  // name, so that several entries of one verifier (python_reward) serve different datasets.
  std::vector<std::string> labels;
  // Read once from the verifier (ABI 1.1; the defaults for plugins of ABI minor 0).
  sdk::ScoreRange score_range = sdk::ScoreRange::kUnit;
  std::uint32_t concurrent_calls = 0;
};

// One `tools` entry (ABI 1.2): a tool the policy may call in its rollouts.
struct ToolSlot {
  std::string name;       // the component as written in the config ("python", "my_plugin/search")
  std::string call_name;  // what the policy calls it: the entry's `as`, else the component part of `name`
  std::string key_path;   // "tools[0]"
  std::shared_ptr<sdk::Tool> tool;
  std::string description;  // tool->description(), read once
  std::string parameters;   // tool->parameters(): a JSON Schema object text, checked at construction
};

// One configured component: what the config named, where, and the object (null when the slot
// is not configured). The object is the registry's shared_ptr, which keeps its plugin
// library mapped. Torch-side interfaces are only forward-declared here (grpo/sdk/plugin.h),
// so this header stays torch-free; callers that use the object include its SDK header.
template <class Interface>
struct ComponentSlot {
  std::string name;      // as written in the config ("grpo", "my_plugin/loss")
  std::string key_path;  // "algorithm.advantage"
  std::shared_ptr<Interface> object;

  explicit operator bool() const { return object != nullptr; }
  Interface& operator*() const { return *object; }
  Interface* operator->() const { return object.get(); }
  Interface* get() const { return object.get(); }
};

struct RuntimeComponents {
  std::vector<VerifierSlot> verifiers;
  std::vector<ToolSlot> tools;                         // tools
  ComponentSlot<sdk::RolloutBackend> rollout_backend;  // rollout.backend
  // The backend resumes parked samples itself (ABI 1.2 RolloutBackend::generate_turns); read
  // only from backends of plugins built for ABI minor >= 2.
  bool backend_supports_turns = false;
  ComponentSlot<sdk::AdvantageEstimator> advantage;    // algorithm.advantage
  ComponentSlot<sdk::PolicyLoss> policy_loss;          // algorithm.policy_loss
  ComponentSlot<sdk::KlEstimator> kl_estimator;        // algorithm.kl_estimator

  // "key_path=name" of every configured slot besides the verifiers, in construction order.
  std::vector<std::string> configured_slots() const;
};

// The search path a config implies: plugins.paths, the --config files' folders,
// $GRPO_PLUGIN_PATH, the install's plugin dir.
PluginSearchPath plugin_search_path(const sdk::ConfigValue& root, const std::vector<std::string>& config_files);

// Loads every entry of plugins.load. Throws PluginError naming the entry's key path.
void load_configured_plugins(PluginRegistry& registry, const sdk::ConfigValue& root);

// Training runs the rollout backend on the policy it trains: when model.path is set, a null
// rollout.backend becomes the native backend, and the native backend's `model`, `tokenizer`,
// `dtype` and `logprobs` options default to model.path, tokenizer.path, model.dtype and
// `scaled` (the trainer's log-probs use the sampling temperature); the openai backend's `model`
// and `tokenizer` the same way (its server computes). Options the config gives win.
// Used by grpo-run's --validate and by the run, so both construct the same components.
void fill_rollout_backend_defaults(sdk::ConfigValue& root);

// Constructs one `verifiers` entry (`options`: its map, or nullptr for the defaults): reads
// the host keys `weight` and `label`, creates the verifier and reads its ABI 1.1 facts
// (score_range, concurrent_calls) when its plugin was built for ABI minor >= 1.
VerifierSlot create_verifier_slot(PluginRegistry& registry, const std::string& name, const sdk::ConfigValue* options,
                                  const std::string& key_path);

// Constructs one `tools` entry: the host key `as` renames the tool for the policy; the tool's
// description and parameters are read once, and a parameters text that is not a usable JSON
// Schema object is a PluginError naming the entry.
ToolSlot create_tool_slot(PluginRegistry& registry, const std::string& name, const sdk::ConfigValue* options,
                          const std::string& key_path);

// Constructs every configured component. Throws PluginError or sdk::ConfigError.
RuntimeComponents create_components(PluginRegistry& registry, const sdk::ConfigValue& root);

}  // namespace grpo::core
