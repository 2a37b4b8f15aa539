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

// Greedy rows are processed at temperature 1.
std::vector<double> effective_temperatures(const std::vector<RowSampling>& rows) {
  std::vector<double> t(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) t[r] = is_greedy(rows[r].temperature) ? 1.0 : rows[r].temperature;
  return t;
}

}  // namespace

SampleStream::SampleStream(std::uint64_t request_seed, std::uint64_t sample_index)
    : engine_(splitmix64(request_seed ^ splitmix64(sample_index + 1))) {}

double SampleStream::next_uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

at::Tensor processed_logprobs(const at::Tensor& logits, const std::vector<RowSampling>& rows) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(rows.size()))
    throw std::invalid_argument("processed_logprobs: logits must be [rows, vocab] with one RowSampling per row");
  const int64_t R = logits.size(0), V = logits.size(1);
  std::vector<double> min_p(R), top_p(R), top_p_on(R);
  std::vector<int64_t> kth_index(R);
  std::vector<double> top_k_on(R);
  bool any_min_p = false, any_top_p = false;
  int64_t k_max = 0;
  for (int64_t r = 0; r < R; ++r) {
    const RowSampling& s = rows[static_cast<std::size_t>(r)];
    min_p[r] = s.min_p;
    top_p[r] = s.top_p;
    top_p_on[r] = s.top_p < 1.0 ? 1.0 : 0.0;
    const bool k_on = s.top_k > 0 && s.top_k < V;
    top_k_on[r] = k_on ? 1.0 : 0.0;
    kth_index[r] = k_on ? s.top_k - 1 : 0;
    if (k_on) k_max = std::max(k_max, s.top_k);
    any_min_p |= s.min_p > 0.0;
    any_top_p |= s.top_p < 1.0;
  }
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const at::Tensor raw = logits.to(at::kFloat);
  at::Tensor x = raw / column(effective_temperatures(rows), raw);
  if (any_min_p) {
    const at::Tensor probs = at::softmax(x, -1);
    const at::Tensor threshold = std::get<0>(probs.max(-1, /*keepdim=*/true)) * column(min_p, probs);
    x = x.masked_fill(probs < threshold, neg_inf);
  }
  if (k_max > 0) {
    // Keep every token whose logit reaches the k-th largest (ties at the k-th value stay, as
    // in Hugging Face and vLLM); topk over k_max avoids a full sort.
    const at::Tensor top = std::get<0>(x.topk(k_max, -1));
    const at::Tensor index = at::tensor(kth_index, at::kLong).to(x.device()).view({R, 1});
    const at::Tensor on = column(top_k_on, x) > 0;
    const at::Tensor kth = at::where(on, top.gather(1, index), at::full_like(on, neg_inf, x.options()));
    x = x.masked_fill(x < kth, neg_inf);
  }
  if (any_top_p) {
    auto [sorted, order] = x.sort(-1, /*descending=*/true);
    const at::Tensor probs = at::softmax(sorted, -1);
    const at::Tensor mass_above = probs.cumsum(-1) - probs;
    // Rows with top_p = 1 are left alone: float32 cumulative sums over a large vocabulary can
    // reach 1 before the tail and would cut it.
    const at::Tensor drop = (mass_above >= column(top_p, probs)) & (column(top_p_on, probs) > 0);
    x = x.masked_fill(at::zeros_like(drop).scatter(-1, order, drop), neg_inf);
  }
  return at::log_softmax(x, -1);
}

SampledTokens sample_tokens(const at::Tensor& logits, const std::vector<RowSampling>& rows,
                            const std::vector<double>& uniforms, LogprobsMode mode) {
  const int64_t R = logits.size(0), V = logits.size(1);
  if (static_cast<int64_t>(uniforms.size()) != R) throw std::invalid_argument("sample_tokens: one uniform per row");
  const at::Tensor raw_logits = logits.to(at::kFloat);
  bool all_greedy = true;
  std::vector<int64_t> greedy(R);
  for (int64_t r = 0; r < R; ++r) {
    greedy[r] = is_greedy(rows[static_cast<std::size_t>(r)].temperature) ? 1 : 0;
    all_greedy &= greedy[r] != 0;
  }
  at::Tensor processed;
  const bool need_processed = !all_greedy || mode == LogprobsMode::kProcessed;
  if (need_processed) processed = processed_logprobs(raw_logits, rows);
  // Greedy rows take the most likely kept token (the raw argmax, unless a truncation removed
  // one of several tokens tied at the maximum).
  at::Tensor tokens = need_processed ? processed.argmax(-1) : raw_logits.argmax(-1);
  if (!all_greedy) {
    const at::Tensor cdf = processed.exp().to(at::kDouble).cumsum(-1);
    const at::Tensor target = at::tensor(uniforms, at::kDouble).to(cdf.device()).view({R, 1}) * cdf.narrow(1, V - 1, 1);
    at::Tensor drawn = at::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).view({R}).clamp_max(V - 1);
    // u * total can round up to total itself; never return a token outside the kept set.
    const at::Tensor outside = at::isinf(processed.gather(1, drawn.view({R, 1})).view({R}));
    drawn = at::where(outside, processed.argmax(-1), drawn);
    const at::Tensor is_greedy_row = at::tensor(greedy, at::kLong).to(cdf.device()) != 0;
    tokens = at::where(is_greedy_row, tokens, drawn);
  }
  at::Tensor source;
  switch (mode) {
    case LogprobsMode::kRaw: source = at::log_softmax(raw_logits, -1); break;
    case LogprobsMode::kScaled: source = at::log_softmax(raw_logits / column(effective_temperatures(rows), raw_logits), -1); break;
    case LogprobsMode::kProcessed: source = processed; break;
  }
  // One copy back per call, which waits for the device once: the tokens (exact in float64),
  // their log-probs, and whether every logit was finite.
  const at::Tensor finite = at::isfinite(raw_logits).all().to(at::kDouble).view({1});
  const at::Tensor chosen = source.gather(1, tokens.view({R, 1})).view({R});
  const at::Tensor host = at::cat({tokens.to(at::kDouble), chosen.to(at::kDouble), finite}).to(at::kCPU);
  // A diverged policy (NaN/inf weights) must not turn into arbitrary tokens with NaN log-probs.
  if (host[2 * R].item<double>() == 0.0)
    throw std::runtime_error("the model produced non-finite logits (NaN or inf): its weights have diverged or overflowed");
  SampledTokens out;
  out.tokens = host.narrow(0, 0, R).to(at::kLong);
  out.logprobs = host.narrow(0, R, R).to(at::kFloat);
  return out;
}

}  // namespace grpo::native
