#include "core/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <torch/version.h>

#include "core/model/activation_checkpoint.h"
#include "core/model/backward_callback.h"

namespace grpo::core {

// ---- modules ------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, RmsNormKind kind) : eps_(eps), kind_(kind) {
  weight = register_parameter("weight", kind == RmsNormKind::kOffsetInFloat32 ? torch::zeros({dim}) : torch::ones({dim}));
}

namespace {

// h * rsqrt(mean(h², -1) + eps), h in float32. On CUDA, LibTorch 2.4+'s rms_norm (a fused
// forward and backward kernel in recent versions, _fused_rms_norm) instead of five kernels each
// way; the CPU keeps the composite, with which every CPU test and checkpoint was made.
torch::Tensor rms_normalize(const torch::Tensor& h, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (h.is_cuda()) return at::rms_norm(h, {h.size(-1)}, std::nullopt, eps);
#endif
  return h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

}  // namespace

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // float32 in, a float32 weight applied after the normalization: the fused kernel applies it
  // too ((x * rstd) * w, as the two ops round it), and its backward forms the weight's gradient,
  // which took three more kernels. Other dtypes round h to x's dtype before the weight: below.
  if (x.is_cuda() && x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
      kind_ != RmsNormKind::kOffsetInFloat32)
    return at::rms_norm(x, {x.size(-1)}, weight, eps_);
#endif
  const auto h = rms_normalize(x.to(torch::kFloat32), eps_);
  switch (kind_) {
    case RmsNormKind::kOffsetInFloat32: return (h * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
    case RmsNormKind::kScaleThenCast: return (weight.to(torch::kFloat32) * h).to(x.scalar_type());
    case RmsNormKind::kCastThenScale: break;
  }
  return weight * h.to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t layer_index)
    : local_rotary_(c.local_rope.has_value() && c.is_sliding(layer_index)), qk_norm_kind_(c.qk_norm) {
  spec_.layer = layer_index;
  spec_.num_heads = c.num_attention_heads;
  spec_.num_kv_heads = c.num_key_value_heads;
  spec_.head_dim = c.head_dim;
  spec_.scaling = c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  spec_.softcap = c.attn_logit_softcapping;
  spec_.window = c.is_sliding(layer_index) ? c.sliding_window : 0;
  auto projection = [&](ProjectionRole role, int64_t in, int64_t out, bool bias) {
    return register_module(projection_name(role), make_projection({role, layer_index, in, out, bias}));
  };
  const int64_t head_dim_ = spec_.head_dim;
  const int64_t q_out = spec_.num_heads * head_dim_, kv_out = spec_.num_kv_heads * head_dim_;
  if (c.fused_qkv) {
    qkv_proj = projection(ProjectionRole::kQkv, c.hidden_size, q_out + 2 * kv_out, c.qkv_bias);
  } else {
    q_proj = projection(ProjectionRole::kQuery, c.hidden_size, q_out, c.qkv_bias);
    k_proj = projection(ProjectionRole::kKey, c.hidden_size, kv_out, c.qkv_bias);
    v_proj = projection(ProjectionRole::kValue, c.hidden_size, kv_out, c.qkv_bias);
  }
  o_proj = projection(ProjectionRole::kOutput, q_out, c.hidden_size, c.o_proj_bias);
  if (c.qk_norm == QkNorm::kPerHead) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps, c.rms_norm_kind));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps, c.rms_norm_kind));
  } else if (c.qk_norm == QkNorm::kAllHeads) {
    q_norm = register_module("q_norm", RMSNorm(q_out, c.rms_norm_eps, c.rms_norm_kind));
    k_norm = register_module("k_norm", RMSNorm(kv_out, c.rms_norm_eps, c.rms_norm_kind));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionContext& context) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = spec_.num_heads, Hkv = spec_.num_kv_heads, D = spec_.head_dim;
  const int64_t q_out = H * D, kv_out = Hkv * D;
  torch::Tensor q, k, v;
  if (qkv_proj) {  // Phi-3: [q; k; v] along the output features
    auto qkv = qkv_proj(x);
    q = qkv.narrow(-1, 0, q_out);
    k = qkv.narrow(-1, q_out, kv_out);
    v = qkv.narrow(-1, q_out + kv_out, kv_out);
  } else {
    q = q_proj(x);
    k = k_proj(x);
    v = v_proj(x);
  }
  if (qk_norm_kind_ == QkNorm::kAllHeads) {  // OLMo 2: over all heads, before the split
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.reshape({B, T, H, D});
  k = k.reshape({B, T, Hkv, D});
  v = v.reshape({B, T, Hkv, D});
  if (qk_norm_kind_ == QkNorm::kPerHead) {  // Qwen3, Gemma 3: per head, before rotary
    q = q_norm(q);
    k = k_norm(k);
  }
  const torch::Tensor& cos = local_rotary_ ? rotary.local_cos : rotary.cos;
  const torch::Tensor& sin = local_rotary_ ? rotary.local_sin_signed : rotary.sin_signed;
  auto c = cos.to(x.scalar_type());
  auto s = sin.to(x.scalar_type());
  q = apply_rotary(q, c, s);
  k = apply_rotary(k, c, s);
  auto out = attend(q, k, v, spec_, context);  // [B, T, H, D]
  return o_proj(out.reshape({B, T, q_out}));
}

