// The sampler against the published definitions of temperature, top-k, top-p (nucleus) and
// min-p: the reference distributions here are written from the formulas in double precision,
// independently of sampler.cpp, and sampled frequencies are checked with a chi-square test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "plugins/backends/native/sampler.h"

using grpo::native::LogprobsMode;
using grpo::native::processed_logprobs;
using grpo::native::RowSampling;
using grpo::native::SampleStream;
using grpo::native::sample_tokens;

namespace {

const std::vector<double> kLogits = {2.0, 1.5, 1.2, 0.9, 0.3, 0.0, -0.4, -1.0, -1.7, -3.0};

// The target distribution, step by step from the definitions (vLLM's order: temperature,
// min-p, top-k, top-p).
std::vector<double> reference_distribution(const std::vector<double>& logits, const RowSampling& s) {
  const std::size_t V = logits.size();
  const double t = s.temperature > 0 ? s.temperature : 1.0;
  std::vector<double> z(V);
  for (std::size_t i = 0; i < V; ++i) z[i] = logits[i] / t;
  std::vector<bool> keep(V, true);
  auto softmax_kept = [&]() {
    double m = -INFINITY, sum = 0;
    for (std::size_t i = 0; i < V; ++i)
      if (keep[i]) m = std::max(m, z[i]);
    std::vector<double> p(V, 0.0);
    for (std::size_t i = 0; i < V; ++i)
      if (keep[i]) sum += (p[i] = std::exp(z[i] - m));
    for (double& x : p) x /= sum;
    return p;
  };
  if (s.min_p > 0) {  // drop p_i < min_p * max_j p_j
    const auto p = softmax_kept();
    const double top = *std::max_element(p.begin(), p.end());
    for (std::size_t i = 0; i < V; ++i)
      if (p[i] < s.min_p * top) keep[i] = false;
  }
  std::vector<std::size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return z[a] > z[b]; });
  if (s.top_k > 0)
    for (std::size_t r = static_cast<std::size_t>(s.top_k); r < V; ++r) keep[order[r]] = false;
  if (s.top_p < 1.0) {  // nucleus: the smallest top set whose mass reaches top_p
    const auto p = softmax_kept();
    double mass = 0;
    for (std::size_t r = 0; r < V; ++r) {
      const std::size_t i = order[r];
      if (!keep[i]) continue;
      if (mass >= s.top_p) keep[i] = false;
      mass += p[i];
    }
  }
  return softmax_kept();
}

// The 99.9% quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty; within
// 1% of the tabulated values for df >= 2, e.g. df 9: 27.88 tabulated).
double chi_square_999(int df) {
  const double z = 3.0902, k = static_cast<double>(df);
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct SamplingCase {
  const char* name;
  RowSampling params;
};

class SamplerDistribution : public ::testing::TestWithParam<SamplingCase> {};

}  // namespace

