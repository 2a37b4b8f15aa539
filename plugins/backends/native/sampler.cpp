#include "plugins/backends/native/sampler.h"

#include <limits>
#include <stdexcept>

namespace grpo::native {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

at::Tensor column(const std::vector<double>& values, const at::Tensor& like) {
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(like.device()).to(like.scalar_type()).view({-1, 1});
}

}  // namespace

SampleStream::SampleStream(std::uint64_t request_seed, std::uint64_t sample_index)
    : engine_(splitmix64(request_seed ^ splitmix64(sample_index + 1))) {}

double SampleStream::next_uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

at::Tensor processed_logprobs(const at::Tensor& logits, const std::vector<RowSampling>& rows) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(rows.size()))
    throw std::invalid_argument("processed_logprobs: logits must be [rows, vocab] with one RowSampling per row");
  const int64_t R = logits.size(0), V = logits.size(1);
  std::vector<double> temperature(R), min_p(R), top_k(R), top_p(R);
  bool any_min_p = false, any_top_k = false, any_top_p = false;
  for (int64_t r = 0; r < R; ++r) {
    const RowSampling& s = rows[static_cast<std::size_t>(r)];
    temperature[r] = s.temperature > 0.0 ? s.temperature : 1.0;
    min_p[r] = s.min_p;
    top_k[r] = (s.top_k > 0 && s.top_k < V) ? static_cast<double>(s.top_k) : static_cast<double>(V);
    top_p[r] = s.top_p;
    any_min_p |= s.min_p > 0.0;
    any_top_k |= s.top_k > 0 && s.top_k < V;
    any_top_p |= s.top_p < 1.0;
  }
  const double neg_inf = -std::numeric_limits<double>::infinity();
  at::Tensor x = logits.to(at::kFloat) / column(temperature, logits.to(at::kFloat));
  if (any_min_p) {
    const at::Tensor probs = at::softmax(x, -1);
    const at::Tensor threshold = std::get<0>(probs.max(-1, /*keepdim=*/true)) * column(min_p, probs);
    x = x.masked_fill(probs < threshold, neg_inf);
  }
  if (any_top_k || any_top_p) {
    auto [sorted, order] = x.sort(-1, /*descending=*/true);
    at::Tensor drop = at::zeros_like(sorted, at::TensorOptions().dtype(at::kBool));
    if (any_top_k) {
      const at::Tensor rank = at::arange(V, at::TensorOptions().dtype(at::kFloat).device(x.device())).view({1, V});
      drop = rank >= column(top_k, sorted);
    }
    if (any_top_p) {
      const at::Tensor probs = at::softmax(sorted.masked_fill(drop, neg_inf), -1);
      const at::Tensor mass_above = probs.cumsum(-1) - probs;
      drop = drop | (mass_above >= column(top_p, probs));
    }
    x = x.masked_fill(at::zeros_like(drop).scatter(-1, order, drop), neg_inf);
  }
  return at::log_softmax(x, -1);
}

SampledTokens sample_tokens(const at::Tensor& logits, const std::vector<RowSampling>& rows,
                            const std::vector<double>& uniforms, LogprobsMode mode) {
  const int64_t R = logits.size(0), V = logits.size(1);
  if (static_cast<int64_t>(uniforms.size()) != R) throw std::invalid_argument("sample_tokens: one uniform per row");
  bool all_greedy = true;
  std::vector<uint8_t> greedy(R);
  for (int64_t r = 0; r < R; ++r) {
    greedy[r] = rows[static_cast<std::size_t>(r)].temperature <= 0.0;
    all_greedy &= greedy[r] != 0;
  }
  const at::Tensor raw_logits = logits.to(at::kFloat);
  at::Tensor tokens = raw_logits.argmax(-1);
  at::Tensor processed;
  const bool need_processed = !all_greedy || mode == LogprobsMode::kProcessed;
  if (need_processed) processed = processed_logprobs(raw_logits, rows);
  if (!all_greedy) {
    const at::Tensor cdf = processed.exp().to(at::kDouble).cumsum(-1);
    const at::Tensor target = at::tensor(uniforms, at::kDouble).to(cdf.device()).view({R, 1}) * cdf.narrow(1, V - 1, 1);
    at::Tensor drawn = at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).view({R}).clamp_max(V - 1);
    // u * total can round up to total itself; never return a token outside the kept set.
    const at::Tensor outside = at::isinf(processed.gather(1, drawn.view({R, 1})).view({R}));
    drawn = at::where(outside, processed.argmax(-1), drawn);
    const at::Tensor is_greedy = at::tensor(std::vector<int64_t>(greedy.begin(), greedy.end()), at::kLong).to(cdf.device()) != 0;
    tokens = at::where(is_greedy, tokens, drawn);
  }
  const at::Tensor source = mode == LogprobsMode::kProcessed ? processed : at::log_softmax(raw_logits, -1);
  SampledTokens out;
  out.logprobs = source.gather(1, tokens.view({R, 1})).view({R}).to(at::kCPU);
  out.tokens = tokens.to(at::kCPU);
  return out;
}

}  // namespace grpo::native