MLPImpl::MLPImpl(const ModelConfig& c, int64_t layer_index, int64_t intermediate_size) : act_(c.hidden_act) {
  auto projection = [&](ProjectionRole role, int64_t in, int64_t out) {
    return register_module(projection_name(role), make_projection({role, layer_index, in, out, c.mlp_bias}));
  };
  if (c.fused_gate_up) {
    gate_up_proj = projection(ProjectionRole::kGateUp, c.hidden_size, 2 * intermediate_size);
  } else {
    gate_proj = projection(ProjectionRole::kGate, c.hidden_size, intermediate_size);
    up_proj = projection(ProjectionRole::kUp, c.hidden_size, intermediate_size);
  }
  down_proj = projection(ProjectionRole::kDown, intermediate_size, c.hidden_size);
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  torch::Tensor gate, up;
  if (gate_up_proj) {  // Phi-3: [gate; up] along the output features
    auto both = gate_up_proj(x);
    const int64_t half = both.size(-1) / 2;
    gate = both.narrow(-1, 0, half);
    up = both.narrow(-1, half, half);
  } else {
    gate = gate_proj(x);
    up = up_proj(x);
  }
  auto activated = act_ == Activation::kGeluTanh ? torch::gelu(gate, "tanh") : torch::silu(gate);
  return down_proj(activated * up);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer_index) : placement_(c.norm_placement) {
  self_attn = register_module("self_attn", Attention(c, layer_index));
  if (c.is_moe(layer_index)) moe = register_module("mlp", SparseMoeBlock(c, layer_index));
  else mlp = register_module("mlp", MLP(c, layer_index, c.intermediate_size));
  auto norm = [&](const char* name) {
    return register_module(name, RMSNorm(c.hidden_size, c.rms_norm_eps, c.rms_norm_kind));
  };
  if (placement_ != NormPlacement::kPostNorm) input_layernorm = norm("input_layernorm");
  post_attention_layernorm = norm("post_attention_layernorm");
  if (placement_ == NormPlacement::kSandwich) pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
  if (placement_ != NormPlacement::kPreNorm) post_feedforward_layernorm = norm("post_feedforward_layernorm");
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionContext& context) {
  switch (placement_) {
    case NormPlacement::kPreNorm: {
      auto h = x + self_attn(input_layernorm(x), rotary, context);
      return h + feed_forward(post_attention_layernorm(h));
    }
    case NormPlacement::kSandwich: {
      auto h = x + post_attention_layernorm(self_attn(input_layernorm(x), rotary, context));
      return h + post_feedforward_layernorm(feed_forward(pre_feedforward_layernorm(h)));
    }
    case NormPlacement::kPostNorm: {
      auto h = x + post_attention_layernorm(self_attn(x, rotary, context));
      return h + post_feedforward_layernorm(feed_forward(h));
    }
  }
  throw std::logic_error("unknown norm placement");
}

DecoderImpl::DecoderImpl(const ModelConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, c.rms_norm_kind));
}

CausalLMImpl::CausalLMImpl(ModelConfig config) : config_(std::move(config)), rotary_(config_) {
  if (config_.local_rope) local_rotary_.emplace(config_, *config_.local_rope);
  model = register_module("model", Decoder(config_));
  if (config_.head == ModelHead::kSequenceClassification) {
    if (config_.num_labels <= 0) throw std::invalid_argument("a sequence-classification model needs num_labels > 0");
    score = register_module("score", make_projection({ProjectionRole::kScore, -1, config_.hidden_size, config_.num_labels, false}));
  } else if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", make_projection({ProjectionRole::kLmHead, -1, config_.hidden_size, config_.vocab_size, false}));
  }
}

