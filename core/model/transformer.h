// The decoder-only transformer's shared blocks and the model over them, with Hugging Face's
// semantics and parameter names (so a checkpoint's tensors map one-to-one onto
// named_parameters()). Which features a family uses (norm placement, activation, fused
// projections, sliding windows, experts, soft-capping, RoPE scaling) is read from ModelConfig,
// whose fields the family files of core/model/families/ set; docs/models.md has the table.
// Long because the blocks, the caches they write and the model share one set of contracts.
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

#include <optional>
#include <vector>

#include "core/model/logprobs.h"
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
  torch::Tensor allowed_sliding;  // the same inside the sliding window (models with sliding layers)
};

// cos/sin of one pass's positions, [B, T, head_dim] float32: the model's rotary and, for Gemma 3's
// sliding layers, the local one.
struct RotaryTables {
  torch::Tensor cos, sin;
  torch::Tensor local_cos, local_sin;  // undefined unless the config has a local_rope
};

// transformers' RMSNorm: normalize in float32, then apply the weight as `kind` says (model_config.h).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, RmsNormKind kind = RmsNormKind::kCastThenScale);
  torch::Tensor forward(const torch::Tensor& x);
  RmsNormKind kind() const { return kind_; }
  torch::Tensor weight;

 private:
  double eps_;
  RmsNormKind kind_;
};
TORCH_MODULE(RMSNorm);

// Rotary embedding tables (not parameters: transformers does not save inv_freq either), with
// every RoPE scaling of transformers' modeling_rope_utils. Dynamic NTK and longrope depend on the
// length of the call, as transformers' dynamic_rope_update makes them: a call whose largest
// position p has p + 1 > max_position_embeddings (dynamic) or > original_max_position_embeddings
// (longrope) uses the extended frequencies, for all its tokens. Yarn and longrope scale cos/sin
// by their attention factor.
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);  // the model's rotary
  RotaryEmbedding(const ModelConfig& config, const RotaryConfig& rotary);  // another (Gemma 3's local one)
  // cos, sin: [B, T, head_dim] in float32 for position_ids [B, T].
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& position_ids) const;
  // The inverse frequencies a call of `seq_len` tokens uses (0: the call-independent ones).
  torch::Tensor inv_freq(int64_t seq_len = 0) const;
  double attention_factor() const { return attention_factor_; }

 private:
  int64_t head_dim_;
  int64_t max_position_embeddings_;
  double theta_;
  RopeScaling scaling_;
  torch::Tensor inv_freq_;       // [head_dim / 2] float32: short calls (or all, for the static scalings)
  torch::Tensor long_inv_freq_;  // longrope: calls past original_max_position_embeddings
  double attention_factor_ = 1.0;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionLayout& layout,
                        KVCache* cache, const SlotStep* slots = nullptr);

  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Projection qkv_proj{nullptr};              // fused_qkv instead of q/k/v
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qk_norm

 private:
  int64_t layer_index_;
  int64_t num_heads_, num_kv_heads_, head_dim_;
  double scaling_;
  double softcap_;
  int64_t window_;        // sliding window of this layer; 0 = full attention
  bool local_rotary_;     // uses RotaryTables' local tables
  QkNorm qk_norm_kind_;
};
TORCH_MODULE(Attention);

// The gated MLP: down(act(gate(x)) * up(x)), act = silu (SwiGLU) or tanh-GELU (GeGLU); Phi-3
// computes gate and up with one fused gate_up_proj.
class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& config, int64_t layer_index, int64_t intermediate_size);
  torch::Tensor forward(const torch::Tensor& x);
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Projection gate_up_proj{nullptr};  // fused_gate_up instead of gate/up

 private:
  Activation act_;
};
TORCH_MODULE(MLP);

