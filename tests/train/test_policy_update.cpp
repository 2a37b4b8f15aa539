// The policy update (core/train/policy_update.h) on a tiny model with plain SGD, so that the
// step is checkable: an SGD step equals -lr times the gradient of the GRPO objective written
// out from the formula on full logits; mini-batches make optimizer steps; the first pass is
// on-policy (ratio exactly 1); untrainable samples and non-finite steps leave the weights
// alone; KL against an identical reference is 0; and the result does not depend on the
// number of rows per micro-batch (global denominators).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/train/policy_update.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"
#include "tests/train/trainer_fixtures.h"

namespace {

using grpo::core::AttentionLayout;
using grpo::core::CausalLM;
using grpo::core::ModelConfig;
using grpo::core::Group;
using grpo::core::LossAggregation;
using grpo::core::OldLogprobSource;
using grpo::core::Sample;
using grpo::core::UpdateComponents;
using grpo::core::UpdateOptions;
using grpo::core::UpdateResult;
using grpo::testing::error_of;

CausalLM tiny_model(std::uint64_t seed) { return grpo::testing::tiny_test_model(seed); }

const grpo::sdk::PolicyLoss& ppo_clip() {
  static const auto loss = grpo::testing::create_component<grpo::sdk::PolicyLoss>("ppo_clip", {}, "algorithm.policy_loss");
  return *loss;
}

const grpo::sdk::KlEstimator& k3() {
  static const auto kl = grpo::testing::create_component<grpo::sdk::KlEstimator>("k3", {}, "algorithm.kl_estimator");
  return *kl;
}

Sample sample(std::vector<std::int64_t> response, float advantage, bool trainable = true) {
  Sample s;
  s.advantages.assign(response.size(), advantage);
  s.response_ids = std::move(response);
  s.trainable = trainable;
  return s;
}

Group group(std::vector<std::int64_t> prompt, std::vector<Sample> samples) {
  Group g;
  g.prompt_ids = std::move(prompt);
  g.samples = std::move(samples);
  return g;
}

UpdateComponents components() {
  UpdateComponents c;
  c.policy_loss = &ppo_clip();
  return c;
}

UpdateOptions options(std::int64_t pack_length = 32) {
  UpdateOptions o;
  o.pack_length = pack_length;
  o.max_grad_norm = 0.0;  // no clipping: the SGD arithmetic stays plain
  o.max_response_len = 8;
  return o;
}

std::vector<torch::Tensor> snapshot(const CausalLM& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_param_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
  return m;
}

double metric(const UpdateResult& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return std::numeric_limits<double>::quiet_NaN();
}

bool has_metric(const UpdateResult& r, const std::string& name) {
  for (const auto& kv : r.metrics)
    if (kv.first == name) return true;
  return false;
}

// -(1/n) sum_t A_t logp_t over the samples of `g`, each sequence run alone through the full
// logits: the objective whose gradient a packed on-policy ppo_clip step with token-mean follows.
// `after_forward` runs after each sequence's forward (to read what the model recorded).
torch::Tensor full_logits_objective(CausalLM& model, const Group& g, double n,
                                    const std::function<void()>& after_forward = nullptr) {
  torch::Tensor objective = torch::zeros({});
  const auto prompt = static_cast<std::int64_t>(g.prompt_ids.size());
  for (const Sample& s : g.samples) {
    std::vector<std::int64_t> ids = g.prompt_ids;
    ids.insert(ids.end(), s.response_ids.begin(), s.response_ids.end());
    const auto len = static_cast<std::int64_t>(ids.size());
    const torch::Tensor logsm = torch::log_softmax(
        model->forward(torch::tensor(ids).view({1, len}), AttentionLayout::padded(torch::ones({1, len}, torch::kLong)))[0], -1);
    if (after_forward) after_forward();
    for (std::size_t j = 0; j < s.response_ids.size(); ++j)
      objective = objective - s.advantages[j] * logsm[prompt - 1 + static_cast<std::int64_t>(j)][s.response_ids[j]] / n;
  }
  return objective;
}

struct UpdateRun {
  UpdateResult result;
  int callbacks = 0;
};

UpdateRun sgd_update(CausalLM& model, const std::vector<Group>& groups, const UpdateOptions& o, double lr,
               const UpdateComponents& c = components()) {
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(lr));
  UpdateRun run;
  run.result = grpo::core::update_policy(model, sgd, [&] { ++run.callbacks; }, groups, c, o);
  return run;
}

