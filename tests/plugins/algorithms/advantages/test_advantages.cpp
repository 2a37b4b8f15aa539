// The advantage estimators of plugins/algorithms/advantages, loaded the way a run loads them
// (PluginRegistry over the build's plugin folder, options as a ConfigValue tree).
//
// Expected values are computed by hand from the published formulas (arithmetic in the
// comments). Where a value has many digits it comes from a one-off plain-Python evaluation
// of the same formula (no torch, not the code under test), e.g.
//   (2 - 1) / (math.sqrt(2) + 1e-6) = 0.7071062811869011
// and is pasted as a literal.
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/torch/advantage.h"
#include "tests/support/error_of.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::AdvantageEstimator;
using grpo::sdk::AdvantageInput;
using grpo::sdk::AdvantageOutput;
using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using grpo::testing::error_of;

using Rows = std::vector<std::vector<double>>;

grpo::core::PluginRegistry& registry() { return grpo::testing::build_plugin_registry(); }

std::shared_ptr<AdvantageEstimator> make(const std::string& name, const std::vector<grpo::testing::PluginOption>& opts = {}) {
  return grpo::testing::create_component<AdvantageEstimator>(name, opts, "algorithm.advantage");
}

at::Tensor rows_tensor(const Rows& rows) {
  const int64_t B = static_cast<int64_t>(rows.size());
  const int64_t T = B ? static_cast<int64_t>(rows[0].size()) : 0;
  at::Tensor t = at::zeros({B, T}, at::kDouble);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < T; ++j) t[i][j] = rows[i][j];
  return t.to(at::kFloat);
}

AdvantageInput input(const std::vector<double>& rewards, const std::vector<int64_t>& groups, const Rows& mask) {
  AdvantageInput in;
  in.rewards = at::tensor(rewards, at::kDouble).to(at::kFloat);
  in.batch.group_ids = at::tensor(groups, at::kLong);
  in.batch.response_mask = rows_tensor(mask);
  return in;
}

// Every element of `t` [B, T] equals `expected` within `tol`, and nothing is NaN.
void expect_rows(const at::Tensor& t, const Rows& expected, double tol = 1e-5) {
  ASSERT_TRUE(t.defined());
  ASSERT_EQ(t.dim(), 2);
  ASSERT_EQ(t.size(0), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_FALSE(t.requires_grad());
  at::Tensor d = t.to(at::kDouble).contiguous();
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(t.size(1), static_cast<int64_t>(expected[i].size()));
    for (size_t j = 0; j < expected[i].size(); ++j) {
      const double v = d[i][j].item<double>();
      EXPECT_FALSE(std::isnan(v)) << "[" << i << "][" << j << "]";
      EXPECT_NEAR(v, expected[i][j], tol) << "[" << i << "][" << j << "]";
    }
  }
}

double metric(const AdvantageOutput& out, const std::string& name) {
  for (const auto& m : out.metrics)
    if (m.name == name) {
      EXPECT_EQ(m.value.dim(), 0) << name;
      return m.value.item<double>();
    }
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

// The shared batch for the group estimators: groups of different sizes, interleaved, with
// arbitrary ids; padding in several rows and one fully masked row (sample 3).
//   sample  group  reward  mask
//   0       7      1       1 1 0
//   1       3      0       1 1 1
//   2       7      0       1 0 0
//   3       3      2       0 0 0   (no response tokens)
//   4       7      2       1 1 1
//   5       42     5       1 1 0   (a group of 1)
AdvantageInput mixed_batch() {
  return input({1, 0, 0, 2, 2, 5}, {7, 3, 7, 3, 7, 42},
               {{1, 1, 0}, {1, 1, 1}, {1, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 0}});
}

Rows broadcast(const std::vector<double>& a, const Rows& mask) {
  Rows out = mask;
  for (size_t i = 0; i < mask.size(); ++i)
    for (size_t j = 0; j < mask[i].size(); ++j) out[i][j] = a[i] * mask[i][j];
  return out;
}

const Rows kMixedMask = {{1, 1, 0}, {1, 1, 1}, {1, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 0}};

// ------------------------------------------------------------------------------------------
// grpo

TEST(AdvantageGrpo, MixedGroupsDefaults) {
  // group 7 = {1, 0, 2}: mean 1, unbiased std sqrt((0 + 1 + 1) / 2) = 1
  //   -> (1-1)/(1+1e-6) = 0, (0-1)/(1+1e-6) = -0.999999000001, (2-1)/(1+1e-6) = +0.999999000001
  // group 3 = {0, 2}: mean 1, unbiased std sqrt((1 + 1) / 1) = sqrt(2)
  //   -> -+1 / (1.41421356 + 1e-6) = -+0.7071062811869011
  // group 42 = {5} (group of 1: mean 0, std 1, verl) -> 5 / (1 + 1e-6) = 4.999995000005
  AdvantageOutput out = make("grpo")->compute(mixed_batch());
  const std::vector<double> a = {0.0, -0.7071062811869011, -0.999999000001, 0.7071062811869011, 0.999999000001,
                                 4.999995000005};
  expect_rows(out.advantages, broadcast(a, kMixedMask));  // row 3 fully masked: all zero
  EXPECT_FALSE(out.returns.defined());
  // Only group 42 (one sample) has no spread: 1 of 3 groups.
  EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 1.0 / 3.0, 1e-6);
  // Over the 11 response tokens (row 3 has none): max 4.999995 (group 42), min -0.999999 (row 2).
  EXPECT_NEAR(metric(out, "advantages/max"), 4.999995000005, 1e-5);
  EXPECT_NEAR(metric(out, "advantages/min"), -0.999999000001, 1e-5);
  // mean = (0*2 - 0.70710628*3 - 0.999999*1 + 0.999999*3 + 4.999995*2) / 11
  //      = (-2.12131884 + 1.999998 + 9.99999) / 11 = 9.87866916 / 11 = 0.89806083
  EXPECT_NEAR(metric(out, "advantages/mean"), 0.89806083, 1e-5);
}

