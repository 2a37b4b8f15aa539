// A Hugging Face `config.json` for the decoder-only architectures grpo-cpp implements
// (Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM), parsed and checked up front.
// Any field whose value would change the model's semantics in a way this implementation
// does not reproduce (sliding-window attention, an unknown rope_scaling type, a non-SiLU
// activation, ...) is an error naming the file and key, never silently ignored.
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace grpo::core {

class ModelConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ModelArchitecture { Qwen2, Qwen3, Llama };

// The architecture names config.json's `architectures` may hold, in that enum's order.
const std::vector<std::string>& supported_architectures();
const char* architecture_name(ModelArchitecture arch);    // "Qwen2ForCausalLM", ...
const char* architecture_model_type(ModelArchitecture arch);  // "qwen2", "qwen3", "llama"

// Llama-3's frequency-dependent RoPE scaling (transformers' `_compute_llama3_parameters`).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelArchitecture architecture = ModelArchitecture::Qwen2;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // explicit `head_dim`, else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2: always; Llama: attention_bias
  bool o_proj_bias = false;  // Llama: attention_bias
  bool mlp_bias = false;     // Llama: mlp_bias
  bool qk_norm = false;      // Qwen3: per-head RMSNorm on q and k before rotary
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // `eos_token_id` may be a number or a list
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype = "float32";  // as stored in the file; the runtime dtype is chosen by the caller

  // The file's JSON text, kept so that a save writes back every key the user had
  // (transformers_version, initializer_range, ...) with only our changes applied.
  std::string source_json;

  int64_t num_kv_groups() const { return num_attention_heads / num_key_value_heads; }
};

// Parses config.json text. `source` names the file in errors ("model/config.json").
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
ModelConfig load_model_config(const std::string& path);

// The config.json transformers would write for `config`: the keys of source_json (when
// present) updated with this struct's values; `torch_dtype` set to `dtype_name`.
std::string model_config_to_json(const ModelConfig& config, const std::string& dtype_name);

}  // namespace grpo::core