double sum_of(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += x;
  return s;
}

// A batch of 3 groups x 3 samples with varied lengths and random per-token advantages.
std::vector<Group> varied_groups(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> adv(-1.0f, 1.0f);
  std::vector<Group> groups;
  for (int g = 0; g < 3; ++g) {
    Group grp;
    for (int t = 0; t < 2 + 2 * g; ++t) grp.prompt_ids.push_back(static_cast<std::int64_t>(rng() % 64));
    for (int s = 0; s < 3; ++s) {
      Sample smp;
      for (int t = 0; t < 1 + (g * 3 + s * 2) % 6; ++t) {
        smp.response_ids.push_back(static_cast<std::int64_t>(rng() % 64));
        smp.advantages.push_back(adv(rng));
      }
      grp.samples.push_back(smp);
    }
    groups.push_back(grp);
  }
  return groups;
}

TEST(PolicyUpdate, SgdStepIsMinusLrTimesTheObjectivesGradient) {
  // ppo_clip at ratio 1 (on-policy first pass), token-mean over N = 5 response tokens: the
  // gradient is that of -(1/N) sum_t A_t logp_t. Computed here from full logits per sequence.
  const std::vector<Group> groups = {group({1, 2, 3}, {sample({4, 5, 6}, 1.0f), sample({7, 8}, -1.0f)})};
  const double lr = 0.5;
  CausalLM expected_model = tiny_model(1);
  {
    full_logits_objective(expected_model, groups[0], 5.0).backward();
    torch::NoGradGuard no_grad;
    for (auto& p : expected_model->parameters()) p.sub_(lr * p.grad());
  }

  CausalLM model = tiny_model(1);
  const auto before = grpo::core::sample_logprobs(model, groups, options());
  const UpdateRun run = sgd_update(model, groups, options(), lr);
  EXPECT_LT(max_param_diff(snapshot(model), snapshot(expected_model)), 1e-5);
  EXPECT_EQ(run.result.optimizer_steps, 1);
  EXPECT_EQ(run.callbacks, 1);
  // loss/policy_avg: token mean of -A * ratio = -(3 * 1 + 2 * (-1)) / 5 = -0.2.
  EXPECT_NEAR(metric(run.result, "loss/policy_avg"), -0.2, 1e-6);
  EXPECT_NEAR(metric(run.result, "loss/total_avg"), -0.2, 1e-6);
  EXPECT_EQ(metric(run.result, "loss/kl_avg"), 0.0);
  EXPECT_GT(metric(run.result, "optimizer/grad_norm"), 0.0);
  EXPECT_GT(metric(run.result, "objective/entropy"), 0.0);

  const auto after = grpo::core::sample_logprobs(model, groups, options());
  EXPECT_GT(sum_of(after[0]), sum_of(before[0]) + 1e-3) << "positive advantage: log-prob goes up";
  EXPECT_LT(sum_of(after[1]), sum_of(before[1]) - 1e-3) << "negative advantage: log-prob goes down";
}

TEST(PolicyUpdate, MiniBatchesMakeOptimizerSteps) {
  const std::vector<Group> groups = varied_groups(2);  // 3 groups
  UpdateOptions o = options();
  o.num_mini_batches = 2;  // groups {0, 1} and {2}
  CausalLM model = tiny_model(2);
  const UpdateRun two = sgd_update(model, groups, o, 0.1);
  EXPECT_EQ(two.result.optimizer_steps, 2);
  EXPECT_EQ(two.callbacks, 2);
  EXPECT_EQ(metric(two.result, "train/optimizer_steps"), 2.0);
  EXPECT_EQ(metric(two.result, "train/skipped_nonfinite"), 0.0);
  // The second mini-batch sees weights after the first step: its ratio is not all 1.
  EXPECT_GT(metric(two.result, "val/ratio_var"), 0.0);

  o.num_epochs = 2;
  const UpdateRun four = sgd_update(model, groups, o, 0.1);
  EXPECT_EQ(four.result.optimizer_steps, 4);
  EXPECT_EQ(four.callbacks, 4);
}