TEST(AdvantageGrpo, AllEqualGroupIsExactlyZero) {
  // group 1 = {0.1, 0.1, 0.1}: all equal -> 0 exactly (never 0/0, never rounding noise / eps)
  // group 2 = {0.3, 0.7}: mean 0.5, unbiased std sqrt(0.04 + 0.04) = 0.28284271
  //   -> -+0.2 / (0.28284271 + 1e-6) = -+0.7071042811953865
  AdvantageInput in = input({0.1, 0.1, 0.1, 0.3, 0.7}, {1, 1, 1, 2, 2}, {{1, 1}, {1, 1}, {1, 0}, {1, 1}, {1, 1}});
  for (const char* eps : {"1e-6", "1e-30"}) {
    AdvantageOutput out = make("grpo", {{"epsilon", eps}})->compute(in);
    expect_rows(out.advantages, {{0, 0}, {0, 0}, {0, 0}, {-0.7071042811953865, -0.7071042811953865},
                                 {0.7071042811953865, 0.7071042811953865}},
                std::string(eps) == "1e-6" ? 1e-5 : 1e-4);
    EXPECT_EQ(out.advantages.slice(0, 0, 3).abs().max().item<double>(), 0.0);
    EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 0.5, 1e-6);
  }
}

TEST(AdvantageGrpo, EpsilonAndStdOptions) {
  // rewards {0, 2e-6}: mean 1e-6; unbiased std sqrt(2 * 1e-12 / 1) = 1.41421e-6; population std 1e-6.
  //   default (unbiased, eps 1e-6): 1e-6 / (1.41421e-6 + 1e-6) = 1 / 2.41421 = 0.4142135623730951
  //   population:                   1e-6 / (1e-6 + 1e-6)       = 0.5
  //   unbiased, eps 1e-8:           1e-6 / (1.41421e-6 + 1e-8)  = 0.7021418882809617
  AdvantageInput in = input({0, 2e-6}, {0, 0}, {{1}, {1}});
  expect_rows(make("grpo")->compute(in).advantages, {{-0.4142135623730951}, {0.4142135623730951}});
  expect_rows(make("grpo", {{"std", "population"}})->compute(in).advantages, {{-0.5}, {0.5}});
  expect_rows(make("grpo", {{"epsilon", "1e-8"}})->compute(in).advantages,
              {{-0.7021418882809617}, {0.7021418882809617}});
}

