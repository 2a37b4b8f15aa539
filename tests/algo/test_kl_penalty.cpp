// core/algo/kl_penalty: KL in the loss or in the reward; hand-computed values.
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/algo/kl_penalty.h"

namespace {

using grpo::core::KlSettings;

std::map<std::string, double> as_map(const std::vector<grpo::sdk::Metric>& ms) {
  std::map<std::string, double> out;
  for (const auto& m : ms) out[m.name] = m.value.item<double>();
  return out;
}

TEST(KlPenalty, ReferenceModelOnlyWhenTheCoefficientIsNonZero) {
  EXPECT_FALSE(grpo::core::needs_reference_model(KlSettings{}));  // kl_coef 0 (TRL default)
  EXPECT_FALSE(grpo::core::needs_reference_model(KlSettings{0.0, true}));
  EXPECT_TRUE(grpo::core::needs_reference_model(KlSettings{0.05, false}));
  EXPECT_TRUE(grpo::core::needs_reference_model(KlSettings{0.001, true}));
  EXPECT_EQ(grpo::core::loss_kl_coef(KlSettings{0.05, false}), 0.05);
  EXPECT_EQ(grpo::core::reward_kl_coef(KlSettings{0.05, false}), 0.0);
  EXPECT_EQ(grpo::core::loss_kl_coef(KlSettings{0.05, true}), 0.0);
  EXPECT_EQ(grpo::core::reward_kl_coef(KlSettings{0.05, true}), 0.05);
  EXPECT_THROW(grpo::core::validate(KlSettings{-0.1, false}), std::invalid_argument);
  EXPECT_THROW(grpo::core::validate(KlSettings{NAN, false}), std::invalid_argument);
  EXPECT_NO_THROW(grpo::core::validate(KlSettings{0.05, false}));
}

TEST(KlPenalty, AddToLoss) {
  const at::Tensor pg = at::tensor({1.0, 2.0}, at::kDouble), kl = at::tensor({0.5, 4.0}, at::kDouble);
  // 1 + 0.1*0.5 = 1.05; 2 + 0.1*4 = 2.4
  EXPECT_TRUE(at::allclose(grpo::core::add_kl_to_loss(pg, kl, 0.1), at::tensor({1.05, 2.4}, at::kDouble)));
  // beta 0: no KL tensor needed (no reference model was run)
  EXPECT_TRUE(at::equal(grpo::core::add_kl_to_loss(pg, at::Tensor(), 0.0), pg));
}

TEST(KlPenalty, LossPlacementGradient) {
  // d/dlogp (pg + beta*k1) with pg = -A*exp(logp - old), A = 1, logp = old: -1 + beta
  at::Tensor logp = at::tensor({-1.0, -2.0}, at::kDouble).requires_grad_(true);
  const at::Tensor old = logp.detach().clone(), ref = at::tensor({-1.5, -1.0}, at::kDouble);
  grpo::core::add_kl_to_loss(-at::exp(logp - old), logp - ref, 0.05).sum().backward();
  EXPECT_TRUE(at::allclose(logp.grad(), at::full({2}, -0.95, at::kDouble)));
}

TEST(KlPenalty, InTokenRewards) {
  const at::Tensor r = at::tensor({0.0, 0.0, 1.0, 0.0, 2.0, 0.0}, at::kDouble).reshape({2, 3});
  const at::Tensor kl = at::tensor({0.1, 0.2, 0.3, 1.0, 1.0, NAN}, at::kDouble).reshape({2, 3});
  const at::Tensor m = at::tensor({1.0, 1.0, 1.0, 1.0, 1.0, 0.0}, at::kDouble).reshape({2, 3});
  // r - 0.5*kl on response tokens: [-0.05, -0.1, 1 - 0.15], [-0.5, 2 - 0.5, 0 (masked, NaN ignored)]
  const at::Tensor want = at::tensor({-0.05, -0.1, 0.85, -0.5, 1.5, 0.0}, at::kDouble).reshape({2, 3});
  EXPECT_TRUE(at::allclose(grpo::core::kl_in_token_rewards(r, kl, m, 0.5), want, 0.0, 1e-15));
  EXPECT_TRUE(at::equal(grpo::core::kl_in_token_rewards(r, at::Tensor(), m, 0.0), r));
  // The reward carries no gradient through the KL.
  at::Tensor kl_g = at::ones({2, 3}, at::kDouble).requires_grad_(true);
  EXPECT_FALSE(grpo::core::kl_in_token_rewards(r, kl_g, m, 0.5).requires_grad());
}

TEST(KlPenalty, Metrics) {
  const at::Tensor kl = at::tensor({1.0, 2.0, NAN}, at::kDouble).unsqueeze(0);
  const at::Tensor m = at::tensor({1.0, 1.0, 0.0}, at::kDouble).unsqueeze(0);
  auto loss = as_map(grpo::core::kl_loss_metrics(kl, m, 0.1));
  EXPECT_NEAR(loss.at("objective/kl_avg"), 1.5, 1e-15);  // (1 + 2) / 2
  EXPECT_NEAR(loss.at("loss/kl_avg"), 0.15, 1e-15);
  const at::Tensor kl2 = at::tensor({1.0, 2.0, 3.0, 4.0, 0.0, 0.0}, at::kDouble).reshape({2, 3});
  const at::Tensor m2 = at::tensor({1.0, 1.0, 1.0, 1.0, 0.0, 0.0}, at::kDouble).reshape({2, 3});
  auto reward = as_map(grpo::core::kl_reward_metrics(kl2, m2, 0.001));
  EXPECT_NEAR(reward.at("actor/reward_kl_penalty"), 3.0, 1e-15);  // sequence means 2 and 4
  EXPECT_NEAR(reward.at("actor/reward_kl_penalty_coeff"), 0.001, 1e-15);
}

}  // namespace