torch::Tensor CausalLMImpl::lm_head_weight() const {
  if (score) return score->weight;
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

torch::Tensor CausalLMImpl::logits(const torch::Tensor& hidden) const {
  if (score) throw std::logic_error("a sequence-classification model has no LM head: use sequence_scores()");
  auto z = torch::matmul(hidden, lm_head_weight().t());
  const double cap = config_.final_logit_softcapping;
  if (cap <= 0) return z;
  // In float32, as token_logprobs caps: a bf16 tanh near the cap (spacing 0.125 at 30) would make
  // the engine's log-probs differ from the trainer's by more than the matmul's rounding.
  return torch::tanh(z.to(torch::kFloat32) / cap) * cap;
}

LogProbOptions CausalLMImpl::logprob_options(LogProbOptions options) const {
  options.logit_softcap = config_.final_logit_softcapping;
  return options;
}

torch::Tensor CausalLMImpl::sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  if (!score) throw std::logic_error("sequence_scores needs a *ForSequenceClassification model");
  if (input_ids.dim() != 2 || attention_mask.sizes() != input_ids.sizes())
    throw std::invalid_argument("sequence_scores: input_ids and attention_mask must both be [batch, tokens]");
  auto hidden = hidden_states(input_ids, AttentionLayout::padded(attention_mask));  // [B, T, H]
  const int64_t T = input_ids.size(1);
  auto index = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(input_ids.device())).view({1, T});
  auto real = attention_mask.to(torch::kBool);
  // transformers' *ForSequenceClassification: the rightmost token that is not pad_token_id
  // (argmax of index * non_pad); without a pad token, the last real token of the mask.
  auto keep = config_.pad_token_id ? (input_ids != *config_.pad_token_id) & real : real;
  auto last = (index * keep.to(torch::kLong)).argmax(-1);  // [B]
  auto at_last = hidden.gather(1, last.view({-1, 1, 1}).expand({-1, 1, hidden.size(2)})).squeeze(1);
  return score(at_last).to(torch::kFloat32);
}

void CausalLMImpl::set_record_router_logits(bool on) {
  for (const auto& layer : *model->layers) {
    auto& moe = layer->as<DecoderLayer>()->moe;
    if (!moe) continue;
    moe->record_router_logits = on;
    if (!on) moe->last_router_logits = torch::Tensor();
  }
}

std::vector<torch::Tensor> CausalLMImpl::router_logits() const {
  std::vector<torch::Tensor> out;
  for (const auto& layer : *model->layers) {
    const auto& moe = layer->as<DecoderLayer>()->moe;
    if (moe && moe->last_router_logits.defined()) out.push_back(moe->last_router_logits);
  }
  return out;
}

torch::Tensor CausalLMImpl::embed(const torch::Tensor& input_ids) {
  auto h = model->embed_tokens(input_ids);
  if (config_.embedding_multiplier == 1.0) return h;
  // Gemma: the multiplier is rounded to the hidden states' dtype first, as transformers does.
  return h * torch::scalar_tensor(config_.embedding_multiplier, h.options());
}

RotaryTables CausalLMImpl::rotary_tables(const torch::Tensor& position_ids) const {
  return rotary_tables_from(rotary_.cos_sin(position_ids),
                            local_rotary_ ? local_rotary_->cos_sin(position_ids) : std::pair<torch::Tensor, torch::Tensor>{});
}

namespace {

// The generators the projection hooks inside `module` draw from in a training pass (a LoRA
// adapter's dropout; the adapters of one model share one), each once.
std::vector<at::Generator> hook_training_generators(torch::nn::Module& module) {
  std::vector<at::Generator> generators;
  for (const auto& m : module.modules()) {
    const auto* projection = dynamic_cast<const ProjectionImpl*>(m.get());
    const ProjectionHook* hook = projection ? projection->hook() : nullptr;
    const at::Generator* generator = hook ? hook->training_generator() : nullptr;
    if (!generator) continue;
    bool seen = false;
    for (const auto& g : generators) seen = seen || g == *generator;
    if (!seen) generators.push_back(*generator);
  }
  return generators;
}

}  // namespace