TEST(PolicyUpdate, FirstPassRatioIsExactlyOneOnPolicy) {
  std::vector<Group> groups = varied_groups(3);
  CausalLM model = tiny_model(3);
  // The backend's log-probs, here the trainer's own: no rollout/trainer mismatch.
  const auto rollout = grpo::core::sample_logprobs(model, groups, options());
  std::size_t i = 0;
  for (auto& g : groups)
    for (auto& s : g.samples) s.rollout_logprobs = rollout[i++];
  const UpdateRun run = sgd_update(model, groups, options(), 0.1);
  EXPECT_EQ(metric(run.result, "val/ratio"), 1.0);
  EXPECT_EQ(metric(run.result, "val/ratio_var"), 0.0);
  EXPECT_EQ(metric(run.result, "policy/clipfrac_avg"), 0.0);
  EXPECT_LT(metric(run.result, "sampling/sampling_logp_difference/mean"), 1e-6);
  EXPECT_LT(metric(run.result, "sampling/sampling_logp_difference/max"), 1e-6);
  EXPECT_FALSE(has_metric(run.result, "objective/kl")) << "no reference, no KL metric";
  for (const char* name : {"other/packed_ratio", "other/pack_utilization", "train/micro_batches"})
    EXPECT_GT(metric(run.result, name), 0.0) << name;
}

TEST(PolicyUpdate, OldLogprobSourcesAndMismatchWeights) {
  // Every advantage 1: on the first pass ppo_clip's per-token loss is -ratio.
  std::vector<Group> groups = varied_groups(11);
  for (auto& g : groups)
    for (auto& s : g.samples) s.advantages.assign(s.response_ids.size(), 1.0f);
  // The backend's log-probs 0.1 below the trainer's: old - rollout = 0.1 on every token.
  {
    CausalLM model = tiny_model(11);
    const auto lp = grpo::core::sample_logprobs(model, groups, options());
    std::size_t i = 0;
    for (auto& g : groups)
      for (auto& s : g.samples) {
        s.rollout_logprobs = lp[i++];
        for (float& x : s.rollout_logprobs) x -= 0.1f;
      }
  }
  const double e01 = std::exp(0.1);
  {
    // rollout: old = backend's, ratio = exp(0.1) everywhere; no mismatch between old and rollout.
    UpdateOptions o = options();
    o.old_logprobs = OldLogprobSource::kRollout;
    CausalLM model = tiny_model(11);
    const UpdateRun run = sgd_update(model, groups, o, 0.1);
    EXPECT_NEAR(metric(run.result, "val/ratio"), e01, 1e-5);
    EXPECT_NEAR(metric(run.result, "val/ratio_var"), 0.0, 1e-9);
    EXPECT_NEAR(metric(run.result, "sampling/sampling_logp_difference/mean"), 0.0, 1e-9);
  }
  {
    // recompute (stale rollouts force it under auto): old = the trainer's, ratio 1 up to rounding.
    UpdateOptions o = options();
    o.stale = true;
    CausalLM model = tiny_model(11);
    const UpdateRun run = sgd_update(model, groups, o, 0.1);
    EXPECT_NEAR(metric(run.result, "val/ratio"), 1.0, 1e-6);
    EXPECT_NEAR(metric(run.result, "sampling/sampling_logp_difference/mean"), 0.1, 1e-5);
    EXPECT_NEAR(metric(run.result, "sampling/sampling_logp_difference/max"), 0.1, 1e-5);
  }
  {
    // Token truncation at 2: rho = exp(0.1) < 2 multiplies every token's -1: loss/policy_avg = -exp(0.1).
    UpdateOptions o = options();
    o.mismatch.mode = grpo::core::MismatchMode::kTokenTruncate;
    CausalLM model = tiny_model(11);
    const UpdateRun run = sgd_update(model, groups, o, 0.1);
    EXPECT_EQ(metric(run.result, "val/ratio"), 1.0);
    EXPECT_NEAR(metric(run.result, "loss/policy_avg"), -e01, 1e-5);
    EXPECT_NEAR(metric(run.result, "sampling/is_weight/mean"), e01, 1e-5);
    EXPECT_EQ(metric(run.result, "sampling/is_truncated_frac"), 0.0);
  }
}

