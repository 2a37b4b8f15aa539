#include "core/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/model/activation_checkpoint.h"
#include "core/model/backward_callback.h"
#include "core/model/lora.h"

namespace grpo::core {

namespace {

// transformers' rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the last dim.
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // x [B, heads, T, D]; cos/sin [B, 1, T, D] already in x's dtype.
  return x * cos + rotate_half(x) * sin;
}

// softmax(q k^T * scaling + mask) v with grouped-query heads, as transformers' eager path:
// scores in the model dtype, softmax in float32, cast back.
//   q [B, H, T, D], k/v [B, Hkv, S, D], allowed [B or 1, 1, T, S] bool (true = may attend).
torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& allowed, double scaling) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  const int64_t rep = H / Hkv;
  // The rep query heads of KV head g (heads g*rep .. g*rep+rep-1, as in transformers'
  // repeat_kv) share its keys and values: fold them into the query rows, so that K and V are
  // read in place instead of being expanded (copied) rep times per call.
  auto qg = q.reshape({B, Hkv, rep * T, D});
  auto scores = (torch::matmul(qg, k.transpose(-1, -2)) * scaling).view({B, Hkv, rep, T, S});
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type()).view({B, Hkv, rep * T, S});
  auto out = torch::matmul(probs, v);  // [B, Hkv, rep * T, D]
  return out.view({B, H, T, D});
}

}  // namespace

// ---- AttentionLayout ----------------------------------------------------------------------

AttentionLayout AttentionLayout::padded(const torch::Tensor& attention_mask) {
  if (attention_mask.dim() != 2) throw std::invalid_argument("attention_mask must be [batch, tokens]");
  AttentionLayout layout;
  auto mask = attention_mask.to(torch::kLong);
  // Positions count real tokens only (left padding gets the same positions as no padding).
  layout.position_ids = (mask.cumsum(1) - 1).clamp_min(0);
  layout.key_padding_mask = mask.to(torch::kBool);
  return layout;
}

AttentionLayout AttentionLayout::packed(const std::vector<int64_t>& lengths) {
  if (lengths.empty()) throw std::invalid_argument("a packed batch needs at least one sequence");
  AttentionLayout layout;
  layout.cu_seqlens.push_back(0);
  std::vector<int64_t> positions;
  for (int64_t len : lengths) {
    if (len <= 0) throw std::invalid_argument("packed sequence lengths must be positive");
    for (int64_t p = 0; p < len; ++p) positions.push_back(p);
    layout.cu_seqlens.push_back(layout.cu_seqlens.back() + len);
  }
  layout.position_ids = torch::tensor(positions, torch::kLong).unsqueeze(0);
  return layout;
}

// ---- KVCache ------------------------------------------------------------------------------

KVCache::KVCache(const ModelConfig& config, int64_t batch_size, int64_t capacity, torch::Dtype dtype,
                 torch::Device device)
    : batch_size_(batch_size), capacity_(capacity) {
  if (batch_size <= 0 || capacity <= 0) throw std::invalid_argument("KVCache: batch size and capacity must be > 0");
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(torch::zeros({batch_size, config.num_key_value_heads, capacity, config.head_dim}, opts));
    values_.push_back(torch::zeros({batch_size, config.num_key_value_heads, capacity, config.head_dim}, opts));
  }
  key_mask_ = torch::zeros({batch_size, capacity}, torch::TensorOptions().dtype(torch::kBool).device(device));
  next_position_ = torch::zeros({batch_size}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

void KVCache::reset() {
  length_ = 0;
  key_mask_.zero_();
  next_position_.zero_();
}

// ---- SlotKVCache --------------------------------------------------------------------------

SlotKVCache::SlotKVCache(const ModelConfig& config, int64_t num_slots, int64_t capacity, torch::Dtype dtype,
                         torch::Device device)
    : capacity_(capacity),
      lengths_(static_cast<std::size_t>(std::max<int64_t>(num_slots, 0)), 0),
      written_(lengths_.size(), 0) {
  if (num_slots <= 0 || capacity <= 0) throw std::invalid_argument("SlotKVCache: slots and capacity must be > 0");
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(torch::zeros({num_slots, config.num_key_value_heads, capacity, config.head_dim}, opts));
    values_.push_back(torch::zeros({num_slots, config.num_key_value_heads, capacity, config.head_dim}, opts));
  }
}

