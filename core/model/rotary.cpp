#include "core/model/rotary.h"

#include <cmath>
#include <tuple>
#include <utility>

namespace grpo::core {

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

torch::Tensor RotaryEmbedding::on_device(const torch::Tensor& table, const torch::Device& device) const {
  if (table.device() == device) return table;
  std::lock_guard<std::mutex> lock(device_copies_->mutex);
  for (const auto& [host, copy] : device_copies_->copies)
    if (host.is_same(table) && copy.device() == device) return copy;
  device_copies_->copies.emplace_back(table, table.to(device));
  return device_copies_->copies.back().second;
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cos_sin(const torch::Tensor& position_ids) const {
  const int64_t seq_len = length_dependent() && position_ids.numel() > 0 ? position_ids.max().item<int64_t>() + 1 : 0;
  const torch::Tensor table = inv_freq(seq_len);
  const bool stored = table.is_same(inv_freq_) || (long_inv_freq_.defined() && table.is_same(long_inv_freq_));
  auto inv = stored ? on_device(table, position_ids.device()) : table.to(position_ids.device());
  auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv;  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  if (attention_factor_ == 1.0) return {emb.cos(), emb.sin()};
  return {emb.cos() * attention_factor_, emb.sin() * attention_factor_};
}

// ---- the tables of one pass ------------------------------------------------------------------

namespace {

std::pair<torch::Tensor, torch::Tensor> for_heads(const std::pair<torch::Tensor, torch::Tensor>& cos_sin) {
  const auto& [cos, sin] = cos_sin;
  if (!cos.defined()) return {};
  const int64_t half = sin.size(-1) / 2;
  const torch::Tensor signed_sin = torch::cat({-sin.narrow(-1, 0, half), sin.narrow(-1, half, half)}, -1);
  return {cos.unsqueeze(2), signed_sin.unsqueeze(2)};
}

}  // namespace

RotaryTables rotary_tables_from(const std::pair<torch::Tensor, torch::Tensor>& cos_sin,
                                const std::pair<torch::Tensor, torch::Tensor>& local_cos_sin) {
  RotaryTables t;
  std::tie(t.cos, t.sin_signed) = for_heads(cos_sin);
  std::tie(t.local_cos, t.local_sin_signed) = for_heads(local_cos_sin);
  return t;
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin_signed) {
  // roll by half the last dim swaps the halves: (x1, x2) -> (x2, x1).
  return x * cos + torch::roll(x, {x.size(-1) / 2}, {-1}) * sin_signed;
}

}  // namespace grpo::core
