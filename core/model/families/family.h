// One file per model family in this folder, over the shared blocks of core/model/transformer.h
// (as llama.cpp's src/models/ and vLLM's model_executor/models/ are laid out). A family file says
// which block features its config.json turns on (norm placement, activation, fused projections,
// sliding windows, experts, ...), reads the keys only it has, and writes them back on save; the
// keys every family shares (sizes, heads, RoPE, token ids) are read once, in model_config.cpp.
// A new family is a new file here plus one line in registry.cpp. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/model/model_config.h"

namespace grpo::core {

// Typed access to config.json keys; every error names the file and the key.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& root, std::string source) : root_(root), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const nlohmann::json* find(const std::string& key) const;  // null when absent or null
  // Whether the key is in the file at all, null included (a class default applies only when it is not).
  bool has(const std::string& key) const { return root_.contains(key); }

  int64_t require_int(const std::string& key) const;  // a positive integer
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  double require_positive(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  std::optional<int64_t> get_token_id(const std::string& key) const;
  std::vector<int64_t> get_token_ids(const std::string& key) const;
  // A list of non-negative integers below `bound` (e.g. layer indices).
  std::vector<int64_t> get_index_list(const std::string& key, int64_t bound) const;

 private:
  int64_t positive_int(const nlohmann::json& v, const std::string& key) const;
  const nlohmann::json& root_;
  std::string source_;
};

struct ModelFamily {
  ModelArchitecture arch;
  const char* causal_lm;                // config.json's architectures[0], e.g. "MistralForCausalLM"
  const char* sequence_classification;  // its reward-model head, e.g. "MistralForSequenceClassification"
  const char* model_type;               // e.g. "mistral"
  // The family's head_dim when config.json has none (0: hidden_size / num_attention_heads).
  int64_t default_head_dim;
  // Sets the block features and reads the family's own keys (the shared ones are read already).
  void (*read)(const ConfigReader& reader, ModelConfig& config);
  // Writes the family's own keys into config.json's object (the shared ones are written already).
  void (*write)(const ModelConfig& config, nlohmann::json& out);

  // config.json's architectures[0] for a model of this family with `head`.
  const char* architecture(ModelHead head) const {
    return head == ModelHead::kCausalLM ? causal_lm : sequence_classification;
  }
};

// Every family, in ModelArchitecture order (registry.cpp).
const std::vector<const ModelFamily*>& model_families();
const ModelFamily& family_of(ModelArchitecture arch);

// ---- pieces several families share (family.cpp) ----

// Writes `key` unless config.json has it already: what a model was loaded with is never rewritten
// (its own spelling included), and a config made from scratch gets every key transformers needs.
inline void set_default(nlohmann::json& out, const char* key, nlohmann::json value) {
  if (!out.contains(key)) out[key] = std::move(value);
}

// Which layers use sliding-window attention: config.json's `layer_types` when present
// ("full_attention" / "sliding_attention", one per layer), else `fallback(layer)`. Also reads
// `sliding_window` (when any layer slides: required, unless the family has a default_window).
void read_sliding_layers(const ConfigReader& r, ModelConfig& c, const std::function<bool(int64_t layer)>& fallback,
                         int64_t default_window = 0);
// Writes `sliding_window` and `layer_types` back.
void write_sliding_layers(const ModelConfig& c, nlohmann::json& out);
// Refuses a sliding window that config.json turns on where this family has none (or, with
// `unsupported_here`, where transformers has one that grpo-cpp does not implement).
void refuse_sliding_window(const ConfigReader& r, const char* family, bool unsupported_here = false);
// The Qwen2/Qwen3 rule: `use_sliding_window` makes layers >= `max_window_layers` slide.
void read_qwen_sliding_window(const ConfigReader& r, ModelConfig& c);
void write_qwen_sliding_window(const ModelConfig& c, nlohmann::json& out);
// Qwen2-MoE / Qwen3-MoE's expert keys (num_experts, ..., mlp_only_layers, decoder_sparse_step).
void read_qwen_moe(const ConfigReader& r, ModelConfig& c);
void write_qwen_moe(const ModelConfig& c, nlohmann::json& out);

}  // namespace grpo::core
