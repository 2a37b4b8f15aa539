// A Hugging Face `config.json` for the decoder-only families grpo-cpp implements, parsed and
// checked up front into one ModelConfig: the shared blocks of core/model/transformer.h read
// its feature fields, and each family's file under core/model/families/ says which features
// its config.json turns on (docs/models.md has the table). Any field whose value would change
// the model's semantics in a way this implementation does not reproduce is an error naming
// the file and key, never silently ignored. Torch-free.
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

enum class ModelArchitecture { Qwen2, Qwen3, Llama, Mistral, Gemma2, Gemma3, Phi3, Olmo2, Qwen2Moe, Qwen3Moe };

// The architecture names config.json's `architectures` may hold (the *ForCausalLM ones).
const std::vector<std::string>& supported_architectures();
// The model_type values, in the same order ("qwen2", ..., "gemma3_text", ...).
const std::vector<std::string>& supported_model_types();
const char* architecture_name(ModelArchitecture arch);        // "Qwen2ForCausalLM", ...
const char* architecture_model_type(ModelArchitecture arch);  // "qwen2", ...

// What the model puts on top of the decoder's final hidden states.
enum class ModelHead {
  kCausalLM,                // *ForCausalLM: logits over the vocabulary
  kSequenceClassification,  // *ForSequenceClassification: `score` [num_labels, hidden] at the last real token
};

// RoPE frequency scaling, as transformers' modeling_rope_utils names and computes it.
enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3, kLongrope };
const char* rope_type_name(RopeType type);  // config.json's "rope_type"

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;  // linear, dynamic, yarn, llama3; longrope: derived (see below)
  // llama3 and yarn; longrope: the short/long switch point. 0 = max_position_embeddings.
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;               // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;              // yarn (DeepSeek-style; 0 = unset)
  bool truncate = true;                                   // yarn
  std::optional<double> attention_factor;                 // yarn, longrope: cos/sin multiplier; unset = derived
  std::vector<double> short_factor, long_factor;          // longrope: per frequency, head_dim / 2 each
};

struct RotaryConfig {
  double theta = 10000.0;
  RopeScaling scaling;
};

enum class Activation { kSilu, kGeluTanh };  // config.json's hidden_act / hidden_activation
enum class NormPlacement {
  kPreNorm,   // h = x + attn(norm(x)); h + mlp(norm(h))                     (Llama, Qwen, Mistral, Phi-3)
  kSandwich,  // h = x + norm(attn(norm(x))); h + norm(mlp(norm(h)))         (Gemma 2/3)
  kPostNorm,  // h = x + norm(attn(x)); h + norm(mlp(h))                     (OLMo 2)
};
// Where an RMSNorm's weight multiplies (all normalize in float32 first): the three transformers has.
enum class RmsNormKind {
  kCastThenScale,   // w * norm(x).to(dtype)                  (Llama, Qwen, Mistral, Phi-3)
  kScaleThenCast,   // (w * norm(x)).to(dtype), w in float32  (OLMo 2)
  kOffsetInFloat32, // (norm(x) * (1 + w)).to(dtype)          (Gemma; the stored w = 0 is the unit scale)
};
enum class QkNorm {
  kNone,
  kPerHead,   // RMSNorm over head_dim, each head, before rotary (Qwen3, Gemma 3)
  kAllHeads,  // RMSNorm over all heads' q (and k) at once, before the split (OLMo 2)
};

struct ModelConfig {
  ModelArchitecture architecture = ModelArchitecture::Qwen2;
  ModelHead head = ModelHead::kCausalLM;
  int64_t num_labels = 0;  // kSequenceClassification
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
  RopeScaling rope_scaling;
  // Gemma 3: the rotary of the sliding-window layers (rope_local_base_freq, no scaling).
  std::optional<RotaryConfig> local_rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2: always; Llama: attention_bias
  bool o_proj_bias = false;  // Llama: attention_bias
  bool mlp_bias = false;     // Llama: mlp_bias
  QkNorm qk_norm = QkNorm::kNone;

  // ---- block features (the family files set them) ----
  Activation hidden_act = Activation::kSilu;
  NormPlacement norm_placement = NormPlacement::kPreNorm;
  RmsNormKind rms_norm_kind = RmsNormKind::kCastThenScale;
  double embedding_multiplier = 1.0;  // Gemma: sqrt(hidden_size), in the hidden states' dtype
  double attention_scale = 0.0;       // softmax scale; 0 = head_dim^-0.5 (Gemma: query_pre_attn_scalar^-0.5)
  double attn_logit_softcapping = 0.0;   // Gemma 2: scores = c * tanh(scores / c); 0 = off
  double final_logit_softcapping = 0.0;  // Gemma 2: logits = c * tanh(logits / c); 0 = off
  bool fused_qkv = false;      // Phi-3: one qkv_proj [q; k; v]
  bool fused_gate_up = false;  // Phi-3: one gate_up_proj [gate; up]
  // Sliding-window attention: a query at position i sees keys j with i - window < j <= i in the
  // layers marked here (empty: none). Mistral: all layers; Gemma: alternating.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  bool is_sliding(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
           sliding_layers[static_cast<std::size_t>(layer)];
  }

  // ---- mixture of experts (Qwen2-MoE, Qwen3-MoE) ----
  int64_t num_experts = 0;  // 0 = dense
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0 = no shared expert
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.0;  // as config.json gives it (the trainer decides whether to use it)
  std::vector<bool> moe_layers;       // per layer: a sparse MoE block (else the dense MLP)
  bool is_moe(int64_t layer) const {
    return num_experts > 0 && layer < static_cast<int64_t>(moe_layers.size()) && moe_layers[static_cast<std::size_t>(layer)];
  }

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