TEST(PolicyUpdate, UntrainableSamplesGetNoGradient) {
  // Only untrainable samples (mask_truncated_completions): nothing moves, no optimizer step.
  {
    const std::vector<Group> groups = {group({1, 2}, {sample({3, 4}, 1.0f, false), sample({5}, -1.0f, false)})};
    CausalLM model = tiny_model(4);
    const auto before = snapshot(model);
    const UpdateRun run = sgd_update(model, groups, options(), 0.5);
    EXPECT_EQ(max_param_diff(snapshot(model), before), 0.0);
    EXPECT_EQ(run.result.optimizer_steps, 0);
    EXPECT_EQ(run.callbacks, 0);
  }
  // An untrainable sample with a large advantage next to a trainable one changes nothing.
  const std::vector<Group> with = {group({1, 2}, {sample({3, 4}, 1.0f), sample({5, 6, 7}, 50.0f, false)})};
  const std::vector<Group> without = {group({1, 2}, {sample({3, 4}, 1.0f)})};
  CausalLM a = tiny_model(4), b = tiny_model(4);
  sgd_update(a, with, options(), 0.5);
  sgd_update(b, without, options(), 0.5);
  EXPECT_LT(max_param_diff(snapshot(a), snapshot(b)), 1e-7);
  EXPECT_GT(max_param_diff(snapshot(a), snapshot(tiny_model(4))), 1e-4) << "the trainable sample did update";
}

TEST(PolicyUpdate, NonFiniteStepIsSkipped) {
  std::vector<Group> groups = varied_groups(5);
  groups[1].samples[0].advantages[0] = std::numeric_limits<float>::quiet_NaN();
  CausalLM model = tiny_model(5);
  const auto before = snapshot(model);
  torch::optim::AdamW adamw(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  int callbacks = 0;
  const UpdateResult r = grpo::core::update_policy(model, adamw, [&] { ++callbacks; }, groups, components(), options());
  EXPECT_EQ(max_param_diff(snapshot(model), before), 0.0);
  EXPECT_EQ(r.optimizer_steps, 0);
  EXPECT_EQ(r.skipped_nonfinite, 1);
  EXPECT_TRUE(r.last_step_nonfinite);
  EXPECT_EQ(callbacks, 0);
  EXPECT_EQ(metric(r, "train/skipped_nonfinite"), 1.0);
}

TEST(PolicyUpdate, KlAgainstIdenticalReferenceIsZero) {
  const std::vector<Group> groups = varied_groups(6);
  UpdateOptions o = options();
  o.kl.kl_coef = 0.1;
  UpdateComponents c = components();
  c.kl_estimator = &k3();
  c.reference = tiny_model(6);  // same seed: the policy's weights
  for (auto& p : c.reference->parameters()) p.set_requires_grad(false);
  CausalLM model = tiny_model(6);
  const UpdateRun run = sgd_update(model, groups, o, 0.5, c);
  for (const char* name : {"objective/kl", "objective/kl_k1", "objective/kl_k2", "objective/kl_k3", "loss/kl_avg"})
    EXPECT_NEAR(metric(run.result, name), 0.0, 1e-7) << name;
  // k3's gradient at logp == ref is 0: the step equals the one without KL.
  CausalLM plain = tiny_model(6);
  sgd_update(plain, groups, options(), 0.5);
  EXPECT_LT(max_param_diff(snapshot(model), snapshot(plain)), 1e-6);
}

TEST(PolicyUpdate, KlMetricsAgainstAnotherReference) {
  const std::vector<Group> groups = varied_groups(7);
  UpdateOptions o = options();
  o.kl.kl_coef = 0.5;
  UpdateComponents c = components();
  c.kl_estimator = &k3();
  // The policy's weights plus noise: a nearby reference (k3's value clamps never bite).
  c.reference = tiny_model(7);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(70);
    for (auto& p : c.reference->parameters()) p.add_(0.05 * torch::randn_like(p));
  }
  CausalLM model = tiny_model(7);
  // By hand (REFERENCE.md, d = logp - ref, token means over the batch) from the log-probs
  // before the update: the single first-pass micro-batch sees exactly these weights.
  const auto logp = grpo::core::sample_logprobs(model, groups, o);
  const auto ref = grpo::core::sample_logprobs(c.reference, groups, o);
  double k1 = 0.0, k2 = 0.0, k3 = 0.0, n = 0.0;
  for (std::size_t i = 0; i < logp.size(); ++i)
    for (std::size_t j = 0; j < logp[i].size(); ++j) {
      const double d = static_cast<double>(logp[i][j]) - static_cast<double>(ref[i][j]);
      k1 += d, k2 += 0.5 * d * d, k3 += std::exp(-d) - 1.0 + d, n += 1.0;
    }
  const UpdateRun run = sgd_update(model, groups, o, 0.1, c);
  EXPECT_NEAR(metric(run.result, "objective/kl_k1"), k1 / n, 1e-5);
  EXPECT_NEAR(metric(run.result, "objective/kl_k2"), k2 / n, 1e-5);
  EXPECT_NEAR(metric(run.result, "objective/kl_k3"), k3 / n, 1e-5);
  EXPECT_GT(metric(run.result, "objective/kl"), 1e-3);
  EXPECT_NEAR(metric(run.result, "objective/kl"), metric(run.result, "objective/kl_k3"), 1e-5) << "the estimator in use is k3";
  EXPECT_NEAR(metric(run.result, "loss/kl_avg"), 0.5 * metric(run.result, "objective/kl"), 1e-6);
  EXPECT_NEAR(metric(run.result, "loss/total_avg"), metric(run.result, "loss/policy_avg") + metric(run.result, "loss/kl_avg"), 1e-6);
}