TEST(AdvantageGrpo, ScaleBatchAndNone) {
  // groups {0, 2} and {1, 3}: group means 1 and 2 -> centred -1, +1, -1, +1.
  // batch: std of {0, 2, 1, 3}: mean 1.5, unbiased var (2.25+0.25+0.25+2.25)/3 = 5/3, std 1.29099445
  //   -> -+1 / (1.29099445 + 1e-6) = -+0.7745960692419482
  //   population: var 5/4, std 1.11803399 -> 1 / (1.11803399 + 1e-6) = 0.8944263910006315
  // none: the centred values -+1 (= dr_grpo)
  AdvantageInput in = input({0, 2, 1, 3}, {0, 0, 1, 1}, {{1}, {1}, {1}, {1}});
  const double b = 0.7745960692419482, p = 0.8944263910006315;
  expect_rows(make("grpo", {{"scale", "batch"}})->compute(in).advantages, {{-b}, {b}, {-b}, {b}});
  expect_rows(make("grpo", {{"scale", "batch"}, {"std", "population"}})->compute(in).advantages,
              {{-p}, {p}, {-p}, {p}});
  expect_rows(make("grpo", {{"scale", "none"}})->compute(in).advantages, {{-1}, {1}, {-1}, {1}});
}

TEST(AdvantageGrpo, OutputsNeverRequireGrad) {
  AdvantageInput in = mixed_batch();
  in.rewards = in.rewards.clone().set_requires_grad(true);
  for (const char* name : {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "reinforce_pp"}) {
    AdvantageOutput out = make(name)->compute(in);
    EXPECT_FALSE(out.advantages.requires_grad()) << name;
    if (out.returns.defined()) EXPECT_FALSE(out.returns.requires_grad()) << name;
    for (const auto& m : out.metrics) EXPECT_FALSE(m.value.requires_grad()) << name << " " << m.name;
  }
  AdvantageInput pk = input({0.2, 1.0}, {1, 1}, {{1}, {1}});
  pk.rewards.set_requires_grad(true);
  EXPECT_FALSE(make("grpo_passk")->compute(pk).advantages.requires_grad());
  AdvantageInput tok = input({1.0}, {0}, {{1, 1}});
  tok.token_rewards = rows_tensor({{0.5, 1.0}}).set_requires_grad(true);
  AdvantageOutput out = make("reinforce_pp")->compute(tok);
  EXPECT_FALSE(out.advantages.requires_grad());
  EXPECT_FALSE(out.returns.requires_grad());
}

TEST(AdvantageGrpo, OptionsValidated) {
  EXPECT_NE(error_of([] { make("grpo", {{"epsilon", "-1e-6"}}); }).find("algorithm.advantage.epsilon: must be"),
            std::string::npos);
  EXPECT_NE(error_of([] { make("grpo", {{"epsilon", "0"}}); }).find("algorithm.advantage.epsilon"), std::string::npos);
  EXPECT_NE(error_of([] { make("grpo", {{"epsilon", ".nan"}}); }).find("algorithm.advantage.epsilon"),
            std::string::npos);
  const std::string std_err = error_of([] { make("grpo", {{"std", "sample"}}); });
  EXPECT_NE(std_err.find("algorithm.advantage.std"), std::string::npos) << std_err;
  EXPECT_NE(std_err.find("unbiased, population"), std::string::npos) << std_err;
  EXPECT_NE(error_of([] { make("grpo", {{"scale", "token"}}); }).find("algorithm.advantage.scale"), std::string::npos);
  // An option the estimator does not read: rejected by the host, with its key path.
  const std::string unknown = error_of([] { make("grpo", {{"epsilom", "1e-6"}}); });
  EXPECT_NE(unknown.find("algorithm.advantage.epsilom: unknown option"), std::string::npos) << unknown;
  EXPECT_NE(error_of([] { make("dr_grpo", {{"epsilon", "1e-6"}}); }).find("algorithm.advantage.epsilon: unknown option"),
            std::string::npos);
  EXPECT_NE(error_of([] { make("rloo", {{"scale", "group"}}); }).find("algorithm.advantage.scale: unknown option"),
            std::string::npos);
}

TEST(AdvantageGrpo, BadInputsAreErrorsNotGarbage) {
  AdvantageInput in = mixed_batch();
  in.batch.group_ids = at::tensor(std::vector<int64_t>{1, 2}, at::kLong);
  const std::string msg = error_of<std::invalid_argument>([&] { make("grpo")->compute(in); });
  EXPECT_NE(msg.find("group_ids must be [B] = [6]"), std::string::npos) << msg;
  AdvantageInput nan = input({1.0, NAN}, {0, 0}, {{1}, {1}});
  EXPECT_NE(error_of<std::invalid_argument>([&] { make("rloo")->compute(nan); }).find("rewards[1] is not finite"),
            std::string::npos);
}

// ------------------------------------------------------------------------------------------
// dr_grpo

