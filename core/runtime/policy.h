// The policy model and its tokenizer as a configuration names them (model.*, tokenizer.*):
// checked up front by `grpo-run --validate` (files exist and parse) and loaded by the run.
#pragma once

#include <optional>
#include <string>

#include "core/model/checkpoint.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct PolicySpec {
  std::string model_path;          // "" = no model configured
  std::string dtype = "float32";   // model.dtype
  std::string tokenizer_path;      // resolved: tokenizer.path, else model.path
  std::string chat_template_name;  // tokenizer.chat_template_name
  const sdk::ConfigValue* model_node = nullptr;      // for error locations
  const sdk::ConfigValue* tokenizer_node = nullptr;  // the node tokenizer_path came from
};

// model.path may name a run directory of grpo-sft or grpo-run instead of a model folder: when
// it has no config.json but holds a complete checkpoint, model.path (and with it the rollout
// backend's model and the tokenizer) becomes the newest checkpoint folder, logged. Call once,
// right after the configuration is loaded.
void resolve_model_path(sdk::ConfigValue& root);

// Reads model.* and tokenizer.* of a validated configuration.
PolicySpec policy_spec(const sdk::ConfigValue& root);

struct PolicyFiles {
  ModelConfig model_config;
  std::optional<Tokenizer> tokenizer;
};

// Parses config.json and loads the tokenizer (cheap: no weights are read). Problems are
// sdk::ConfigError naming the config key's location and the file's own error, e.g.
//   "run.yaml:3:9: model.path: models/q/config.json: use_sliding_window: ... not supported".
PolicyFiles check_policy_files(const PolicySpec& spec);

struct LoadedPolicy {
  LoadedModel model;
  std::optional<Tokenizer> tokenizer;
};

// check_policy_files() and then the weights.
LoadedPolicy load_policy(const PolicySpec& spec);

}  // namespace grpo::core
