// The trainer's advantage stage (core/train/advantages.h) with the real estimators and KL
// estimators, loaded the way a run loads them (PluginRegistry over the build's plugin folder).
//
// Expected values are the published GRPO formula evaluated by hand, the long decimals once in
// plain Python (not the code under test), e.g. 1 / (math.sqrt(2) + 1e-6) = 0.7071062811869011.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/train/advantages.h"
#include "tests/support/build_plugins.h"
#include "tests/train/trainer_fixtures.h"

namespace {

using namespace grpo::core;
namespace sdk = grpo::sdk;

std::shared_ptr<sdk::AdvantageEstimator> grpo_estimator() {
  return grpo::testing::create_component<sdk::AdvantageEstimator>("grpo", {}, "algorithm.advantage");
}

Sample sample(double reward, std::size_t response_len) {
  Sample s;
  s.reward = reward;
  s.response_ids.assign(response_len, 5);
  return s;
}

// Group 0: rewards 0 and 2 (2 and 3 response tokens); group 1: rewards 1 and 1 (1 and 2 tokens).
std::vector<Group> two_groups() {
  std::vector<Group> groups(2);
  groups[0].prompt_ids = {1, 2};
  groups[0].samples = {sample(0.0, 2), sample(2.0, 3)};
  groups[1].prompt_ids = {3};
  groups[1].samples = {sample(1.0, 1), sample(1.0, 2)};
  return groups;
}

const torch::Device kCpu(torch::kCPU);

TEST(TrainerAdvantages, GrpoOnAHandComputedBatch) {
  std::vector<Group> groups = two_groups();
  const MetricList m = compute_advantages(*grpo_estimator(), groups, nullptr, 0.0, kCpu);
  // Group 0: mean 1, unbiased std sqrt(2): (r - 1) / (sqrt(2) + 1e-6) = -+0.7071062811869011 on
  // every response token. Group 1: equal rewards, exactly 0. One advantage per response token.
  const double a = 0.7071062811869011;
  ASSERT_EQ(groups[0].samples[0].advantages.size(), 2u);
  ASSERT_EQ(groups[0].samples[1].advantages.size(), 3u);
  ASSERT_EQ(groups[1].samples[0].advantages.size(), 1u);
  ASSERT_EQ(groups[1].samples[1].advantages.size(), 2u);
  for (float v : groups[0].samples[0].advantages) EXPECT_NEAR(v, -a, 1e-6);
  for (float v : groups[0].samples[1].advantages) EXPECT_NEAR(v, a, 1e-6);
  for (const Sample& s : groups[1].samples)
    for (float v : s.advantages) EXPECT_EQ(v, 0.0f);
  // Over the 8 response tokens {-a, -a, a, a, a, 0, 0, 0}: mean a / 8, unbiased std 0.5900964270908973.
  EXPECT_NEAR(metric_value(m, "val/advantages_mean"), 0.08838828514836264, 1e-6);
  EXPECT_NEAR(metric_value(m, "val/advantages_std"), 0.5900964270908973, 1e-6);
  EXPECT_NEAR(metric_value(m, "val/advantages_min"), -a, 1e-6);
  EXPECT_NEAR(metric_value(m, "val/advantages_max"), a, 1e-6);
  // The estimator's own metrics follow: one group of two has equal rewards.
  EXPECT_EQ(metric_value(m, "zero_std_group_fraction", -1.0), 0.5);
  EXPECT_EQ(m.front().first, "val/advantages_mean");
}

TEST(TrainerAdvantages, KlInTheRewardEntersTheTokenRewards) {
  std::vector<Group> groups = two_groups();
  const std::vector<std::vector<float>> token_kl = {{0.1f, 0.2f}, {0.0f, 0.5f, -0.1f}, {0.3f}, {0.0f, 0.0f}};
  const MetricList m = compute_advantages(*grpo_estimator(), groups, &token_kl, 0.5, kCpu);
  // GRPO reads the sum of the token rewards: r - 0.5 * sum(kl) = -0.15, 1.8 | 0.85, 1.0.
  // Group 0: (1.8 - 0.825) / (0.975 * sqrt(2) + 1e-6) = 0.7071062683664067;
  // group 1 now has spread: (1.0 - 0.925) / (0.075 * sqrt(2) + 1e-6) = 0.7071001145827337.
  EXPECT_NEAR(groups[0].samples[0].advantages[0], -0.7071062683664067, 1e-5);
  EXPECT_NEAR(groups[0].samples[1].advantages[2], 0.7071062683664067, 1e-5);
  EXPECT_NEAR(groups[1].samples[0].advantages[0], -0.7071001145827337, 1e-5);
  EXPECT_NEAR(groups[1].samples[1].advantages[1], 0.7071001145827337, 1e-5);
  // verl's metrics first: the mean over sequences of each one's token-mean KL
  // (0.15 + 0.4 / 3 + 0.3 + 0) / 4 = 0.14583333333333331, and the coefficient.
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(m[0].first, "actor/reward_kl_penalty");
  EXPECT_NEAR(m[0].second, 0.14583333333333331, 1e-6);
  EXPECT_EQ(m[1].first, "actor/reward_kl_penalty_coeff");
  EXPECT_EQ(m[1].second, 0.5);
}

TEST(TrainerAdvantages, StepAdvantagesInOneProcess) {
  std::vector<Group> groups = two_groups();
  const StepAdvantages with = step_advantages(*grpo_estimator(), groups, nullptr, 0.0, nullptr, 1, kCpu);
  EXPECT_EQ(with.first_group, 0u);
  EXPECT_EQ(with.global_groups, 2u);
  EXPECT_FALSE(with.metrics.empty());
  EXPECT_EQ(groups[0].samples[1].advantages.size(), 3u);

  std::vector<Group> none;
  const StepAdvantages without = step_advantages(*grpo_estimator(), none, nullptr, 0.0, nullptr, 1, kCpu);
  EXPECT_EQ(without.global_groups, 0u);  // no update this step
  EXPECT_TRUE(without.metrics.empty());
}

TEST(TrainerAdvantages, WrongShapeFromTheEstimatorIsAnError) {
  class Flat : public sdk::AdvantageEstimator {
   public:
    sdk::AdvantageOutput compute(const sdk::AdvantageInput& in) const override {
      sdk::AdvantageOutput out;
      out.advantages = torch::zeros({in.rewards.size(0)});  // [B], not [B, T]
      return out;
    }
  } flat;
  std::vector<Group> groups = two_groups();
  EXPECT_THROW(compute_advantages(flat, groups, nullptr, 0.0, kCpu), std::runtime_error);
}

TEST(TrainerAdvantages, RewardTokenKlOfTheModelAgainstItselfIsZero) {
  CausalLM policy = grpo::testing::tiny_test_model(3);
  CausalLM same = grpo::testing::tiny_test_model(3);
  CausalLM other = grpo::testing::tiny_test_model(4);
  const auto k1 = grpo::testing::create_component<sdk::KlEstimator>("k1", {}, "algorithm.kl_estimator");
  std::vector<Group> groups(1);
  groups[0].prompt_ids = {1, 2, 3};
  groups[0].samples = {sample(1.0, 2), sample(0.0, 0), sample(0.0, 4)};
  for (Sample& s : groups[0].samples)
    for (std::size_t t = 0; t < s.response_ids.size(); ++t) s.response_ids[t] = static_cast<std::int64_t>(7 + t);
  UpdateOptions o;
  o.pack_length = 16;

  const auto zero = reward_token_kl(policy, same, *k1, groups, o);
  ASSERT_EQ(zero.size(), 3u);
  ASSERT_EQ(zero[0].size(), 2u);  // one value per response token
  EXPECT_TRUE(zero[1].empty());
  ASSERT_EQ(zero[2].size(), 4u);
  for (const auto& row : zero)
    for (float v : row) EXPECT_EQ(v, 0.0f);

  // k1 = logp(old) - logp(ref) per token, from sample_logprobs of each model.
  const auto kl = reward_token_kl(policy, other, *k1, groups, o);
  const auto lp_policy = sample_logprobs(policy, groups, o);
  const auto lp_other = sample_logprobs(other, groups, o);
  bool any_nonzero = false;
  for (std::size_t i = 0; i < kl.size(); ++i)
    for (std::size_t t = 0; t < kl[i].size(); ++t) {
      EXPECT_NEAR(kl[i][t], lp_policy[i][t] - lp_other[i][t], 1e-6);
      any_nonzero = any_nonzero || kl[i][t] != 0.0f;
    }
  EXPECT_TRUE(any_nonzero);
}

}  // namespace