TEST(AdvantageDrGrpo, MixedGroups) {
  // r - mean_g: group 7 (mean 1): 0, -1, +1; group 3 (mean 1): -1, +1; group 42 (one sample,
  // mean 0 as verl): 5.
  AdvantageOutput out = make("dr_grpo")->compute(mixed_batch());
  expect_rows(out.advantages, broadcast({0, -1, -1, 1, 1, 5}, kMixedMask));
  EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 1.0 / 3.0, 1e-6);
}

TEST(AdvantageDrGrpo, AllEqualGroupIsZero) {
  // {0.1, 0.1, 0.1} -> 0; {0.3, 0.7} (mean 0.5) -> -0.2, +0.2
  AdvantageOutput out = make("dr_grpo")->compute(input({0.1, 0.3, 0.1, 0.7, 0.1}, {1, 2, 1, 2, 1}, {{1}, {1}, {1}, {1}, {1}}));
  expect_rows(out.advantages, {{0}, {-0.2}, {0}, {0.2}, {0}});
}

// ------------------------------------------------------------------------------------------
// rloo

TEST(AdvantageRloo, MixedGroups) {
  // (n*r - sum_g) / (n - 1):
  //   group 7, n 3, sum 3: (3-3)/2 = 0, (0-3)/2 = -1.5, (6-3)/2 = +1.5
  //   group 3, n 2, sum 2: (0-2)/1 = -2, (4-2)/1 = +2
  //   group 42, n 1: no other sample -> 0
  AdvantageOutput out = make("rloo")->compute(mixed_batch());
  expect_rows(out.advantages, broadcast({0, -2, -1.5, 2, 1.5, 0}, kMixedMask));
}

TEST(AdvantageRloo, TokenRewardsReplaceTheSequenceRewardBySum) {
  // With KL in the reward the trainer passes token rewards; outcome estimators use their sum
  // over the response (verl: scores = token_level_rewards.sum(-1)), padding excluded.
  // Group {0, 1}: sums 1 - 0.1 - 0.1 = 0.8 and 0 - 0.2 = -0.2 (the 5.0 is padding).
  // rloo, n = 2: A0 = (2*0.8 - 0.6) / 1 = 1.0, A1 = (2*(-0.2) - 0.6) / 1 = -1.0.
  AdvantageInput in = input({123.0, -7.0}, {0, 0}, {{1, 1, 1}, {1, 1, 0}});
  in.token_rewards = rows_tensor({{-0.1, -0.1, 1.0}, {0.0, -0.2, 5.0}});
  AdvantageOutput out = make("rloo")->compute(in);
  expect_rows(out.advantages, {{1.0, 1.0, 1.0}, {-1.0, -1.0, 0.0}}, 1e-9);
}

TEST(AdvantageRloo, AllEqualAndLargerGroup) {
  // {4, 4} -> 0; {1, 0, 0, 3} (n 4, sum 4): (4-4)/3 = 0, (0-4)/3 = -1.3333333, (12-4)/3 = 2.6666667
  AdvantageOutput out =
      make("rloo")->compute(input({4, 1, 0, 4, 0, 3}, {9, 8, 8, 9, 8, 8}, {{1}, {1}, {1}, {1}, {1}, {1}}));
  expect_rows(out.advantages, {{0}, {0}, {-4.0 / 3}, {0}, {-4.0 / 3}, {8.0 / 3}});
  EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 0.5, 1e-6);
}

// ------------------------------------------------------------------------------------------
// reinforce_pp_baseline

TEST(AdvantageReinforcePpBaseline, CentredThenWhitenedOverTokens) {
  // Centred (as dr_grpo): 0, -1, -1, +1, +1, 5, broadcast over the mask -> the 11 response tokens
  //   {0, 0 | -1, -1, -1 | -1 | (row 3: none) | 1, 1, 1 | 5, 5}
  //   sum 9, mean 9/11 = 0.8181818; sum x^2 = 57, sum (x-mean)^2 = 57 - 81/11 = 546/11;
  //   unbiased var = 546/110 = 4.9636364; sqrt(var + 1e-8) = 2.2279219
  //   x = 0: -0.3672398869859163; x = -1: -0.8160886377464807; x = 1: 0.08160886377464804;
  //   x = 5: 1.8770038668169053
  AdvantageOutput out = make("reinforce_pp_baseline")->compute(mixed_batch());
  const double z = -0.3672398869859163, m = -0.8160886377464807, p = 0.08160886377464804, f = 1.8770038668169053;
  expect_rows(out.advantages, {{z, z, 0}, {m, m, m}, {m, 0, 0}, {0, 0, 0}, {p, p, p}, {f, f, 0}});
}