torch::Tensor CausalLMImpl::hidden_states(const torch::Tensor& input_ids, const AttentionLayout& layout, KVCache* cache) {
  if (input_ids.dim() != 2) throw std::invalid_argument("input_ids must be [batch, tokens]");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  if (!layout.position_ids.defined() || layout.position_ids.sizes() != input_ids.sizes())
    throw std::invalid_argument("layout.position_ids must have the shape of input_ids");
  if (cache && torch::GradMode::is_enabled())
    throw std::invalid_argument("decoding with a KVCache needs torch::NoGradGuard: the cache is written in place, "
                                "which autograd cannot differentiate through");
  if (layout.is_packed()) {
    if (cache) throw std::invalid_argument("a packed batch cannot be decoded against a KV cache");
    if (B != 1 || layout.cu_seqlens.back() != T)
      throw std::invalid_argument("a packed batch is one row whose length is the sum of its sequence lengths");
  } else {
    const int64_t past = cache ? cache->length() : 0;
    if (!layout.key_padding_mask.defined() || layout.key_padding_mask.size(0) != B ||
        layout.key_padding_mask.size(1) != past + T)
      throw std::invalid_argument("layout.key_padding_mask must be [batch, cached + new tokens]");
    if (cache && (cache->batch_size() != B || past + T > cache->capacity()))
      throw std::invalid_argument("KV cache is for batch " + std::to_string(cache->batch_size()) + " and holds " +
                                  std::to_string(cache->capacity()) + " tokens; got batch " + std::to_string(B) +
                                  " needing " + std::to_string(past + T));
  }
  const RotaryTables rotary = rotary_tables(layout.position_ids);
  AttentionContext context;
  context.layout = layout;
  context.cache = cache;
  context.backend = attention_backend_;
  const std::shared_ptr<LayerParameterResidency> residency = residency_;  // the backward nodes keep it
  if (residency) residency->acquire(-1);
  auto h = embed(input_ids);
  const bool checkpoint = gradient_checkpointing_ && !cache && torch::GradMode::is_enabled();
  int64_t index = 0;
  for (const auto& layer : *model->layers) {
    const int64_t i = index++;
    if (residency) {
      residency->acquire(i);
      h = call_in_backward(h, [residency, i] { residency->release(i); });  // after the layer's backward
    }
    if (!checkpoint) {
      h = layer->as<DecoderLayer>()->forward(h, rotary, context);
    } else {
      // Backward runs the layer again, after this function has returned: the lambda owns what it uses.
      auto decoder_layer = std::dynamic_pointer_cast<DecoderLayerImpl>(layer);
      h = checkpointed([decoder_layer, rotary, context](const torch::Tensor& x) {
        return decoder_layer->forward(x, rotary, context);
      }, h, hook_training_generators(*decoder_layer));
    }
    if (residency) {
      h = call_in_backward(h, [residency, i] { residency->acquire(i); });  // before the layer's backward
      residency->release(i);
    }
  }
  if (cache) cache->advance(layout.key_padding_mask.narrow(1, cache->length(), T));
  return model->norm(h);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const AttentionLayout& layout, KVCache* cache) {
  auto h = hidden_states(input_ids, layout, cache);
  return logits(h);
}

AttentionLayout CausalLMImpl::decode_layout(const KVCache& cache, int64_t new_tokens, const torch::Tensor& new_mask) const {
  auto device = cache.next_positions().device();
  auto mask = new_mask.defined() ? new_mask.to(device).to(torch::kBool)
                                 : torch::ones({cache.batch_size(), new_tokens}, torch::TensorOptions().dtype(torch::kBool).device(device));
  if (mask.dim() != 2 || mask.size(0) != cache.batch_size() || mask.size(1) != new_tokens)
    throw std::invalid_argument("decode_layout: new_mask must be [batch, new_tokens]");
  AttentionLayout layout;
  layout.position_ids = (cache.next_positions().unsqueeze(1) + mask.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
  layout.key_padding_mask = torch::cat({cache.key_mask(), mask}, 1);
  return layout;
}

void CausalLMImpl::init_weights(double std, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    const std::string& name = item.key();
    auto is = [&](const char* suffix) {
      const std::string s = suffix;
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (is("norm.weight") || is("layernorm.weight")) {
      p.fill_(config_.rms_norm_kind == RmsNormKind::kOffsetInFloat32 ? 0.0 : 1.0);  // Gemma's (1 + w): w = 0 is the unit scale
    } else if (is(".bias")) {
      p.zero_();
    } else {
      auto values = at::normal(0.0, std, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32));
      p.copy_(values);
    }
  }
}

}  // namespace grpo::core
