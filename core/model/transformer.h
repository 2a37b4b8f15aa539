// The decoder-only transformer behind Qwen2ForCausalLM, Qwen3ForCausalLM and
// LlamaForCausalLM, with Hugging Face's semantics and parameter names (so a checkpoint's
// tensors map one-to-one onto named_parameters()).
//
// One forward serves three batch layouts (AttentionLayout):
//   padded   [B, T] with an attention mask (left or right padding; positions count only
//            real tokens, as transformers' generate does),
//   packed   one row holding several sequences back to back: positions restart and
//            attention stays inside each sequence (cost sum(L_i^2), not N^2),
//   decoding incremental steps against a KVCache (one shared length, padded rows), or
//            against a SlotKVCache (one sequence per row, each with its own length: the
//            rollout engine's continuous batching).
//
// Thread-safety: a CausalLM is a torch::nn::Module; concurrent forwards on one instance are
// safe only under torch::NoGradGuard with no KVCache shared between threads.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "core/model/model_config.h"
#include "core/model/projection.h"

namespace grpo::core {

// Who attends to whom, and at which positions.
struct AttentionLayout {
  torch::Tensor position_ids;      // [B, T] int64: rotary positions of the input tokens
  torch::Tensor key_padding_mask;  // padded/decoding: [B, S] bool, S = cached + T keys; true = real token
  std::vector<int64_t> cu_seqlens;  // packed: B == 1 and sequence i is tokens [cu[i], cu[i+1])

  bool is_packed() const { return !cu_seqlens.empty(); }

  // A padded batch: attention_mask [B, T] (1 = token, 0 = padding, any side).
  static AttentionLayout padded(const torch::Tensor& attention_mask);
  // A packed row of sequences with these lengths (sum = the row's length).
  static AttentionLayout packed(const std::vector<int64_t>& lengths);
};

// Per-layer key/value storage for incremental decoding (inference only: forward() with a
// cache requires torch::NoGradGuard). Keys are stored after rotary.
// The mask of real tokens grows with the cache: forward() appends the new tokens' entries.
class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t batch_size, int64_t capacity, torch::Dtype dtype,
          torch::Device device = torch::kCPU);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch_size() const { return batch_size_; }
  // [B, length] bool: which cached positions hold real tokens.
  torch::Tensor key_mask() const { return key_mask_.narrow(1, 0, length_); }
  // Rotary position the next token of each row gets: [B] int64.
  torch::Tensor next_positions() const { return next_position_; }

  // Drops everything (reuse the buffers for a new batch of the same size).
  void reset();

 private:
  friend class CausalLMImpl;
  friend class AttentionImpl;
  friend class SlotKVCache;
  int64_t batch_size_;
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<torch::Tensor> keys_;    // per layer [B, Hkv, capacity, D]
  std::vector<torch::Tensor> values_;  // per layer [B, Hkv, capacity, D]
  torch::Tensor key_mask_;             // [B, capacity] bool
  torch::Tensor next_position_;        // [B] int64
};

// The rollout engine's cache: one sequence per row ("slot"), each with its own length, so
// sequences join and leave the decode batch independently (continuous batching). Decoding
// runs on rows [0, rows) (CausalLMImpl::decode_slots); the engine keeps its live sequences
// at the front with move_slot(). Inference only, like KVCache.
class SlotKVCache {
 public:
  SlotKVCache(const ModelConfig& config, int64_t num_slots, int64_t capacity, torch::Dtype dtype,
              torch::Device device = torch::kCPU);

  int64_t num_slots() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const { return capacity_; }
  // Tokens cached in `slot` (= the rotary position its next token gets).
  int64_t length(int64_t slot) const { return lengths_.at(static_cast<std::size_t>(slot)); }
  // Bytes held by the key/value buffers.
  int64_t bytes() const;

  // Copies the first `length` cached tokens of row `src_row` of `src` (a prefill's cache,
  // whose rows hold real tokens from position 0) into `slot`, replacing its contents.
  void load_prefix(int64_t slot, const KVCache& src, int64_t src_row, int64_t length);
  // Copies slot `from` (its `length(from)` tokens) over slot `to`; `from` keeps its data.
  void move_slot(int64_t from, int64_t to);
  void clear(int64_t slot) { lengths_.at(static_cast<std::size_t>(slot)) = 0; }

 private:
  friend class CausalLMImpl;
  friend class AttentionImpl;
  int64_t capacity_;
  std::vector<torch::Tensor> keys_;    // per layer [slots, Hkv, capacity, D]
  std::vector<torch::Tensor> values_;  // per layer [slots, Hkv, capacity, D]
  std::vector<int64_t> lengths_;       // per slot
  // Per slot: positions [0, written) may hold data of earlier sequences. A decode step reads
  // values past a row's length (weighted 0), and 0 * NaN is NaN, so a new sequence zeroes what
  // an earlier one left there: one bad step cannot poison later sequences.
  std::vector<int64_t> written_;