TEST(AdvantageReinforcePpBaseline, AllEqualBatchIsZeroNotNaN) {
  // every group all-equal: centred 0 everywhere, var 0 -> 0 * rsqrt(0 + eps) = 0
  AdvantageOutput out = make("reinforce_pp_baseline")->compute(input({3, 3, 0.1, 0.1}, {1, 1, 2, 2}, {{1, 1}, {1, 0}, {1, 1}, {0, 0}}));
  expect_rows(out.advantages, {{0, 0}, {0, 0}, {0, 0}, {0, 0}});
  EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 1.0, 1e-6);
}

TEST(AdvantageReinforcePpBaseline, OptionsValidated) {
  EXPECT_NE(error_of([] { make("reinforce_pp_baseline", {{"epsilon", "-1"}}); }).find("algorithm.advantage.epsilon"),
            std::string::npos);
  EXPECT_NO_THROW(make("reinforce_pp_baseline", {{"epsilon", "1e-6"}}));
}

// ------------------------------------------------------------------------------------------
// reinforce_pp

TEST(AdvantageReinforcePp, SequenceRewardAtLastTokenDiscounted) {
  // No token_rewards: the sequence reward sits at each row's last response token.
  //   row 0: reward 1 at t=2, gamma 0.5 -> returns t2 = 1, t1 = 0.5, t0 = 0.25, t3 (padding) 0
  //   row 1: reward 2 at t=1 -> t1 = 2, t0 = 1
  //   row 2: no response token -> nothing placed, all 0
  AdvantageInput in = input({1, 2, 7}, {0, 0, 0}, {{1, 1, 1, 0}, {1, 1, 0, 0}, {0, 0, 0, 0}});
  AdvantageOutput out = make("reinforce_pp", {{"gamma", "0.5"}, {"whiten", "false"}})->compute(in);
  const Rows ret = {{0.25, 0.5, 1, 0}, {1, 2, 0, 0}, {0, 0, 0, 0}};
  expect_rows(out.advantages, ret);
  expect_rows(out.returns, ret);
  EXPECT_NEAR(metric(out, "returns/max"), 2.0, 1e-6);

  // Whitened (the default): the 5 response returns {0.25, 0.5, 1, 1, 2}: mean 0.95,
  // deviations -0.7 -0.45 0.05 0.05 1.05, squares sum 1.8, unbiased var 0.45,
  // (x - 0.95) / sqrt(0.45 + 1e-8): -1.0434983779054754, -0.670820385796377, 0.07453559842181974,
  // 0.07453559842181974, 1.5652475668582133
  AdvantageOutput w = make("reinforce_pp", {{"gamma", "0.5"}})->compute(in);
  expect_rows(w.advantages, {{-1.0434983779054754, -0.670820385796377, 0.07453559842181974, 0},
                             {0.07453559842181974, 1.5652475668582133, 0, 0},
                             {0, 0, 0, 0}});
  expect_rows(w.returns, ret);  // returns are not whitened
}

TEST(AdvantageReinforcePp, TokenRewardsWithKlDefaultGammaOne) {
  // token_rewards as the trainer fills them: -kl_coef * kl per token, + reward 1 at the last
  // response token; the 0.5 at the padding position must not leak into the returns.
  //   row 0: [-0.1, -0.2, 1 - 0.3, pad 0.5], gamma 1:
  //     t2 = 0.7, t1 = -0.2 + 0.7 = 0.5, t0 = -0.1 + 0.5 = 0.4, t3 masked -> 0
  //   row 1: [0.2, pad 9, pad 9, pad 9] -> t0 = 0.2
  AdvantageInput in = input({1, 0.2}, {0, 1}, {{1, 1, 1, 0}, {1, 0, 0, 0}});
  in.token_rewards = rows_tensor({{-0.1, -0.2, 0.7, 0.5}, {0.2, 9, 9, 9}});
  AdvantageOutput out = make("reinforce_pp", {{"whiten", "off"}})->compute(in);
  const Rows ret = {{0.4, 0.5, 0.7, 0}, {0.2, 0, 0, 0}};
  expect_rows(out.advantages, ret);
  expect_rows(out.returns, ret);
}

TEST(AdvantageReinforcePp, FullyMaskedBatchIsZeroNotNaN) {
  AdvantageOutput out = make("reinforce_pp")->compute(input({1, 2}, {0, 0}, {{0, 0}, {0, 0}}));
  expect_rows(out.advantages, {{0, 0}, {0, 0}});
  expect_rows(out.returns, {{0, 0}, {0, 0}});
  EXPECT_EQ(metric(out, "advantages/max"), 0.0);
}