TEST(PolicyUpdate, KlWithoutReferenceIsAnError) {
  const std::vector<Group> groups = varied_groups(8);
  UpdateOptions o = options();
  o.kl.kl_coef = 0.05;
  CausalLM model = tiny_model(8);
  UpdateComponents c = components();
  c.kl_estimator = &k3();
  const std::string e = error_of<std::invalid_argument>([&] { sgd_update(model, groups, o, 0.1, c); });
  EXPECT_NE(e.find("kl_coef"), std::string::npos) << e;
  EXPECT_NE(e.find("reference model"), std::string::npos) << e;
  c.kl_estimator = nullptr;
  c.reference = tiny_model(8);
  const std::string k = error_of<std::invalid_argument>([&] { sgd_update(model, groups, o, 0.1, c); });
  EXPECT_NE(k.find("KL estimator"), std::string::npos) << k;
}

TEST(PolicyUpdate, BadSamplesAreNamed) {
  std::vector<Group> groups = varied_groups(9);
  CausalLM model = tiny_model(9);
  groups[2].samples[1].advantages.pop_back();
  const std::string a = error_of<std::invalid_argument>([&] { sgd_update(model, groups, options(), 0.1); });
  EXPECT_NE(a.find("group 2 sample 1"), std::string::npos) << a;
  const std::string p = error_of<std::invalid_argument>([&] { sgd_update(model, varied_groups(9), options(8), 0.1); });
  EXPECT_NE(p.find("train.pack_length 8"), std::string::npos) << p;
}

TEST(PolicyUpdate, MicroBatchSizeDoesNotChangeTheStep) {
  // Gradient accumulation with global denominators: 1 row per micro-batch (several forwards)
  // and 4 rows per micro-batch give the same parameters, for token-mean and seq-mean-token-mean.
  const std::vector<Group> groups = varied_groups(10);
  for (LossAggregation mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean}) {
    UpdateOptions o = options(12);
    o.aggregation = mode;
    o.max_grad_norm = 1.0;
    CausalLM one = tiny_model(10), four = tiny_model(10);
    o.rows_per_micro_batch = 1;
    const UpdateRun r1 = sgd_update(one, groups, o, 0.5);
    o.rows_per_micro_batch = 4;
    const UpdateRun r4 = sgd_update(four, groups, o, 0.5);
    EXPECT_GT(metric(r1.result, "train/micro_batches"), metric(r4.result, "train/micro_batches"));
    EXPECT_LT(max_param_diff(snapshot(one), snapshot(four)), 1e-5) << grpo::core::to_string(mode);
    EXPECT_NEAR(metric(r1.result, "optimizer/grad_norm"), metric(r4.result, "optimizer/grad_norm"), 1e-5);
    EXPECT_GT(max_param_diff(snapshot(one), snapshot(tiny_model(10))), 1e-4);
  }
}

}  // namespace

// ---- train.precision (core/model/precision.h, docs/precision.md)

