// The policy model and its tokenizer as a configuration names them (model.*, tokenizer.*):
// checked up front by `grpo-run --validate` (files exist and parse) and loaded by the run.
#pragma once

#include <optional>
#include <string>

#include "core/model/checkpoint.h"
#include "core/model/precision.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct PolicySpec {
  std::string model_path;          // "" = no model configured
  std::string dtype = "float32";   // model.dtype: what the weights are stored (loaded, updated, saved) in
  Precision precision = Precision::kFp32;  // train.precision, resolved against model.dtype
  torch::Device device = torch::kCPU;      // model.device (data-parallel: see bind_local_cuda_device)
  std::string tokenizer_path;      // resolved: tokenizer.path, else model.path
  std::string chat_template = "auto";  // tokenizer.chat_template
  const sdk::ConfigValue* model_node = nullptr;      // for error locations
  const sdk::ConfigValue* tokenizer_node = nullptr;  // the node tokenizer_path came from
  const sdk::ConfigValue* chat_template_node = nullptr;
};

// model.path may name a run directory of grpo-sft or grpo-run instead of a model folder: when
// it has no config.json but holds a complete checkpoint, model.path (and with it the rollout
// backend's model and the tokenizer) becomes the newest checkpoint folder, logged. Call once,
// right after the configuration is loaded.
void resolve_model_path(sdk::ConfigValue& root);

// Reads model.*, tokenizer.* and train.precision of a validated configuration, and checks
// them before any model is loaded (sdk::ConfigError naming the key):
//   train.precision auto = fp32 for model.dtype float32, bf16 for bfloat16; fp32 and
//   bf16-mixed need float32 weights (the masters), bf16 needs model.dtype bfloat16;
//   model.device cpu | cuda | cuda:N must exist in this build and on this machine.
// A bf16 precision on a CPU without avx512_bf16/amx_bf16 is a warning: it runs, slowly.
PolicySpec policy_spec(const sdk::ConfigValue& root);

// train.precision resolved against model.dtype (the rules and errors of policy_spec).
Precision training_precision(const sdk::ConfigValue& root);

// model.device of a validated configuration as a device that exists (errors as policy_spec).
torch::Device policy_device(const sdk::ConfigValue& root);

// A data-parallel rank's device: model.device `cuda` (and the rollout backend's `device` when
// it is `cuda`) becomes cuda:LOCAL_RANK, so the ranks of a host use one GPU each.
void bind_local_cuda_device(sdk::ConfigValue& root, int local_rank);

struct PolicyFiles {
  ModelConfig model_config;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // tokenizer.chat_template resolved (with a tokenizer)
};

// Parses config.json, loads the tokenizer and resolves and parses the chat template (cheap: no
// weights are read; `auto` without a template in the tokenizer's files is a logged warning and
// the built-in chatml). Problems are sdk::ConfigError naming the config key's location and the
// file's own error, e.g.
//   "run.yaml:3:9: model.path: models/q/config.json: use_sliding_window: ... not supported".
PolicyFiles check_policy_files(const PolicySpec& spec);

struct LoadedPolicy {
  LoadedModel model;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
};

// check_policy_files() and then the weights.
LoadedPolicy load_policy(const PolicySpec& spec);

}  // namespace grpo::core