// 40,000 draws from one fixed seed: every token outside the kept set has count 0, and the
// counts inside pass a chi-square test at the 0.1% level (the tolerance: with a fixed seed
// the outcome is deterministic, and a wrong distribution — e.g. top-p keeping one token too
// many or too few — gives statistics in the hundreds).
TEST_P(SamplerDistribution, FrequenciesMatchTheTarget) {
  const RowSampling params = GetParam().params;
  const int draws = 40000;
  const auto V = static_cast<int64_t>(kLogits.size());
  const at::Tensor row = at::tensor(kLogits, at::kDouble).to(at::kFloat).view({1, V});
  const at::Tensor logits = row.expand({draws, V}).contiguous();
  std::vector<RowSampling> rows(draws, params);
  std::vector<double> uniforms(draws);
  SampleStream stream(1234, 0);
  for (double& u : uniforms) u = stream.next_uniform();
  const auto chosen = sample_tokens(logits, rows, uniforms, LogprobsMode::kProcessed);
  std::vector<int> counts(V, 0);
  for (int i = 0; i < draws; ++i) ++counts[chosen.tokens[i].item<int64_t>()];

  const auto expected = reference_distribution(kLogits, params);
  double chi2 = 0;
  int kept = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
      continue;
    }
    ++kept;
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  ASSERT_GE(kept, 2) << "the case should keep several tokens";
  EXPECT_LT(chi2, chi_square_999(kept - 1)) << "kept " << kept << " tokens";

  // The processed log-probs are log(target) on the kept set and -inf elsewhere.
  const at::Tensor lp = processed_logprobs(row, {params}).to(at::kDouble);
  for (int64_t i = 0; i < V; ++i) {
    if (expected[i] == 0.0) {
      EXPECT_TRUE(std::isinf(lp[0][i].item<double>())) << i;
    } else {
      EXPECT_NEAR(lp[0][i].item<double>(), std::log(expected[i]), 1e-5) << i;
    }
  }
  // Each returned log-prob is that of its chosen token.
  for (int i = 0; i < 50; ++i)
    EXPECT_NEAR(chosen.logprobs[i].item<double>(), std::log(expected[chosen.tokens[i].item<int64_t>()]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Sampler, SamplerDistribution,
    ::testing::Values(SamplingCase{"temperature1", {1.0, 1.0, -1, 0.0}}, SamplingCase{"temperature07", {0.7, 1.0, -1, 0.0}},
                      SamplingCase{"temperature15", {1.5, 1.0, -1, 0.0}}, SamplingCase{"top_k4", {1.0, 1.0, 4, 0.0}},
                      SamplingCase{"top_p08", {1.0, 0.8, -1, 0.0}}, SamplingCase{"top_p05_t09", {0.9, 0.5, -1, 0.0}},
                      SamplingCase{"min_p02", {1.0, 1.0, -1, 0.2}},
                      SamplingCase{"all", {0.8, 0.9, 6, 0.05}}),
    [](const ::testing::TestParamInfo<SamplingCase>& info) { return std::string(info.param.name); });

// Worked by hand: logits (2, 1, 0, -1), top_k 2 -> softmax over (2, 1) = (e/(e+1), 1/(e+1)).
TEST(Sampler, TopKByHand) {
  const at::Tensor logits = at::tensor(std::vector<float>{2, 1, 0, -1}).view({1, 4});
  const at::Tensor lp = processed_logprobs(logits, {RowSampling{1.0, 1.0, 2, 0.0}});
  const double e = std::exp(1.0);
  EXPECT_NEAR(lp[0][0].item<double>(), std::log(e / (e + 1)), 1e-6);
  EXPECT_NEAR(lp[0][1].item<double>(), std::log(1 / (e + 1)), 1e-6);
  EXPECT_TRUE(std::isinf(lp[0][2].item<double>()) && std::isinf(lp[0][3].item<double>()));
}

// Top-p keeps the token that crosses the threshold: probabilities (0.5, 0.3, 0.2) with
// top_p 0.6 keep the first two (0.5 < 0.6, then 0.8 >= 0.6), renormalized to (5/8, 3/8).
TEST(Sampler, TopPKeepsTheCrossingToken) {
  const at::Tensor logits = at::tensor(std::vector<double>{std::log(0.5), std::log(0.3), std::log(0.2)}).to(at::kFloat).view({1, 3});
  const at::Tensor lp = processed_logprobs(logits, {RowSampling{1.0, 0.6, -1, 0.0}});
  EXPECT_NEAR(lp[0][0].item<double>(), std::log(5.0 / 8), 1e-6);
  EXPECT_NEAR(lp[0][1].item<double>(), std::log(3.0 / 8), 1e-6);
  EXPECT_TRUE(std::isinf(lp[0][2].item<double>()));
  // A tiny top_p keeps only the most likely token.
  const at::Tensor one = processed_logprobs(logits, {RowSampling{1.0, 1e-6, -1, 0.0}});
  EXPECT_NEAR(one[0][0].item<double>(), 0.0, 1e-6);
  EXPECT_TRUE(std::isinf(one[0][1].item<double>()));
}

// Greedy takes the argmax; raw log-probs are log_softmax of the logits whatever the
// sampling parameters, processed ones follow the truncation.
TEST(Sampler, GreedyAndRawLogprobs) {
  const at::Tensor logits = at::tensor(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f, 1.0f, 0.5f}).view({2, 3});
  const std::vector<RowSampling> rows = {RowSampling{0.0, 1.0, -1, 0.0}, RowSampling{0.0, 1.0, 1, 0.0}};
  const auto raw = sample_tokens(logits, rows, {0.99, 0.99}, LogprobsMode::kRaw);
  EXPECT_EQ(raw.tokens[0].item<int64_t>(), 1);
  EXPECT_EQ(raw.tokens[1].item<int64_t>(), 0);
  auto log_softmax_at = [](std::vector<double> x, int i) {
    double m = *std::max_element(x.begin(), x.end()), s = 0;
    for (double v : x) s += std::exp(v - m);
    return x[i] - m - std::log(s);
  };
  EXPECT_NEAR(raw.logprobs[0].item<double>(), log_softmax_at({0.1, 3.0, -2.0}, 1), 1e-6);
  EXPECT_NEAR(raw.logprobs[1].item<double>(), log_softmax_at({2.9, 1.0, 0.5}, 0), 1e-6);
  const auto processed = sample_tokens(logits, rows, {0.5, 0.5}, LogprobsMode::kProcessed);
  EXPECT_NEAR(processed.logprobs[1].item<double>(), 0.0, 1e-6);  // top_k 1: a point mass
}

// A row's token depends on its own uniform and logits only, not on the other rows.
TEST(Sampler, RowsAreIndependentOfTheBatch) {
  const auto V = static_cast<int64_t>(kLogits.size());
  const at::Tensor row = at::tensor(kLogits, at::kDouble).to(at::kFloat).view({1, V});
  const RowSampling p{1.0, 0.9, -1, 0.0};
  for (double u : {0.01, 0.3, 0.77, 0.999999}) {
    const auto alone = sample_tokens(row, {p}, {u}, LogprobsMode::kRaw);
    const at::Tensor batch = at::cat({at::randn({3, V}), row, at::randn({2, V})});
    const std::vector<RowSampling> rows = {RowSampling{0.0, 1, -1, 0}, RowSampling{2.0, 1, 3, 0}, p, p, p, p};
    const auto together = sample_tokens(batch, rows, {0.5, 0.2, 0.9, u, 0.1, 0.4}, LogprobsMode::kRaw);
    EXPECT_EQ(together.tokens[3].item<int64_t>(), alone.tokens[0].item<int64_t>()) << u;
  }
}

