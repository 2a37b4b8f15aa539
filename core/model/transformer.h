// The decoder-only transformer's shared blocks and the model over them, with Hugging Face's
// semantics and parameter names (so a checkpoint's tensors map one-to-one onto
// named_parameters()). Which features a family uses (norm placement, activation, fused
// projections, sliding windows, experts, soft-capping, RoPE scaling) is read from ModelConfig,
// whose fields the family files of core/model/families/ set; docs/models.md has the table.
// One forward serves three batch layouts (core/model/attention/layout.h): padded, packed and
// decoding against a KVCache or SlotKVCache. Attention itself (cache writes, masks, kernels)
// is the seam of core/model/attention/attention.h.
//
// Thread-safety: a CausalLM is a torch::nn::Module; concurrent forwards on one instance are
// safe only under torch::NoGradGuard with no KVCache shared between threads.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "core/model/attention/attention.h"
#include "core/model/logprobs.h"
#include "core/model/model_config.h"
#include "core/model/projection.h"
#include "core/model/rotary.h"

namespace grpo::core {

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

// The projections, q/k norms and rotary of a layer's attention; attend() does the rest.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, int64_t layer_index);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionContext& context);
  const AttentionSpec& spec() const { return spec_; }

  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Projection qkv_proj{nullptr};              // fused_qkv instead of q/k/v
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qk_norm

 private:
  AttentionSpec spec_;
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
  Activation activation() const { return act_; }
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Projection gate_up_proj{nullptr};  // fused_gate_up instead of gate/up

 private:
  Activation act_;
};
TORCH_MODULE(MLP);

// A sparse mixture-of-experts block (transformers' Qwen2MoeSparseMoeBlock): the router's logits
// and softmax over all experts in float32 (transformers computes the logits in the model's dtype;
// in bf16 that flips near-tied routing, see forward()), the top num_experts_per_tok kept (renormalized when
// norm_topk_prob) and cast to the hidden dtype, each token's experts' outputs summed with those
// weights; plus, when configured, a shared expert scaled by sigmoid(shared_expert_gate(x)).
// Each expert runs once per pass on the tokens routed to it: on CUDA all of them in one grouped
// matrix product per projection where LibTorch has one, else one after the other (core/model/moe.h).
// Defined in core/model/moe.cpp.
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
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionContext& context);
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
  // A decode step whose shapes do not depend on the slots' lengths, so that a CUDA graph can
  // replay it (the rollout engine's decode graphs): rows [0, rows) of `cache`, `past` [rows]
  // int64 on the model's device holds each row's cached length (its token's position), and
  // every row attends over the cache's whole capacity with the keys past its length masked.
  // Reads nothing back to the host and leaves the cache's lengths alone: the caller advances
  // the rows that are real (a graph's bucket pads with rows that are not). Needs
  // torch::NoGradGuard, room for one more token in every row, and a model for which
  // fixed_decode_unsupported() is empty.
  torch::Tensor decode_slots_fixed(const torch::Tensor& input_ids, const torch::Tensor& past, SlotKVCache& cache);
  // Why this model cannot take fixed-shape decode steps ("" when it can): a pass that reads
  // the device from the host (MoE experts that run one by one there: on the CPU, and on CUDA
  // where they cannot run as grouped matrix products, core/model/moe.h; length-dependent RoPE). It depends on the weights' device and dtype, the
  // autocast state and whether LoRA adapters are on, as they are when it is asked.
  std::string fixed_decode_unsupported() const;

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

  // Which attention kernels the passes use (core/model/attention/backend.h); auto by default.
  void set_attention_backend(AttentionBackend backend) { attention_backend_ = backend; }
  AttentionBackend attention_backend() const { return attention_backend_; }

  // Where the parameters live between uses (above); null (the default): always in place.
  void set_parameter_residency(std::shared_ptr<LayerParameterResidency> residency) { residency_ = std::move(residency); }

  Decoder model{nullptr};
  Projection lm_head{nullptr};  // null when tie_word_embeddings or a classification head
  Projection score{nullptr};    // kSequenceClassification only

 private:
  // input_ids [R, T] into slots [first, first + R): the body of decode_slots and extend_slots.
  torch::Tensor forward_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first);
  // The layers over `step` (its past and keys set; the masks are filled in here).
  torch::Tensor run_slots(const torch::Tensor& input_ids, SlotStep& step);

  // Embeddings of input_ids, scaled by embedding_multiplier (Gemma) in the embeddings' dtype.
  torch::Tensor embed(const torch::Tensor& input_ids);
  RotaryTables rotary_tables(const torch::Tensor& position_ids) const;

  ModelConfig config_;
  RotaryEmbedding rotary_;
  std::optional<RotaryEmbedding> local_rotary_;
  bool gradient_checkpointing_ = false;
  AttentionBackend attention_backend_ = AttentionBackend::kAuto;
  std::shared_ptr<LayerParameterResidency> residency_;
};
TORCH_MODULE(CausalLM);

}  // namespace grpo::core