int64_t SlotKVCache::bytes() const {
  int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l) total += keys_[l].nbytes() + values_[l].nbytes();
  return total;
}

void SlotKVCache::load_prefix(int64_t slot, const KVCache& src, int64_t src_row, int64_t length) {
  if (slot < 0 || slot >= num_slots()) throw std::out_of_range("SlotKVCache::load_prefix: no slot " + std::to_string(slot));
  if (src_row < 0 || src_row >= src.batch_size() || length < 0 || length > src.length() || length > capacity_)
    throw std::out_of_range("SlotKVCache::load_prefix: row " + std::to_string(src_row) + ", " + std::to_string(length) +
                            " tokens do not fit the source or this cache");
  if (src.keys_.size() != keys_.size()) throw std::invalid_argument("SlotKVCache::load_prefix: layer counts differ");
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][slot].narrow(1, 0, length).copy_(src.keys_[l][src_row].narrow(1, 0, length));
    values_[l][slot].narrow(1, 0, length).copy_(src.values_[l][src_row].narrow(1, 0, length));
  }
  zero_tail(slot, length);
  lengths_[static_cast<std::size_t>(slot)] = length;
}

void SlotKVCache::zero_tail(int64_t slot, int64_t from) {
  int64_t& written = written_[static_cast<std::size_t>(slot)];
  if (written > from)
    for (std::size_t l = 0; l < keys_.size(); ++l) {
      keys_[l][slot].narrow(1, from, written - from).zero_();
      values_[l][slot].narrow(1, from, written - from).zero_();
    }
  written = from;
}

void SlotKVCache::move_slot(int64_t from, int64_t to) {
  if (from < 0 || from >= num_slots() || to < 0 || to >= num_slots())
    throw std::out_of_range("SlotKVCache::move_slot: slot out of range");
  if (from == to) return;
  const int64_t length = lengths_[static_cast<std::size_t>(from)];
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][to].narrow(1, 0, length).copy_(keys_[l][from].narrow(1, 0, length));
    values_[l][to].narrow(1, 0, length).copy_(values_[l][from].narrow(1, 0, length));
  }
  zero_tail(to, length);
  lengths_[static_cast<std::size_t>(to)] = length;
}

// ---- modules ------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // transformers' RMSNorm: normalize in float32, cast back, then scale.
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