// Why bf16-mixed keeps float32 master weights. AdamW's first step moves every weight whose
// gradient is not 0 by lr * g / (|g| + eps), i.e. by lr = 1e-5 (hand computation: m_hat = g,
// v_hat = g^2 after bias correction). A bfloat16 weight of magnitude >= 2^-6 has neighbours
// 2^-6 * 2^-7 = 2^-13 = 1.2e-4 apart, so a 1e-5 step rounds back to the same value: stored in
// bf16 (train.precision bf16) the update is lost; in the float32 masters of bf16-mixed it is kept.
TEST(PolicyUpdatePrecision, MasterWeightsKeepUpdatesBelowBf16Resolution) {
  const std::vector<Group> groups = varied_groups(3);
  grpo::core::OptimizerSettings adam;
  adam.learning_rate = 1e-5;
  adam.weight_decay = 0.0;
  auto run_update = [&](CausalLM& model, grpo::core::Precision precision) {
    auto optimizer = grpo::core::make_adamw(*model, adam);
    UpdateOptions o = options();
    o.precision = precision;
    const UpdateResult r = grpo::core::update_policy(model, *optimizer, nullptr, groups, components(), o);
    EXPECT_EQ(r.optimizer_steps, 1);
  };
  CausalLM mixed = tiny_model(5);
  CausalLM pure = tiny_model(5);
  pure->to(torch::kBFloat16);
  const auto mixed_before = snapshot(mixed), pure_before = snapshot(pure);
  run_update(mixed, grpo::core::Precision::kBf16Mixed);
  run_update(pure, grpo::core::Precision::kBf16);
  const auto mixed_after = snapshot(mixed), pure_after = snapshot(pure);

  std::int64_t checked = 0;
  double moved_sum = 0.0;
  for (std::size_t i = 0; i < mixed_before.size(); ++i) {
    ASSERT_EQ(mixed_after[i].scalar_type(), torch::kFloat32);
    ASSERT_EQ(pure_after[i].scalar_type(), torch::kBFloat16);
    const torch::Tensor step = (mixed_after[i] - mixed_before[i]).abs();
    // Weights the master copy moved and that bf16 cannot move by 1e-5.
    const torch::Tensor selected = (step > 0) & (mixed_before[i].abs() >= std::ldexp(1.0, -6));
    checked += selected.sum().item<std::int64_t>();
    moved_sum += step.masked_select(selected).sum().item<double>();
    // At most lr, plus float32's own rounding of w - lr (|w| < 2: spacing <= 2.4e-7, 2.4% of lr).
    EXPECT_LE(step.max().item<double>(), adam.learning_rate * 1.03) << "Adam's first step is at most lr";
    EXPECT_TRUE(torch::equal(pure_after[i].masked_select(selected), pure_before[i].masked_select(selected)))
        << "parameter " << i << ": a bf16 weight moved by an update below its resolution";
  }
  ASSERT_GT(checked, 500) << "too few weights to show anything";
  EXPECT_GT(moved_sum / static_cast<double>(checked), 0.9 * adam.learning_rate) << "the masters moved by about lr each";
}

// The trainer's gradient in bf16-mixed (old log-probs recomputed in their own no-grad scope
// first) points where float32's does: with SGD at lr 1 the step is -gradient.
TEST(PolicyUpdatePrecision, Bf16MixedStepFollowsTheFp32Gradient) {
  const std::vector<Group> groups = varied_groups(4);
  UpdateOptions o = options();
  o.old_logprobs = OldLogprobSource::kRecompute;
  CausalLM fp32 = tiny_model(6), mixed = tiny_model(6);
  const auto before = snapshot(fp32);
  sgd_update(fp32, groups, o, 1.0);
  o.precision = grpo::core::Precision::kBf16Mixed;
  const UpdateRun run = sgd_update(mixed, groups, o, 1.0);
  EXPECT_EQ(run.result.optimizer_steps, 1);
  std::vector<torch::Tensor> d32, d16;
  const auto a = snapshot(fp32), b = snapshot(mixed);
  for (std::size_t i = 0; i < before.size(); ++i) {
    d32.push_back((a[i] - before[i]).to(torch::kDouble).flatten());
    d16.push_back((b[i] - before[i]).to(torch::kDouble).flatten());
  }
  const torch::Tensor x = torch::cat(d32), y = torch::cat(d16);
  const double cosine = (x * y).sum().item<double>() / (x.norm().item<double>() * y.norm().item<double>());
  EXPECT_GE(cosine, 0.99);
  EXPECT_GT(y.norm().item<double>(), 0.0);
  EXPECT_FALSE(torch::equal(x, y)) << "bf16-mixed computed exactly what fp32 did";
  // On-policy first pass: the recomputed old log-probs equal the first pass's in either precision.
  EXPECT_NEAR(metric(run.result, "val/ratio"), 1.0, 1e-6);
}

