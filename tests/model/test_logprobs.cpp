// The chunked, recomputing log-prob function against the naive full-logits version and
// against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/model/logprobs.h"
#include "model_fixtures.h"

using namespace grpo::core;
using grpo::testing::max_abs_diff;

TEST(TokenLogProbs, HandComputedTwoTokenVocabulary) {
  // hidden = [1, 0], W = [[2, 0], [0, 0]] -> logits [2, 0]:
  // log p(0) = 2 - log(e^2 + 1), log p(1) = -log(e^2 + 1).
  auto h = torch::tensor({{1.0f, 0.0f}, {1.0f, 0.0f}});
  auto w = torch::tensor({{2.0f, 0.0f}, {0.0f, 0.0f}});
  auto t = torch::tensor({0, 1}, torch::kLong);
  LogProbOptions opts;
  opts.with_entropy = true;
  auto r = token_logprobs(h, w, t, opts);
  const double z = std::log(std::exp(2.0) + 1.0);
  EXPECT_NEAR(r.logprobs[0].item<float>(), 2.0 - z, 1e-6);
  EXPECT_NEAR(r.logprobs[1].item<float>(), -z, 1e-6);
  const double p0 = std::exp(2.0 - z), p1 = std::exp(-z);
  EXPECT_NEAR(r.entropy[0].item<float>(), -(p0 * std::log(p0) + p1 * std::log(p1)), 1e-6);
  // Temperature 2 halves the logits: [1, 0].
  opts.temperature = 2.0;
  auto r2 = token_logprobs(h, w, t, opts);
  EXPECT_NEAR(r2.logprobs[0].item<float>(), 1.0 - std::log(std::exp(1.0) + 1.0), 1e-6);
}

// (chunk, temperature, with_entropy, logit_softcap): the naive version's gradients are autograd's
// (through tanh for the soft-cap), the chunked version's are its own backward.
class ChunkedVsNaive : public ::testing::TestWithParam<std::tuple<int64_t, double, bool, double>> {};