  void zero_tail(int64_t slot, int64_t from);
};

// One step of slots [first, first + rows) of a SlotKVCache, T new tokens per row (built by
// CausalLMImpl::decode_slots and extend_slots).
struct SlotStep {
  SlotKVCache* cache = nullptr;
  int64_t first = 0;
  int64_t rows = 0;
  torch::Tensor past;  // [rows] int64 on the model's device: each row's cached length
  int64_t keys = 0;    // max(past) + T: keys the step attends over
  torch::Tensor allowed;  // [rows, 1, T, keys] bool: key position <= the query token's position
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary embedding tables (not parameters: transformers does not save inv_freq either).
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  // cos, sin: [B, T, head_dim] in float32 for position_ids [B, T].
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& position_ids) const;
  const torch::Tensor& inv_freq() const { return inv_freq_; }

 private:
  torch::Tensor inv_freq_;  // [head_dim / 2] float32
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionLayout& layout, KVCache* cache, const SlotStep* slots = nullptr);

  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3 only

 private:
  int64_t layer_index_;
  int64_t num_heads_, num_kv_heads_, head_dim_;
  double scaling_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x);
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const AttentionLayout& layout, KVCache* cache, const SlotStep* slots = nullptr);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The `model.` submodule of a *ForCausalLM.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& config);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

// Parameters that are materialized only while a layer uses them (dist.sharding: full,
// core/dist/sharding.h). hidden_states() calls acquire(i) before decoder layer i's forward and
// release(i) after it; in a pass with autograd, backward acquires layer i again before the
// layer's own backward and releases it after (core/model/backward_callback.h). Layer -1 (the
// embeddings, the final norm, the LM head) is acquired at the start of every pass and released
// by the owner, not by the model: the head and the embeddings are used at both ends of a pass.
// Calls come in the same order on every data-parallel rank that runs the same passes.
class LayerParameterResidency {
 public:
  virtual ~LayerParameterResidency() = default;
  virtual void acquire(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
};

class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(ModelConfig config);

  // Final hidden states [B, T, hidden_size] (after the last norm). With a cache, the new
  // tokens' keys/values are appended and layout.key_padding_mask must cover cached + new
  // tokens (decode_layout() builds it).
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const AttentionLayout& layout,
                              KVCache* cache = nullptr);
  // Logits [B, T, vocab] = hidden_states() followed by the LM head.
  torch::Tensor forward(const torch::Tensor& input_ids, const AttentionLayout& layout,
                        KVCache* cache = nullptr);

  // One decode step of slots [0, rows) of `cache`: input_ids [rows] holds each slot's next
  // token (rotary position = the slot's length). Returns final hidden states [rows, hidden]
  // and appends the tokens' keys/values (each slot's length grows by one). Needs
  // torch::NoGradGuard and room for one more token in every row.
  torch::Tensor decode_slots(const torch::Tensor& input_ids, SlotKVCache& cache);
  // Feeds input_ids [R, T] to slots [first, first + R) that already hold sequences (resumed
  // rollouts: the tokens of tools' observations) in one forward: positions continue from each
  // slot's length, each token attends to its slot's cache and the new tokens before it. Returns
  // final hidden states [R, T, hidden]; every slot's length grows by T. Needs torch::NoGradGuard.
  torch::Tensor extend_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first);

  // The LM head's weight [vocab, hidden] (the embedding matrix when tied).
  torch::Tensor lm_head_weight() const;
  const ModelConfig& config() const { return config_; }
  const RotaryEmbedding& rotary() const { return rotary_; }

  // The layout for the next `new_tokens` of every row of `cache`: positions continue
  // from the cache, and `new_mask` [B, new_tokens] (default all real) marks real tokens.
  AttentionLayout decode_layout(const KVCache& cache, int64_t new_tokens,
                                const torch::Tensor& new_mask = {}) const;

  // Hugging Face-style initialization: normal(0, std) weights, zero biases, unit norms.
  void init_weights(double std, uint64_t seed);

  // Activation checkpointing (core/model/activation_checkpoint.h) of every decoder layer in
  // passes with autograd on and no KV cache: forward keeps each layer's input only and
  // backward recomputes the layer. Off by default; inference paths are unaffected.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // Where the parameters live between uses (above); null (the default): always in place.
  void set_parameter_residency(std::shared_ptr<LayerParameterResidency> residency) { residency_ = std::move(residency); }

  Decoder model{nullptr};
  Projection lm_head{nullptr};  // null when tie_word_embeddings

 private:
  // input_ids [R, T] into slots [first, first + R): the body of decode_slots and extend_slots.
  torch::Tensor forward_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first);

  ModelConfig config_;
  RotaryEmbedding rotary_;
  bool gradient_checkpointing_ = false;
  std::shared_ptr<LayerParameterResidency> residency_;
};
TORCH_MODULE(CausalLM);

}  // namespace grpo::core
