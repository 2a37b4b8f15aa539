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

// softmax(q k^T * scaling [soft-capped] + mask) v with grouped-query heads, as transformers' eager path:
// scores in the model dtype, softmax in float32, cast back.
//   q [B, H, T, D], k/v [B, Hkv, S, D], allowed [B or 1, 1, T, S] bool (true = may attend).
torch::Tensor grouped_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& allowed, double scaling, double softcap) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  const int64_t rep = H / Hkv;
  // The rep query heads of KV head g (heads g*rep .. g*rep+rep-1, as in transformers'
  // repeat_kv) share its keys and values: fold them into the query rows, so that K and V are
  // read in place instead of being expanded (copied) rep times per call.
  auto qg = q.reshape({B, Hkv, rep * T, D});
  auto scores = (torch::matmul(qg, k.transpose(-1, -2)) * scaling).view({B, Hkv, rep, T, S});
  if (softcap > 0) scores = torch::tanh(scores / softcap) * softcap;  // Gemma 2, before the mask
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

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, RmsNormKind kind) : eps_(eps), kind_(kind) {
  weight = register_parameter("weight", kind == RmsNormKind::kOffsetInFloat32 ? torch::zeros({dim}) : torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  switch (kind_) {
    case RmsNormKind::kOffsetInFloat32: return (h * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
    case RmsNormKind::kScaleThenCast: return (weight.to(torch::kFloat32) * h).to(x.scalar_type());
    case RmsNormKind::kCastThenScale: break;
  }
  return weight * h.to(x.scalar_type());
}

namespace {

// theta^(2i/d), i < d/2, computed in float32 as transformers does: every scaling starts from it.
torch::Tensor theta_powers(double theta, int64_t dim) {
  auto exponents = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat32) / static_cast<double>(dim);
  return torch::pow(torch::scalar_tensor(theta, torch::kFloat32), exponents);
}

torch::Tensor default_inv_freq(double theta, int64_t dim) { return 1.0 / theta_powers(theta, dim); }

// transformers' _compute_llama3_parameters: long wavelengths are slowed down by `factor`, short
// ones kept, and the band between interpolated smoothly.
torch::Tensor llama3_inv_freq(const torch::Tensor& inv_freq, const RopeScaling& s) {
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / s.low_freq_factor;
  const double high_freq_wavelen = old_ctx / s.high_freq_factor;
  auto wavelen = 2 * M_PI / inv_freq;
  auto llama = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
  auto medium = (wavelen < high_freq_wavelen).logical_not() & (wavelen > low_freq_wavelen).logical_not();
  return torch::where(medium, smoothed, llama);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// transformers' _compute_yarn_parameters: frequencies below the correction range interpolated
// (divided by factor), above it extrapolated (kept), a linear ramp between.
torch::Tensor yarn_inv_freq(double theta, int64_t dim, const RopeScaling& s) {
  auto pos_freqs = theta_powers(theta, dim);
  auto extrapolation = 1.0 / pos_freqs;
  auto interpolation = 1.0 / (s.factor * pos_freqs);
  const double original = static_cast<double>(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no singular ramp
  auto ramp = ((torch::arange(dim / 2, torch::kLong).to(torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  auto extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

torch::Tensor longrope_inv_freq(double theta, int64_t dim, const std::vector<double>& factors) {
  auto ext = torch::tensor(factors, torch::kFloat64).to(torch::kFloat32);
  return 1.0 / (ext * theta_powers(theta, dim));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& c) : RotaryEmbedding(c, RotaryConfig{c.rope_theta, c.rope_scaling}) {}

RotaryEmbedding::RotaryEmbedding(const ModelConfig& c, const RotaryConfig& rotary)
    : head_dim_(c.head_dim), max_position_embeddings_(c.max_position_embeddings), theta_(rotary.theta), scaling_(rotary.scaling) {
  const RopeScaling& s = scaling_;
  inv_freq_ = default_inv_freq(theta_, head_dim_);
  switch (s.type) {
    case RopeType::kDefault:
    case RopeType::kDynamic:  // the unscaled frequencies until a call outgrows max_position_embeddings
      break;
    case RopeType::kLinear:
      inv_freq_ = inv_freq_ / s.factor;
      break;
    case RopeType::kLlama3:
      inv_freq_ = llama3_inv_freq(inv_freq_, s);
      break;
    case RopeType::kYarn:
      inv_freq_ = yarn_inv_freq(theta_, head_dim_, s);
      if (s.attention_factor) attention_factor_ = *s.attention_factor;
      else if (s.mscale > 0 && s.mscale_all_dim > 0)
        attention_factor_ = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
      else attention_factor_ = yarn_mscale(s.factor, 1.0);
      break;
    case RopeType::kLongrope:
      inv_freq_ = longrope_inv_freq(theta_, head_dim_, s.short_factor);
      long_inv_freq_ = longrope_inv_freq(theta_, head_dim_, s.long_factor);
      if (s.attention_factor) attention_factor_ = *s.attention_factor;
      else if (s.factor <= 1.0) attention_factor_ = 1.0;
      else attention_factor_ = std::sqrt(1 + std::log(s.factor) / std::log(static_cast<double>(s.original_max_position_embeddings)));
      break;
  }
}

torch::Tensor RotaryEmbedding::inv_freq(int64_t seq_len) const {
  if (scaling_.type == RopeType::kLongrope && seq_len > scaling_.original_max_position_embeddings) return long_inv_freq_;
  if (scaling_.type == RopeType::kDynamic && seq_len > max_position_embeddings_) {
    // transformers' _compute_dynamic_ntk_parameters: the base grows with the call's length.
    const double d = static_cast<double>(head_dim_);
    const double base = theta_ * std::pow(scaling_.factor * static_cast<double>(seq_len) / static_cast<double>(max_position_embeddings_) -
                                              (scaling_.factor - 1),
                                          d / (d - 2));
    return default_inv_freq(base, head_dim_);
  }
  return inv_freq_;
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cos_sin(const torch::Tensor& position_ids) const {
  const bool length_dependent = scaling_.type == RopeType::kDynamic || scaling_.type == RopeType::kLongrope;
  const int64_t seq_len = length_dependent && position_ids.numel() > 0 ? position_ids.max().item<int64_t>() + 1 : 0;
  auto inv = inv_freq(seq_len).to(position_ids.device());
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv;  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  if (attention_factor_ == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * attention_factor_, emb.sin() * attention_factor_};
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t layer_index)
    : layer_index_(layer_index),
      num_heads_(c.num_attention_heads),
      num_kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      scaling_(c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim))),
      softcap_(c.attn_logit_softcapping),
      window_(c.is_sliding(layer_index) ? c.sliding_window : 0),
      local_rotary_(c.local_rope.has_value() && c.is_sliding(layer_index)),
      qk_norm_kind_(c.qk_norm) {
  auto projection = [&](ProjectionRole role, int64_t in, int64_t out, bool bias) {
    return register_module(projection_name(role), make_projection({role, layer_index, in, out, bias}));
  };
  const int64_t q_out = num_heads_ * head_dim_, kv_out = num_kv_heads_ * head_dim_;
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

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionLayout& layout,
                                     KVCache* cache, const SlotStep* slots) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t q_out = num_heads_ * head_dim_, kv_out = num_kv_heads_ * head_dim_;
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
  q = q.reshape({B, T, num_heads_, head_dim_});
  k = k.reshape({B, T, num_kv_heads_, head_dim_});
  v = v.reshape({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);
  if (qk_norm_kind_ == QkNorm::kPerHead) {  // Qwen3, Gemma 3: per head, before rotary
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  const torch::Tensor& cos = local_rotary_ ? rotary.local_cos : rotary.cos;
  const torch::Tensor& sin = local_rotary_ ? rotary.local_sin : rotary.sin;
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
    out = grouped_attention(q, layer_keys.narrow(2, 0, S), layer_values.narrow(2, 0, S),
                            window_ > 0 ? slots->allowed_sliding : slots->allowed, scaling_, softcap_);
  } else if (layout.is_packed()) {
    // Each sequence attends causally within itself only (and within the window).
    std::vector<torch::Tensor> parts;
    parts.reserve(layout.cu_seqlens.size() - 1);
    for (std::size_t i = 0; i + 1 < layout.cu_seqlens.size(); ++i) {
      const int64_t start = layout.cu_seqlens[i], len = layout.cu_seqlens[i + 1] - start;
      auto causal = torch::ones({len, len}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).tril();
      if (window_ > 0) causal = causal.triu(-(window_ - 1));  // key j > query i - window
      parts.push_back(grouped_attention(q.narrow(2, start, len), k.narrow(2, start, len), v.narrow(2, start, len),
                                        causal.view({1, 1, len, len}), scaling_, softcap_));
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
    // The window counts cache indices, as transformers' masks do: padding is contiguous at
    // one end of a row, so between real tokens it equals the distance in positions.
    auto visible = kpos <= qpos;
    if (window_ > 0) visible = visible & (kpos > qpos - window_);
    auto allowed = (visible.unsqueeze(0) & layout.key_padding_mask.view({B, 1, S})) | (kpos == qpos).unsqueeze(0);
    out = grouped_attention(q, keys, values, allowed.unsqueeze(1), scaling_, softcap_);
  }
  return o_proj(out.transpose(1, 2).reshape({B, T, num_heads_ * head_dim_}));
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

SparseMoeBlockImpl::SparseMoeBlockImpl(const ModelConfig& c, int64_t layer_index)
    : top_k_(c.num_experts_per_tok), norm_topk_prob_(c.norm_topk_prob) {
  gate = register_module("gate", make_projection({ProjectionRole::kRouter, layer_index, c.hidden_size, c.num_experts, false}));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < c.num_experts; ++e) experts->push_back(MLP(c, layer_index, c.moe_intermediate_size));
  if (c.shared_expert_intermediate_size > 0) {
    shared_expert = register_module("shared_expert", MLP(c, layer_index, c.shared_expert_intermediate_size));
    shared_expert_gate = register_module(
        "shared_expert_gate", make_projection({ProjectionRole::kSharedExpertGate, layer_index, c.hidden_size, 1, false}));
  }
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  auto flat = x.reshape({-1, x.size(-1)});  // [N, H]
  auto router_logits = gate(flat);           // [N, E]
  if (record_router_logits) last_router_logits = router_logits;
  auto probs = torch::softmax(router_logits, -1, torch::kFloat32);
  auto [weights, chosen] = torch::topk(probs, top_k_, -1);  // [N, k], largest first
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  auto out = torch::zeros_like(flat);
  // Tokens are grouped by expert (one matmul per expert on its tokens), as transformers loops.
  const torch::Tensor counts = torch::bincount(chosen.flatten(), {}, experts->size()).cpu();
  const auto* count = counts.data_ptr<int64_t>();
  for (int64_t e = 0; e < static_cast<int64_t>(experts->size()); ++e) {
    if (count[e] == 0) continue;
    auto hit = chosen == e;                                    // [N, k]: at most one true per row
    auto tokens = hit.any(-1).nonzero().squeeze(-1);           // [n_e]
    auto w = (weights * hit.to(weights.scalar_type())).sum(-1).index_select(0, tokens);  // [n_e]
    auto y = experts[e]->as<MLP>()->forward(flat.index_select(0, tokens)) * w.unsqueeze(-1);
    out.index_add_(0, tokens, y);  // in place: nothing else has saved `out` for backward
  }
  if (shared_expert) out = out + torch::sigmoid(shared_expert_gate(flat)) * shared_expert(flat);
  return out.view(shape);
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& token_mask) {
  if (router_logits.empty()) throw std::invalid_argument("load_balancing_loss: no router logits (is the model an MoE?)");
  auto logits = torch::cat(router_logits, 0);  // [layers * N, E]
  auto probs = torch::softmax(logits.to(torch::kFloat32), -1);
  auto chosen = std::get<1>(torch::topk(probs, top_k, -1));
  auto expert_mask = torch::one_hot(chosen, num_experts).to(torch::kFloat32);  // [layers * N, k, E]
  torch::Tensor tokens_per_expert, prob_per_expert;
  if (!token_mask.defined()) {
    tokens_per_expert = expert_mask.mean(0);  // [k, E]
    prob_per_expert = probs.mean(0);          // [E]
  } else {
    const int64_t layers = static_cast<int64_t>(router_logits.size());
    auto m = token_mask.reshape({-1}).to(torch::kFloat32).to(logits.device()).repeat({layers});  // [layers * N]
    if (m.size(0) != logits.size(0))
      throw std::invalid_argument("load_balancing_loss: token_mask has " + std::to_string(token_mask.numel()) +
                                  " tokens, the router logits " + std::to_string(logits.size(0) / layers));
    tokens_per_expert = (expert_mask * m.view({-1, 1, 1})).sum(0) / m.sum();
    prob_per_expert = (probs * m.view({-1, 1})).sum(0) / m.sum();
  }
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
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

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryTables& rotary, const AttentionLayout& layout,
                                        KVCache* cache, const SlotStep* slots) {
  switch (placement_) {
    case NormPlacement::kPreNorm: {
      auto h = x + self_attn(input_layernorm(x), rotary, layout, cache, slots);
      return h + feed_forward(post_attention_layernorm(h));
    }
    case NormPlacement::kSandwich: {
      auto h = x + post_attention_layernorm(self_attn(input_layernorm(x), rotary, layout, cache, slots));
      return h + post_feedforward_layernorm(feed_forward(pre_feedforward_layernorm(h)));
    }
    case NormPlacement::kPostNorm: {
      auto h = x + post_attention_layernorm(self_attn(x, rotary, layout, cache, slots));
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
  RotaryTables t;
  std::tie(t.cos, t.sin) = rotary_.cos_sin(position_ids);
  if (local_rotary_) std::tie(t.local_cos, t.local_sin) = local_rotary_->cos_sin(position_ids);
  return t;
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
  const RotaryTables rotary = rotary_tables(layout.position_ids);
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
      h = layer->as<DecoderLayer>()->forward(h, rotary, layout, cache);
    } else {
      // Backward runs the layer again, after this function has returned: the lambda owns what it uses.
      auto decoder_layer = std::dynamic_pointer_cast<DecoderLayerImpl>(layer);
      h = checkpointed([decoder_layer, rotary, layout](const torch::Tensor& x) {
        return decoder_layer->forward(x, rotary, layout, nullptr);
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
  return logits(h);
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
  if (config_.sliding_window > 0)
    step.allowed_sliding = step.allowed & (kpos.view({1, 1, step.keys}) > (qpos - config_.sliding_window).view({R, T, 1}))
                                              .view({R, 1, T, step.keys});
  const RotaryTables rotary = rotary_tables(layout.position_ids);
  auto h = embed(input_ids);
  for (const auto& layer : *model->layers)
    h = layer->as<DecoderLayer>()->forward(h, rotary, layout, nullptr, &step);
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