TEST_P(ChunkedVsNaive, ValuesAndGradientsMatch) {
  const auto [chunk, temperature, with_entropy, softcap] = GetParam();
  torch::manual_seed(1);
  const int64_t n = 37, hidden = 16, vocab = 101;  // n not a multiple of any chunk size used
  auto h1 = (torch::randn({n, hidden}) * 2).requires_grad_(true);
  auto w1 = torch::randn({vocab, hidden}).requires_grad_(true);
  auto h2 = h1.detach().clone().requires_grad_(true);
  auto w2 = w1.detach().clone().requires_grad_(true);
  auto t = torch::randint(vocab, {n}, torch::kLong);
  auto g_lp = torch::randn({n});
  auto g_ent = torch::randn({n});

  LogProbOptions opts;
  opts.chunk_tokens = chunk;
  opts.temperature = temperature;
  opts.with_entropy = with_entropy;
  opts.logit_softcap = softcap;  // logits here reach about +-20: a cap of 3 bends most of them
  auto a = token_logprobs(h1, w1, t, opts);
  auto b = token_logprobs_naive(h2, w2, t, opts);
  EXPECT_LT(max_abs_diff(a.logprobs, b.logprobs), 1e-5);
  auto loss_a = (a.logprobs * g_lp).sum();
  auto loss_b = (b.logprobs * g_lp).sum();
  if (with_entropy) {
    EXPECT_LT(max_abs_diff(a.entropy, b.entropy), 1e-5);
    loss_a = loss_a + (a.entropy * g_ent).sum();
    loss_b = loss_b + (b.entropy * g_ent).sum();
  }
  loss_a.backward();
  loss_b.backward();
  EXPECT_LT(max_abs_diff(h1.grad(), h2.grad()), 1e-4);
  EXPECT_LT(max_abs_diff(w1.grad(), w2.grad()), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Chunks, ChunkedVsNaive,
                         ::testing::Combine(::testing::Values<int64_t>(1, 8, 37, 1000), ::testing::Values(1.0, 0.7),
                                            ::testing::Bool(), ::testing::Values(0.0, 3.0)));

TEST(TokenLogProbs, SoftCapIsAppliedBeforeTheTemperature) {
  // logits [4, 0] capped at 2: 2 tanh(2) and 0; then temperature 2 halves them.
  auto h = torch::tensor({{1.0f, 0.0f}});
  auto w = torch::tensor({{4.0f, 0.0f}, {0.0f, 0.0f}});
  LogProbOptions opts;
  opts.logit_softcap = 2.0;
  opts.temperature = 2.0;
  const double z0 = std::tanh(2.0);  // 2 tanh(4 / 2) / 2
  EXPECT_NEAR(token_logprobs(h, w, torch::tensor({0}, torch::kLong), opts).logprobs[0].item<float>(),
              z0 - std::log(std::exp(z0) + 1.0), 1e-6);
}

TEST(TokenLogProbs, KeepsLeadingShape) {
  torch::manual_seed(2);
  auto h = torch::randn({3, 5, 8});
  auto w = torch::randn({11, 8});
  auto t = torch::randint(11, {3, 5}, torch::kLong);
  auto r = token_logprobs(h, w, t, {4, 1.0, false});
  EXPECT_EQ(r.logprobs.sizes(), t.sizes());
  EXPECT_LT(max_abs_diff(r.logprobs, token_logprobs_naive(h, w, t).logprobs), 1e-5);
  EXPECT_LE(r.logprobs.max().item<float>(), 0.0f);
}

TEST(TokenLogProbs, Bfloat16WeightsUpcastLikeTransformers) {
  torch::manual_seed(3);
  auto h = torch::randn({9, 8}).to(torch::kBFloat16);
  auto w = torch::randn({13, 8}).to(torch::kBFloat16);
  auto t = torch::randint(13, {9}, torch::kLong);
  auto r = token_logprobs(h, w, t, {4, 1.0, false});
  EXPECT_EQ(r.logprobs.scalar_type(), torch::kFloat32);
  // Reference: bf16 logits upcast to float32, log_softmax in float32.
  auto ref = torch::log_softmax(torch::matmul(h, w.t()).to(torch::kFloat32), -1).gather(1, t.unsqueeze(1)).squeeze(1);
  EXPECT_LT(max_abs_diff(r.logprobs, ref), 1e-5);
}

TEST(TokenLogProbs, PartialGradientsMatchNaive) {
  // Only the entropy feeds the loss (the log-prob branch of backward is skipped), and only one
  // input requires grad at a time.
  torch::manual_seed(4);
  auto t = torch::randint(23, {11}, torch::kLong);
  for (int which = 0; which < 2; ++which) {
    auto h1 = torch::randn({11, 6}), w1 = torch::randn({23, 6});
    auto h2 = h1.clone(), w2 = w1.clone();
    (which == 0 ? h1 : w1).requires_grad_(true);
    (which == 0 ? h2 : w2).requires_grad_(true);
    LogProbOptions opts{4, 1.3, true};
    token_logprobs(h1, w1, t, opts).entropy.sum().backward();
    token_logprobs_naive(h2, w2, t, opts).entropy.sum().backward();
    auto& g1 = which == 0 ? h1 : w1;
    auto& g2 = which == 0 ? h2 : w2;
    EXPECT_LT(max_abs_diff(g1.grad(), g2.grad()), 1e-4) << (which == 0 ? "hidden" : "weight");
    EXPECT_FALSE((which == 0 ? w1 : h1).grad().defined());
  }
}

TEST(TokenLogProbs, BadArgumentsAreErrors) {
  auto h = torch::randn({4, 8});
  auto w = torch::randn({10, 8});
  EXPECT_THROW(token_logprobs(h, w, torch::zeros({5}, torch::kLong)), std::invalid_argument);
  EXPECT_THROW(token_logprobs(h, w, torch::zeros({4}, torch::kInt)), std::invalid_argument);
  EXPECT_THROW(token_logprobs(h, torch::randn({10, 7}), torch::zeros({4}, torch::kLong)), std::invalid_argument);
  EXPECT_THROW(token_logprobs(h, w, torch::zeros({4}, torch::kLong), {0, 1.0, false}), std::invalid_argument);
  EXPECT_THROW(token_logprobs(h, w, torch::full({4}, 10, torch::kLong)), std::invalid_argument);  // id == vocab
  EXPECT_THROW(token_logprobs(h, w, torch::full({4}, -1, torch::kLong)), std::invalid_argument);
}