namespace {

// varied_groups with observation tokens (a tool's output): in every response of 3+ tokens,
// the tokens [1, len - 1) are observations (policy mask 0); the first and the last are the
// policy's. Rollout log-probs are the model's minus 0.05 (ratio != 1 under `rollout`).
std::vector<Group> groups_with_observations(std::uint64_t seed, CausalLM& model) {
  std::vector<Group> groups = varied_groups(seed);
  for (auto& g : groups)
    for (auto& s : g.samples)
      while (s.response_ids.size() < 4) {
        s.response_ids.push_back(static_cast<std::int64_t>(7 + s.response_ids.size()));
        s.advantages.push_back(0.5f);
      }
  const auto lp = grpo::core::sample_logprobs(model, groups, options(16));
  std::size_t i = 0;
  for (auto& g : groups)
    for (auto& s : g.samples) {
      s.rollout_logprobs = lp[i++];
      for (float& x : s.rollout_logprobs) x -= 0.05f;
      s.policy_mask.assign(s.response_ids.size(), 1);
      for (std::size_t t = 1; t + 1 < s.response_ids.size(); ++t) s.policy_mask[t] = 0;
    }
  return groups;
}

// Replaces what the policy did not produce, at observation positions only: the rollout
// log-probs and the advantages, by random values.
void scramble_observations(std::vector<Group>& groups, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> logprob(-9.0f, 0.0f), adv(-5.0f, 5.0f);
  for (auto& g : groups)
    for (auto& s : g.samples)
      for (std::size_t t = 0; t < s.response_ids.size(); ++t)
        if (!s.is_policy_token(t)) {
          s.rollout_logprobs[t] = logprob(rng);
          s.advantages[t] = adv(rng);
        }
}

}  // namespace

// Tool observations (Sample::policy_mask 0) enter no loss, KL, entropy or denominator: the
// step's weights and metrics are bit-identical when their log-probs and advantages are
// replaced by random values, under rollout log-probs with mismatch correction and a k3 KL
// term; and without the mask the same scrambling changes the step (the check can fail).
TEST(PolicyUpdate, ObservationTokensEnterNoLossNoKlNoDenominator) {
  UpdateOptions o = options(16);
  o.old_logprobs = OldLogprobSource::kRollout;
  o.mismatch.mode = grpo::core::MismatchMode::kTokenTruncate;
  o.kl.kl_coef = 0.3;
  UpdateComponents c = components();
  c.kl_estimator = &k3();
  c.reference = tiny_model(99);
  for (auto& p : c.reference->parameters()) p.set_requires_grad(false);

  CausalLM probe = tiny_model(21);
  const std::vector<Group> clean = groups_with_observations(21, probe);
  std::vector<Group> scrambled = clean;
  scramble_observations(scrambled, 5);

  CausalLM a = tiny_model(21), b = tiny_model(21);
  const UpdateRun ra = sgd_update(a, clean, o, 0.3, c);
  const UpdateRun rb = sgd_update(b, scrambled, o, 0.3, c);
  EXPECT_EQ(max_param_diff(snapshot(a), snapshot(b)), 0.0);
  EXPECT_GT(max_param_diff(snapshot(a), snapshot(tiny_model(21))), 1e-4) << "the step moved the weights";
  for (const char* name : {"loss/policy_avg", "loss/kl_avg", "loss/total_avg", "objective/kl", "objective/entropy", "val/ratio",
                           "val/ratio_var", "optimizer/grad_norm", "sampling/is_weight/mean"})
    EXPECT_EQ(metric(ra.result, name), metric(rb.result, name)) << name;

  // Control: the same scrambling with the mask dropped does change the step.
  std::vector<Group> unmasked = clean, unmasked_scrambled = scrambled;
  for (auto* gs : {&unmasked, &unmasked_scrambled})
    for (auto& g : *gs)
      for (auto& s : g.samples) s.policy_mask.clear();
  CausalLM c1 = tiny_model(21), c2 = tiny_model(21);
  sgd_update(c1, unmasked, o, 0.3, c);
  sgd_update(c2, unmasked_scrambled, o, 0.3, c);
  EXPECT_GT(max_param_diff(snapshot(c1), snapshot(c2)), 1e-6);
}