TEST(Sampler, StreamsAreReproducibleAndDistinct) {
  SampleStream a(7, 0), b(7, 0), c(7, 1), d(8, 0);
  std::vector<double> xa, xb, xc, xd;
  for (int i = 0; i < 100; ++i) {
    xa.push_back(a.next_uniform());
    xb.push_back(b.next_uniform());
    xc.push_back(c.next_uniform());
    xd.push_back(d.next_uniform());
  }
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
  EXPECT_NE(xa, xd);
  for (double x : xa) EXPECT_TRUE(x >= 0.0 && x < 1.0);
  const double mean = std::accumulate(xa.begin(), xa.end(), 0.0) / xa.size();
  EXPECT_NEAR(mean, 0.5, 0.1);
}

// Tokens tied with the k-th largest logit stay (Hugging Face and vLLM keep ties): top_k 1
// over (1, 3, 3, 0) keeps both 3s at 1/2 each, and a greedy row's processed log-prob is that
// of a kept token, never -inf.
TEST(Sampler, TopKKeepsTiesAtTheKthValue) {
  const at::Tensor logits = at::tensor(std::vector<float>{1, 3, 3, 0}).view({1, 4});
  const at::Tensor lp = processed_logprobs(logits, {RowSampling{1.0, 1.0, 1, 0.0}});
  EXPECT_NEAR(lp[0][1].item<double>(), std::log(0.5), 1e-6);
  EXPECT_NEAR(lp[0][2].item<double>(), std::log(0.5), 1e-6);
  EXPECT_TRUE(std::isinf(lp[0][0].item<double>()) && std::isinf(lp[0][3].item<double>()));
  const auto greedy = sample_tokens(logits, {RowSampling{0.0, 1.0, 1, 0.0}}, {0.0}, LogprobsMode::kProcessed);
  EXPECT_NEAR(greedy.logprobs[0].item<double>(), std::log(0.5), 1e-6);
}

// A row with top_p = 1 keeps its whole vocabulary even when another row of the batch uses
// top-p (float32 cumulative sums over 150k tokens reach 1 before the tail).
TEST(Sampler, TopPOneRowsKeepEveryTokenInAMixedBatch) {
  const int64_t V = 151936;
  const at::Tensor row = at::randn({1, V}, at::TensorOptions().dtype(at::kFloat)) * 3;
  const at::Tensor logits = at::cat({row, row});
  const at::Tensor lp = processed_logprobs(logits, {RowSampling{1.0, 1.0, -1, 0.0}, RowSampling{1.0, 0.5, -1, 0.0}});
  EXPECT_EQ(at::isinf(lp[0]).sum().item<int64_t>(), 0);
  EXPECT_GT(at::isinf(lp[1]).sum().item<int64_t>(), V / 2);
  EXPECT_TRUE(at::allclose(lp[0], at::log_softmax(row[0], -1), 1e-5, 1e-5));
}

// Temperatures below 1e-5 are greedy (dividing by them would overflow to inf and NaN), and
// non-finite logits are an error, not a token.
TEST(Sampler, TinyTemperaturesAreGreedyAndNonFiniteLogitsThrow) {
  const at::Tensor logits = at::tensor(std::vector<float>{0.5f, 2.0f, 1.0f}).view({1, 3});
  const auto tiny = sample_tokens(logits, {RowSampling{1e-40, 1.0, -1, 0.0}}, {0.99}, LogprobsMode::kProcessed);
  EXPECT_EQ(tiny.tokens[0].item<int64_t>(), 1);
  EXPECT_TRUE(std::isfinite(tiny.logprobs[0].item<double>()));
  const at::Tensor bad = at::tensor(std::vector<float>{0.5f, NAN, 1.0f}).view({1, 3});
  EXPECT_THROW(sample_tokens(bad, {RowSampling{}}, {0.5}, LogprobsMode::kRaw), std::runtime_error);
}

// "scaled" log-probs are log_softmax(logits / T) without truncation (verl/TRL trainers).
TEST(Sampler, ScaledLogprobsUseTheTemperatureOnly) {
  const at::Tensor logits = at::tensor(std::vector<float>{0.5f, 2.0f, 1.0f, -1.0f}).view({1, 4});
  const auto s = sample_tokens(logits, {RowSampling{0.5, 0.6, 2, 0.0}}, {0.3}, LogprobsMode::kScaled);
  const double z[4] = {1.0, 4.0, 2.0, -2.0};  // logits / 0.5
  const double lse = std::log(std::exp(z[0]) + std::exp(z[1]) + std::exp(z[2]) + std::exp(z[3]));
  EXPECT_NEAR(s.logprobs[0].item<double>(), z[s.tokens[0].item<int64_t>()] - lse, 1e-6);
}