RotaryEmbedding::RotaryEmbedding(const ModelConfig& c) {
  const int64_t dim = c.head_dim;
  // inv_freq = 1 / theta^(2i/d), computed in float32 as transformers does.
  auto exponents = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat32) / static_cast<double>(dim);
  inv_freq_ = 1.0 / torch::pow(torch::scalar_tensor(c.rope_theta, torch::kFloat32), exponents);
  if (c.rope_scaling) {
    // transformers' _compute_llama3_parameters: long wavelengths are slowed down by
    // `factor`, short ones kept, and the band between interpolated smoothly.
    const auto& s = *c.rope_scaling;
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = old_ctx / s.low_freq_factor;
    const double high_freq_wavelen = old_ctx / s.high_freq_factor;
    auto wavelen = 2 * M_PI / inv_freq_;
    auto llama = torch::where(wavelen > low_freq_wavelen, inv_freq_ / s.factor, inv_freq_);
    auto smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    auto smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
    auto medium = (wavelen < high_freq_wavelen).logical_not() & (wavelen > low_freq_wavelen).logical_not();
    inv_freq_ = torch::where(medium, smoothed, llama);
  }
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cos_sin(const torch::Tensor& position_ids) const {
  auto inv = inv_freq_.to(position_ids.device());
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv;  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t layer_index)
    : layer_index_(layer_index),
      num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      scaling_(1.0 / std::sqrt(static_cast<double>(c.head_dim))) {
  auto projection = [&](ProjectionRole role, int64_t in, int64_t out, bool bias) {
    return register_module(projection_name(role), make_projection({role, layer_index, in, out, bias}));
  };
  q_proj = projection(ProjectionRole::kQuery, c.hidden_size, num_heads_ * head_dim_, c.qkv_bias);
  k_proj = projection(ProjectionRole::kKey, c.hidden_size, num_kv_heads_ * head_dim_, c.qkv_bias);
  v_proj = projection(ProjectionRole::kValue, c.hidden_size, num_kv_heads_ * head_dim_, c.qkv_bias);
  o_proj = projection(ProjectionRole::kOutput, num_heads_ * head_dim_, c.hidden_size, c.o_proj_bias);
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const AttentionLayout& layout, KVCache* cache, const SlotStep* slots) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = q_proj(x).view({B, T, num_heads_, head_dim_});
  auto k = k_proj(x).view({B, T, num_kv_heads_, head_dim_});
  auto v = v_proj(x).view({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {  // Qwen3: per-head RMSNorm before rotary
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto c = cos.unsqueeze(1).to(x.scalar_type());
  auto s = sin.unsqueeze(1).to(x.scalar_type());
  q = apply_rotary(q, c, s);
  k = apply_rotary(k, c, s);

  torch::Tensor out;
  if (slots) {
    // T new tokens per row, written from the row's own length on; each attends to the row's
    // cached tokens, the new ones before it and itself (keys past its length belong to nobody, or to an earlier
    // sequence of the slot).
    const int64_t R = slots->rows, S = slots->keys;
    auto steps = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    auto index = (slots->past.view({R, 1}) + steps.view({1, T})).view({R, 1, T, 1}).expand({R, num_kv_heads_, T, head_dim_});
    auto layer_keys = slots->cache->keys_[layer_index_].narrow(0, slots->first, R);
    auto layer_values = slots->cache->values_[layer_index_].narrow(0, slots->first, R);
    layer_keys.scatter_(2, index, k);
    layer_values.scatter_(2, index, v);
    out = grouped_attention(q, layer_keys.narrow(2, 0, S), layer_values.narrow(2, 0, S), slots->allowed, scaling_);
  } else if (layout.is_packed()) {
    // Each sequence attends causally within itself only.
    std::vector<torch::Tensor> parts;
    parts.reserve(layout.cu_seqlens.size() - 1);
    for (std::size_t i = 0; i + 1 < layout.cu_seqlens.size(); ++i) {
      const int64_t start = layout.cu_seqlens[i], len = layout.cu_seqlens[i + 1] - start;
      auto causal = torch::ones({len, len}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).tril();
      parts.push_back(grouped_attention(q.narrow(2, start, len), k.narrow(2, start, len), v.narrow(2, start, len),
                                        causal.view({1, 1, len, len}), scaling_));
    }
    out = parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
  } else {
    int64_t past = 0;
    torch::Tensor keys = k, values = v;
    if (cache) {
      past = cache->length_;
      cache->keys_[layer_index_].narrow(2, past, T).copy_(k);
      cache->values_[layer_index_].narrow(2, past, T).copy_(v);
      keys = cache->keys_[layer_index_].narrow(2, 0, past + T);
      values = cache->values_[layer_index_].narrow(2, 0, past + T);
    }
    const int64_t S = past + T;
    auto opts = torch::TensorOptions().dtype(torch::kLong).device(x.device());
    auto qpos = torch::arange(past, past + T, opts).view({T, 1});
    auto kpos = torch::arange(0, S, opts).view({1, S});
    // Causal and real keys only; a query always sees itself so that padding rows stay finite.
    auto allowed = ((kpos <= qpos).unsqueeze(0) & layout.key_padding_mask.view({B, 1, S})) |
                   (kpos == qpos).unsqueeze(0);
    out = grouped_attention(q, keys, values, allowed.unsqueeze(1), scaling_);
  }
  return o_proj(out.transpose(1, 2).reshape({B, T, num_heads_ * head_dim_}));
}

MLPImpl::MLPImpl(const ModelConfig& c, int64_t layer_index) {
  auto projection = [&](ProjectionRole role, int64_t in, int64_t out) {
    return register_module(projection_name(role), make_projection({role, layer_index, in, out, c.mlp_bias}));
  };
  gate_proj = projection(ProjectionRole::kGate, c.hidden_size, c.intermediate_size);
  up_proj = projection(ProjectionRole::kUp, c.hidden_size, c.intermediate_size);
  down_proj = projection(ProjectionRole::kDown, c.intermediate_size, c.hidden_size);
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer_index) {
  self_attn = register_module("self_attn", Attention(c, layer_index));
  mlp = register_module("mlp", MLP(c, layer_index));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const AttentionLayout& layout, KVCache* cache, const SlotStep* slots) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, layout, cache, slots);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

CausalLMImpl::CausalLMImpl(ModelConfig config) : config_(std::move(config)), rotary_(config_) {
  model = register_module("model", Decoder(config_));
  if (!config_.tie_word_embeddings)
    lm_head = register_module("lm_head", make_projection({ProjectionRole::kLmHead, -1, config_.hidden_size, config_.vocab_size, false}));
}

torch::Tensor CausalLMImpl::lm_head_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

namespace {

// The dropout generators of the LoRA adapters inside `module` (one per model, shared).
std::vector<at::Generator> lora_dropout_generators(torch::nn::Module& module) {
  std::vector<at::Generator> generators;
  for (const auto& m : module.modules()) {
    const auto* projection = dynamic_cast<const ProjectionImpl*>(m.get());
    const LoraAdapter* lora = projection ? projection->lora() : nullptr;
    if (!lora || lora->dropout <= 0.0 || !lora->dropout_generator) continue;
    bool seen = false;
    for (const auto& g : generators) seen = seen || g == *lora->dropout_generator;
    if (!seen) generators.push_back(*lora->dropout_generator);
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
  auto [cos, sin] = rotary_.cos_sin(layout.position_ids);
  const std::shared_ptr<LayerParameterResidency> residency = residency_;  // the backward nodes keep it
  if (residency) residency->acquire(-1);
  auto h = model->embed_tokens(input_ids);
  const bool checkpoint = gradient_checkpointing_ && !cache && torch::GradMode::is_enabled();
  int64_t index = 0;
  for (const auto& layer : *model->layers) {
    const int64_t i = index++;
    if (residency) {
      residency->acquire(i);
      h = call_in_backward(h, [residency, i] { residency->release(i); });  // after the layer's backward
    }
    if (!checkpoint) {
      h = layer->as<DecoderLayer>()->forward(h, cos, sin, layout, cache);
    } else {
      // Backward runs the layer again, after this function has returned: the lambda owns what it uses.
      auto decoder_layer = std::dynamic_pointer_cast<DecoderLayerImpl>(layer);
      h = checkpointed([decoder_layer, cos = cos, sin = sin, layout](const torch::Tensor& x) {
        return decoder_layer->forward(x, cos, sin, layout, nullptr);
      }, h, lora_dropout_generators(*decoder_layer));
    }
    if (residency) {
      h = call_in_backward(h, [residency, i] { residency->acquire(i); });  // before the layer's backward
      residency->release(i);
    }
  }
  if (cache) {
    auto new_mask = layout.key_padding_mask.narrow(1, cache->length_, T);
    cache->key_mask_.narrow(1, cache->length_, T).copy_(new_mask);
    cache->next_position_ += new_mask.sum(1);
    cache->length_ += T;
  }
  return model->norm(h);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const AttentionLayout& layout, KVCache* cache) {
  auto h = hidden_states(input_ids, layout, cache);
  return torch::matmul(h, lm_head_weight().t());
}

torch::Tensor CausalLMImpl::decode_slots(const torch::Tensor& input_ids, SlotKVCache& cache) {
  if (input_ids.dim() != 1) throw std::invalid_argument("decode_slots: input_ids must be [rows]");
  const int64_t R = input_ids.size(0);
  if (R <= 0 || R > cache.num_slots())
    throw std::invalid_argument("decode_slots: " + std::to_string(R) + " rows for a cache of " +
                                std::to_string(cache.num_slots()) + " slots");
  return forward_slots(input_ids.view({R, 1}), cache, 0).view({R, -1});
}

torch::Tensor CausalLMImpl::extend_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first) {
  if (input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 1)
    throw std::invalid_argument("extend_slots: input_ids must be [rows, tokens], both >= 1");
  if (first < 0 || first + input_ids.size(0) > cache.num_slots())
    throw std::invalid_argument("extend_slots: slots [" + std::to_string(first) + ", " +
                                std::to_string(first + input_ids.size(0)) + ") are not in a cache of " +
                                std::to_string(cache.num_slots()));
  return forward_slots(input_ids, cache, first);
}

torch::Tensor CausalLMImpl::forward_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first) {
  if (torch::GradMode::is_enabled())
    throw std::invalid_argument("decoding against a SlotKVCache needs torch::NoGradGuard: the cache is written in place");
  const int64_t R = input_ids.size(0), T = input_ids.size(1);
  std::vector<int64_t> past(cache.lengths_.begin() + first, cache.lengths_.begin() + first + R);
  int64_t max_past = 0;
  for (int64_t p : past) {
    if (p + T > cache.capacity())
      throw std::invalid_argument("decode_slots: a slot holds " + std::to_string(p) + " of " +
                                  std::to_string(cache.capacity()) + " tokens; no room for " + std::to_string(T) + " more");
    max_past = std::max(max_past, p);
  }
  const auto device = input_ids.device();
  SlotStep step;
  step.cache = &cache;
  step.first = first;
  step.rows = R;
  step.past = torch::tensor(past, torch::kLong).to(device);
  step.keys = max_past + T;
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto kpos = torch::arange(step.keys, long_opts);
  const auto qpos = step.past.view({R, 1}) + torch::arange(T, long_opts).view({1, T});  // [R, T]
  step.allowed = (kpos.view({1, 1, step.keys}) <= qpos.view({R, T, 1})).view({R, 1, T, step.keys});
  AttentionLayout layout;  // positions only: the slot path builds its own mask
  layout.position_ids = qpos;
  auto [cos, sin] = rotary_.cos_sin(layout.position_ids);
  auto h = model->embed_tokens(input_ids);
  for (const auto& layer : *model->layers)
    h = layer->as<DecoderLayer>()->forward(h, cos, sin, layout, nullptr, &step);
  for (int64_t r = first; r < first + R; ++r) {
    const int64_t length = cache.lengths_[static_cast<std::size_t>(r)] += T;
    int64_t& written = cache.written_[static_cast<std::size_t>(r)];
    written = std::max(written, length);
  }
  return model->norm(h);
}

AttentionLayout CausalLMImpl::decode_layout(const KVCache& cache, int64_t new_tokens, const torch::Tensor& new_mask) const {
  auto device = cache.key_mask_.device();
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
      p.fill_(1.0);
    } else if (is(".bias")) {
      p.zero_();
    } else {
      auto values = at::normal(0.0, std, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32));
      p.copy_(values);
    }
  }
}

}  // namespace grpo::core