// A sparse mixture-of-experts block (transformers' Qwen2MoeSparseMoeBlock): the router's softmax
// over all experts in float32, the top num_experts_per_tok kept (renormalized when
// norm_topk_prob) and cast to the hidden dtype, each token's experts' outputs summed with those
// weights; plus, when configured, a shared expert scaled by sigmoid(shared_expert_gate(x)).
// Each expert runs once per pass on the tokens routed to it.
class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  SparseMoeBlockImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x);
  Projection gate{nullptr};  // the router: [num_experts, hidden]
  torch::nn::ModuleList experts{nullptr};
  MLP shared_expert{nullptr};
  Projection shared_expert_gate{nullptr};
  // The router logits [tokens, num_experts] of the last forward while recording is on (the
  // load-balancing loss reads them); undefined otherwise.
  torch::Tensor last_router_logits;
  bool record_router_logits = false;

 private:
  int64_t top_k_;
  bool norm_topk_prob_;
};
TORCH_MODULE(SparseMoeBlock);

// transformers' load_balancing_loss_func (Switch Transformer eq. 4-6, as the Qwen MoE models
// train with it): num_experts * sum_e f_e * P_e over the router logits of every MoE layer, f_e the
// fraction of (token, choice) pairs routed to expert e, P_e its mean router probability.
// token_mask [tokens] (optional, 1 = real token) restricts both means to real tokens.
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& token_mask = {});

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionLayout& layout,
                        KVCache* cache, const SlotStep* slots = nullptr);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};             // dense layers
  SparseMoeBlock moe{nullptr};  // MoE layers (registered as "mlp", as transformers names it)
  // Which norms exist follows config.norm_placement: pre-norm has input_layernorm and
  // post_attention_layernorm; the sandwich adds pre_ and post_feedforward_layernorm; post-norm
  // has post_attention_layernorm and post_feedforward_layernorm only.
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};

 private:
  NormPlacement placement_;
  torch::Tensor feed_forward(const torch::Tensor& x) { return moe ? moe(x) : mlp(x); }
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
  // Logits [B, T, vocab] = hidden_states() followed by logits().
  torch::Tensor forward(const torch::Tensor& input_ids, const AttentionLayout& layout,
                        KVCache* cache = nullptr);
  // The LM head on final hidden states [..., hidden] -> [..., vocab], in the model's dtype; when the
  // config soft-caps (final_logit_softcapping), capped in float32 and returned in float32. Every logit of the model goes through here or through
  // token_logprobs with logprob_options().
  torch::Tensor logits(const torch::Tensor& hidden) const;
  // `options` with what the model adds to its logits (the soft-cap), for token_logprobs.
  LogProbOptions logprob_options(LogProbOptions options) const;

  // *ForSequenceClassification: the `score` head [B, num_labels] in float32 at each row's last
  // token that is not the pad token (transformers' rule: the rightmost position whose id differs
  // from pad_token_id; without a pad token, the row's last real token of attention_mask).
  torch::Tensor sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  // Mixture of experts: while on, every MoE block keeps its router logits of the last pass
  // (router_logits() returns them, one [tokens, num_experts] per MoE layer, in layer order).
  void set_record_router_logits(bool on);
  std::vector<torch::Tensor> router_logits() const;

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

  // The LM head's weight [vocab, hidden] (the embedding matrix when tied). A sequence-classification
  // model has none: its score head's weight stands in where only the device and dtype matter.
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
  Projection lm_head{nullptr};  // null when tie_word_embeddings or a classification head
  Projection score{nullptr};    // kSequenceClassification only

 private:
  // input_ids [R, T] into slots [first, first + R): the body of decode_slots and extend_slots.
  torch::Tensor forward_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first);

  // Embeddings of input_ids, scaled by embedding_multiplier (Gemma) in the embeddings' dtype.
  torch::Tensor embed(const torch::Tensor& input_ids);
  RotaryTables rotary_tables(const torch::Tensor& position_ids) const;

  ModelConfig config_;
  RotaryEmbedding rotary_;
  std::optional<RotaryEmbedding> local_rotary_;
  bool gradient_checkpointing_ = false;
  std::shared_ptr<LayerParameterResidency> residency_;
};
TORCH_MODULE(CausalLM);

}  // namespace grpo::core