TEST(AdvantageReinforcePp, OptionsValidated) {
  for (const char* g : {"1.5", "-0.1", ".nan"}) {
    const std::string msg = error_of([g] { make("reinforce_pp", {{"gamma", g}}); });
    EXPECT_NE(msg.find("algorithm.advantage.gamma: must be in [0, 1]"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(make("reinforce_pp", {{"gamma", "0"}}));
  EXPECT_NO_THROW(make("reinforce_pp", {{"gamma", "1"}}));
  EXPECT_NE(error_of([] { make("reinforce_pp", {{"whiten", "maybe"}}); }).find("algorithm.advantage.whiten"),
            std::string::npos);
  EXPECT_NE(error_of([] { make("reinforce_pp", {{"epsilon", "-1"}}); }).find("algorithm.advantage.epsilon"),
            std::string::npos);
  AdvantageInput in = input({1}, {0}, {{1, 1}});
  in.token_rewards = rows_tensor({{1, 1, 1}});
  EXPECT_NE(error_of<std::invalid_argument>([&] { make("reinforce_pp")->compute(in); }).find("token_rewards must be [B, T]"),
            std::string::npos);
}

// ------------------------------------------------------------------------------------------
// grpo_passk

TEST(AdvantageGrpoPassk, OnlyTheBestSampleOfAGroup) {
  //   sample  group  reward
  //   0       5      0.2
  //   1       9      1.0
  //   2       5      0.9   <- best of group 5; second best 0.5 -> 0.9 - 0.5 = 0.4
  //   3       9      1.0   (group 9 all equal -> 0 for both)
  //   4       5      0.5
  // normalize: unbiased std of {0.2, 0.9, 0.5} = 0.35118845842842467 (mean 0.53333;
  // squares 0.111111 + 0.134444 + 0.001111 = 0.246667; / 2 = 0.123333; sqrt)
  //   -> 0.4 / (0.35118846 + 1e-6) = 1.1389863516689906
  AdvantageInput in = input({0.2, 1.0, 0.9, 1.0, 0.5}, {5, 9, 5, 9, 5}, {{1, 1}, {1, 1}, {1, 0}, {1, 1}, {0, 0}});
  AdvantageOutput out = make("grpo_passk")->compute(in);
  expect_rows(out.advantages, {{0, 0}, {0, 0}, {1.1389863516689906, 0}, {0, 0}, {0, 0}});
  EXPECT_NEAR(metric(out, "zero_std_group_fraction"), 0.5, 1e-6);
  expect_rows(make("grpo_passk", {{"normalize", "false"}})->compute(in).advantages,
              {{0, 0}, {0, 0}, {0.4, 0}, {0, 0}, {0, 0}});
}

TEST(AdvantageGrpoPassk, TiedBestAndFullyMaskedBest) {
  // group {3, 3, 1}: the maximum is tied -> r_max - r_second = 3 - 3 = 0 for everyone.
  // group {0, 2}: best is sample 4, which has no response tokens -> its row is 0 too.
  AdvantageInput in = input({3, 3, 1, 0, 2}, {1, 1, 1, 2, 2}, {{1}, {1}, {1}, {1}, {0}});
  expect_rows(make("grpo_passk")->compute(in).advantages, {{0}, {0}, {0}, {0}, {0}});
}

TEST(AdvantageGrpoPassk, GroupOfOneIsAnErrorAsInVerl) {
  AdvantageInput in = input({1, 0, 1}, {4, 4, 11}, {{1}, {1}, {1}});
  const std::string msg = error_of<std::invalid_argument>([&] { make("grpo_passk")->compute(in); });
  EXPECT_NE(msg.find("group 11 has 1 sample"), std::string::npos) << msg;
}

TEST(AdvantageGrpoPassk, OptionsValidated) {
  EXPECT_NE(error_of([] { make("grpo_passk", {{"epsilon", "-0.5"}}); }).find("algorithm.advantage.epsilon"),
            std::string::npos);
  EXPECT_NE(error_of([] { make("grpo_passk", {{"normalize", "2"}}); }).find("algorithm.advantage.normalize"),
            std::string::npos);
  EXPECT_NE(error_of([] { make("grpo_passk", {{"gamma", "1"}}); }).find("algorithm.advantage.gamma: unknown option"),
            std::string::npos);
}

}  // namespace