// Denominators count the policy's tokens only: with every policy token's advantage 1 and the
// first pass on-policy (ratio exactly 1), ppo_clip's token-mean loss is exactly -1 however
// many observation tokens sit between them (counted, they would pull it towards 0).
TEST(PolicyUpdate, ObservationTokensAreNotInTheTokenMeanDenominator) {
  CausalLM probe = tiny_model(22);
  std::vector<Group> groups = groups_with_observations(22, probe);
  for (auto& g : groups)
    for (auto& s : g.samples) {
      s.rollout_logprobs.clear();
      for (std::size_t t = 0; t < s.advantages.size(); ++t) s.advantages[t] = s.is_policy_token(t) ? 1.0f : 3.0f;
    }
  CausalLM model = tiny_model(22);
  const UpdateRun run = sgd_update(model, groups, options(16), 0.1);
  EXPECT_DOUBLE_EQ(metric(run.result, "loss/policy_avg"), -1.0);
}

// A policy mask whose length is not the response's is refused, naming the sample.
TEST(PolicyUpdate, PolicyMaskOfTheWrongLengthIsAnError) {
  std::vector<Group> groups = {group({1, 2}, {sample({3, 4, 5}, 1.0f)})};
  groups[0].samples[0].policy_mask = {1, 0};
  CausalLM model = tiny_model(4);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_NE(error_of<std::invalid_argument>([&] { grpo::core::update_policy(model, sgd, [] {}, groups, components(), options()); })
                .find("has a policy mask of 2 entries for 3 response tokens"),
            std::string::npos);
}

// train.router_aux_loss_coef: a mixture-of-experts policy's step adds coef x the routers'
// load-balancing loss (over every token of the pass, every MoE layer) to the policy objective.
TEST(PolicyUpdate, RouterAuxLossJoinsTheObjectiveOfAMoePolicy) {
  ModelConfig c = grpo::testing::tiny_test_model(0)->config();
  c.architecture = grpo::core::ModelArchitecture::Qwen3Moe;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.norm_topk_prob = true;
  c.moe_layers = {true, true};
  auto moe_model = [&] {
    CausalLM m(c);
    m->init_weights(0.2, 3);
    return m;
  };
  const std::vector<Group> groups = {group({1, 2, 3}, {sample({4, 5, 6}, 1.0f), sample({7, 8}, -1.0f)})};
  const double lr = 0.5, coef = 0.3;

  CausalLM expected_model = moe_model();
  double expected_aux = 0.0;
  {
    expected_model->set_record_router_logits(true);
    std::vector<std::vector<torch::Tensor>> per_layer(2);
    const torch::Tensor objective = full_logits_objective(expected_model, groups[0], 5.0, [&] {
      const auto routers = expected_model->router_logits();
      for (std::size_t l = 0; l < 2; ++l) per_layer[l].push_back(routers.at(l));
    });
    const torch::Tensor aux = grpo::core::load_balancing_loss({torch::cat(per_layer[0]), torch::cat(per_layer[1])}, 4, 2);
    expected_aux = aux.item<double>();
    (objective + coef * aux).backward();
    torch::NoGradGuard no_grad;
    for (auto& p : expected_model->parameters()) p.sub_(lr * p.grad());
  }

  CausalLM model = moe_model();
  UpdateOptions o = options();
  o.router_aux_loss_coef = coef;
  const UpdateRun run = sgd_update(model, groups, o, lr);
  EXPECT_LT(max_param_diff(snapshot(model), snapshot(expected_model)), 1e-5);
  EXPECT_NEAR(metric(run.result, "loss/router_aux_avg"), expected_aux, 1e-6);
  EXPECT_TRUE(model->router_logits().empty()) << "recording is off again after the update";

  // Without the coefficient the step is the policy objective's alone: different router weights.
  CausalLM plain = moe_model();
  sgd_update(plain, groups, options(), lr);
  EXPECT_GT(max_param_diff(snapshot(plain), snapshot(model)), 1e-6);
  EXPECT_FALSE(has_metric(sgd_update(plain, groups, options(), lr).result, "loss/router_aux_avg"));
}
