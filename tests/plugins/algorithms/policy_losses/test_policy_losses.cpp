// The policy-loss plugin (libgrpo_policy_losses.so), loaded the way a run loads it: through
// PluginRegistry from the build's plugin folder, configured with ConfigValue option trees.
//
// Expected values are computed by hand from the published formulas (arithmetic in the
// comments) or, where noted, by /tmp-style plain-Python scripts using only `math` with the
// formula written out (the script is quoted in the comment); never printed by the plugin.
// Ratios are set exactly: old = logp - ln(r), so exp(logp - old) = r up to rounding.
#include <cmath>
#include <functional>
#include <limits>
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
#include "grpo/sdk/torch/policy_loss.h"
#include "tests/support/error_of.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using grpo::sdk::PolicyLoss;
using grpo::sdk::PolicyLossInput;
using grpo::sdk::PolicyLossOutput;
using grpo::testing::error_of;

constexpr double kTol = 1e-12;
const double kInf = std::numeric_limits<double>::infinity();

grpo::core::PluginRegistry& registry() { return grpo::testing::build_plugin_registry(); }

// "null" stands for a YAML null (`key: null`), anything else for an unquoted scalar.
using Options = std::vector<grpo::testing::PluginOption>;

std::shared_ptr<PolicyLoss> make(const std::string& name, const Options& opts = {}) {
  return grpo::testing::create_component<PolicyLoss>(name, opts, "algorithm.policy_loss");
}

std::string config_error(const std::string& name, const Options& opts) {
  return error_of<ConfigError>([&] { make(name, opts); });
}

at::Tensor t2(const std::vector<std::vector<double>>& rows) {
  const int64_t B = static_cast<int64_t>(rows.size());
  const int64_t T = static_cast<int64_t>(rows[0].size());
  at::Tensor out = at::zeros({B, T}, at::kDouble);
  auto a = out.accessor<double, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) a[b][t] = rows[b][t];
  return out;
}

double at2(const at::Tensor& x, int64_t b, int64_t t) { return x.select(0, b).select(0, t).item<double>(); }

// A batch given per token as (logp, ratio, A, mask); old = logp - ln(ratio).
struct Tok {
  double logp, ratio, adv, mask;
};

struct Batch {
  at::Tensor logp, old, adv, mask;
};

Batch batch(const std::vector<std::vector<Tok>>& rows) {
  std::vector<std::vector<double>> lp, old, adv, mask;
  for (const auto& row : rows) {
    lp.emplace_back();
    old.emplace_back();
    adv.emplace_back();
    mask.emplace_back();
    for (const Tok& k : row) {
      lp.back().push_back(k.logp);
      old.back().push_back(std::isfinite(k.logp) ? k.logp - std::log(k.ratio) : 0.0);
      adv.back().push_back(k.adv);
      mask.back().push_back(k.mask);
    }
  }
  return {t2(lp), t2(old), t2(adv), t2(mask).to(at::kFloat)};
}

PolicyLossOutput run(const PolicyLoss& loss, const Batch& b, const at::Tensor& logp) {
  PolicyLossInput in;
  in.batch.response_mask = b.mask;
  in.batch.group_ids = at::arange(b.logp.size(0), at::kLong);
  in.logp = logp;
  in.old_logp = b.old;
  in.advantages = b.adv;
  return loss.compute(in);
}

struct LossAndGrad {
  at::Tensor loss;  // [B, T]
  at::Tensor grad;  // d sum(loss) / d logp, [B, T]
  PolicyLossOutput out;
};

LossAndGrad loss_and_grad(const PolicyLoss& loss, const Batch& b) {
  at::Tensor logp = b.logp.clone().set_requires_grad(true);
  PolicyLossOutput out = run(loss, b, logp);
  EXPECT_EQ(out.per_token_loss.sizes(), b.logp.sizes());
  out.per_token_loss.sum().backward();
  return {out.per_token_loss.detach(), logp.grad().clone(), out};
}

// Central finite difference of sum(per_token_loss) w.r.t. each logp entry (double).
at::Tensor finite_difference(const PolicyLoss& loss, const Batch& b, double h = 1e-6) {
  at::Tensor g = at::zeros_like(b.logp);
  for (int64_t i = 0; i < b.logp.size(0); ++i)
    for (int64_t j = 0; j < b.logp.size(1); ++j) {
      at::Tensor plus = b.logp.clone(), minus = b.logp.clone();
      plus.accessor<double, 2>()[i][j] += h;
      minus.accessor<double, 2>()[i][j] -= h;
      const double fp = run(loss, b, plus).per_token_loss.sum().item<double>();
      const double fm = run(loss, b, minus).per_token_loss.sum().item<double>();
      g.accessor<double, 2>()[i][j] = (fp - fm) / (2 * h);
    }
  return g;
}

double metric(const PolicyLossOutput& out, const std::string& name) {
  for (const auto& m : out.metrics)
    if (m.name == name) {
      EXPECT_EQ(m.value.dim(), 0) << name;
      return m.value.item<double>();
    }
  ADD_FAILURE() << "no metric " << name;
  return std::nan("");
}

bool has_metric(const PolicyLossOutput& out, const std::string& name) {
  for (const auto& m : out.metrics)
    if (m.name == name) return true;
  return false;
}

void expect_tensor_near(const at::Tensor& got, const std::vector<std::vector<double>>& want, double tol,
                        const char* what) {
  ASSERT_EQ(got.size(0), static_cast<int64_t>(want.size())) << what;
  for (size_t b = 0; b < want.size(); ++b)
    for (size_t t = 0; t < want[b].size(); ++t)
      EXPECT_NEAR(at2(got, b, t), want[b][t], tol) << what << " [" << b << "," << t << "]";
}

// The main mixed batch: 7 response tokens in rows 0-1, one pad in row 1, row 2 fully
// masked and holding garbage (-inf log-probs, a large advantage).
Batch mixed_batch() {
  return batch({
      {{-0.5, 1.5, 1.0, 1}, {-1.0, 0.5, 1.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.3, 1.5, -1.0, 1}},
      {{-1.2, 5.0, -2.0, 1}, {-0.7, 1.1, 0.0, 1}, {-0.9, 1.1, 2.0, 1}, {-0.4, 1.0, 9.0, 0}},
      {{-kInf, 1.0, 5.0, 0}, {-kInf, 1.0, 5.0, 0}, {-kInf, 1.0, 5.0, 0}, {-kInf, 1.0, 5.0, 0}},
  });
}

// ======================================================================================
// ppo_clip

TEST(PpoClip, HandComputedDefaults) {
  // clip_low 0.2, clip_high 0.2 -> clamp range [0.8, 1.2]; dual clip c = 3 for A < 0.
  //   r=1.5 A= 1: max(-1.5, -1.2)                    = -1.2   (clip high active, grad 0)
  //   r=0.5 A= 1: max(-0.5, -0.8)                    = -0.5   (grad -A*r = -0.5)
  //   r=0.5 A=-1: max( 0.5,  0.8)                    =  0.8   (clip low active, grad 0)
  //   r=1.5 A=-1: max( 1.5,  1.2) = 1.5, min(1.5, 3) =  1.5   (grad -A*r = 1.5)
  //   r=5   A=-2: max(10, 2.4) = 10, min(10, -(-2)*3 = 6) = 6 (dual clip active, grad 0)
  //   r=1.1 A= 0: 0                                            (grad 0)
  //   r=1.1 A= 2: max(-2.2, -2.2)                    = -2.2   (grad -A*r = -2.2)
  //   masked (pad, fully masked row with -inf logp): 0, grad 0
  auto loss = make("ppo_clip");
  LossAndGrad r = loss_and_grad(*loss, mixed_batch());
  expect_tensor_near(r.loss, {{-1.2, -0.5, 0.8, 1.5}, {6.0, 0.0, -2.2, 0.0}, {0, 0, 0, 0}}, kTol, "loss");
  expect_tensor_near(r.grad, {{0.0, -0.5, 0.0, 1.5}, {0.0, 0.0, -2.2, 0.0}, {0, 0, 0, 0}}, kTol, "grad");
  EXPECT_TRUE(at::isfinite(r.loss).all().item<bool>());
  EXPECT_TRUE(at::isfinite(r.grad).all().item<bool>());

  // Metrics over the 7 response tokens:
  //   clipfrac_high: A>0 & r>1.2 -> token (1.5, 1)          = 1/7
  //   clipfrac_low:  A<0 & r<0.8 -> token (0.5, -1)         = 1/7
  //   clipfrac_dual: A<0 & loss > -A*3 -> token (5, -2)     = 1/7
  //   val/ratio = (1.5+0.5+0.5+1.5+5+1.1+1.1)/7 = 11.2/7    = 1.6
  //   val/ratio_var = (0.01+1.21+1.21+0.01+11.56+0.25+0.25)/6 = 14.5/6
  //   approxkl = mean(0.5*ln(r)^2), ppo_kl = mean(-ln r): plain Python
  //     sum(0.5*math.log(x)**2 for x in r)/7 -> 0.278440599310831
  //     sum(-math.log(x) for x in r)/7       -> -0.17495630387702693
  const PolicyLossOutput& o = r.out;
  EXPECT_NEAR(metric(o, "policy/clipfrac_high"), 1.0 / 7, 1e-6);
  EXPECT_NEAR(metric(o, "policy/clipfrac_low"), 1.0 / 7, 1e-6);
  EXPECT_NEAR(metric(o, "policy/clipfrac"), 2.0 / 7, 1e-6);
  EXPECT_NEAR(metric(o, "policy/clipfrac_dual"), 1.0 / 7, 1e-6);
  EXPECT_NEAR(metric(o, "val/ratio"), 1.6, 1e-6);
  EXPECT_NEAR(metric(o, "val/ratio_var"), 14.5 / 6, 1e-6);
  EXPECT_NEAR(metric(o, "policy/approxkl"), 0.278440599310831, 1e-6);
  EXPECT_NEAR(metric(o, "policy/ppo_kl"), -0.17495630387702693, 1e-6);
  EXPECT_FALSE(has_metric(o, "policy/clipfrac_delta"));  // delta is off by default
}

TEST(PpoClip, GradientMatchesFiniteDifference) {
  // Away from the kinks (no ratio at 0.8, 1.2 or 3), the loss is differentiable: autograd
  // must equal the central difference, including 0 where a clip is active.
  auto loss = make("ppo_clip");
  Batch b = batch({
      {{-0.5, 1.5, 1.0, 1}, {-1.0, 0.5, 1.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.3, 1.5, -1.0, 1}},
      {{-1.2, 5.0, -2.0, 1}, {-0.7, 1.1, 0.0, 1}, {-0.9, 1.1, 2.0, 1}, {-0.4, 0.9, -0.7, 1}},
      {{-0.2, 1.0, 0.3, 0}, {-0.6, 1.05, -0.4, 1}, {-1.1, 0.95, 0.8, 1}, {-0.8, 1.0, 0.5, 0}},
  });
  LossAndGrad r = loss_and_grad(*loss, b);
  at::Tensor fd = finite_difference(*loss, b);
  EXPECT_TRUE(at::allclose(r.grad, fd, 1e-7, 1e-7)) << r.grad << "\n" << fd;
  // The clipped directions have zero gradient: (r=1.5, A=1), (r=0.5, A=-1), dual (r=5, A=-2).
  EXPECT_EQ(at2(r.grad, 0, 0), 0.0);
  EXPECT_EQ(at2(r.grad, 0, 2), 0.0);
  EXPECT_EQ(at2(r.grad, 1, 0), 0.0);
}

TEST(PpoClip, RatioFarOutsideTheRangeBothSides) {
  // log-ratio 25 is clamped to 20 (verl), log-ratio -25 to -20.
  //   r=e^20,  A= 1: max(-e^20, -1.2)                      = -1.2
  //   r=e^-20, A=-1: max(e^-20, 0.8)                       =  0.8
  //   r=e^-20, A= 1: max(-e^-20, -0.8)                     = -e^-20   (unclipped side)
  //   r=e^20,  A=-1: max(e^20, 1.2) = e^20, dual: min(e^20, 3) = 3
  auto loss = make("ppo_clip");
  Batch b = batch({{{-0.1, std::exp(25.0), 1.0, 1}, {-0.1, std::exp(-25.0), -1.0, 1},
                    {-0.1, std::exp(-25.0), 1.0, 1}, {-0.1, std::exp(25.0), -1.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{-1.2, 0.8, -std::exp(-20.0), 3.0}}, kTol, "loss");
  // Every gradient is 0: the clip (tokens 0, 1, 3) or the log-ratio clamp (token 2).
  expect_tensor_near(r.grad, {{0, 0, 0, 0}}, 0.0, "grad");

  // Without dual clip, the A<0 token's loss is the (clamped) -A*r = e^20.
  auto nodual = make("ppo_clip", {{"clip_ratio_c", "null"}});
  LossAndGrad r2 = loss_and_grad(*nodual, b);
  EXPECT_NEAR(at2(r2.loss, 0, 3), std::exp(20.0), std::exp(20.0) * 1e-12);
  EXPECT_FALSE(has_metric(r2.out, "policy/clipfrac_dual"));
}

TEST(PpoClip, DualClipDisabledWithNullOrZero) {
  // The r=5, A=-2 token: without dual clip, loss = max(10, 2.4) = 10 and the gradient is
  // -A*r = 10 (unclipped side).
  for (const char* off : {"null", "0"}) {
    auto loss = make("ppo_clip", {{"clip_ratio_c", off}});
    LossAndGrad r = loss_and_grad(*loss, mixed_batch());
    EXPECT_NEAR(at2(r.loss, 1, 0), 10.0, kTol) << off;
    EXPECT_NEAR(at2(r.grad, 1, 0), 10.0, kTol) << off;
  }
  // c = 8: min(10, 2*8 = 16) = 10, still inactive; c = 4: min(10, 8) = 8.
  EXPECT_NEAR(at2(loss_and_grad(*make("ppo_clip", {{"clip_ratio_c", "8"}}), mixed_batch()).loss, 1, 0), 10.0, kTol);
  EXPECT_NEAR(at2(loss_and_grad(*make("ppo_clip", {{"clip_ratio_c", "4"}}), mixed_batch()).loss, 1, 0), 8.0, kTol);
}

TEST(PpoClip, ClipHigherDapo) {
  // clip_high 0.28 (DAPO): range [0.8, 1.28].
  //   r=1.25 A=1: max(-1.25, -1.25) = -1.25 (inside, grad -1.25)
  //   r=1.3  A=1: max(-1.3, -1.28)  = -1.28 (clipped, grad 0)
  //   r=0.7  A=-1: max(0.7, 0.8)    =  0.8  (clip_low unchanged, grad 0)
  auto loss = make("ppo_clip", {{"clip_low", "0.2"}, {"clip_high", "0.28"}});
  Batch b = batch({{{-0.5, 1.25, 1.0, 1}, {-0.5, 1.3, 1.0, 1}, {-0.5, 0.7, -1.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{-1.25, -1.28, 0.8}}, kTol, "loss");
  expect_tensor_near(r.grad, {{-1.25, 0.0, 0.0}}, kTol, "grad");
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_high"), 1.0 / 3, 1e-6);
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_low"), 1.0 / 3, 1e-6);
}

TEST(PpoClip, TrlDeltaTwoSided) {
  // delta = 2, dual clip off: unclipped branch uses min(r, 2).
  //   r=5   A=-2: max(-(-2)*min(5,2) = 4, 2*1.2 = 2.4)  = 4   (grad 0: r above delta)
  //   r=1.5 A=-1: max(1.5, 1.2)                          = 1.5 (grad 1.5)
  //   r=5   A= 1: max(-min(5,2) = -2, -1.2)              = -1.2 (clip high, grad 0)
  //   r=1.1 A= 1: max(-1.1, -1.1)                        = -1.1 (grad -1.1)
  auto loss = make("ppo_clip", {{"delta", "2"}, {"clip_ratio_c", "null"}});
  Batch b = batch({{{-1.2, 5.0, -2.0, 1}, {-0.3, 1.5, -1.0, 1}, {-1.2, 5.0, 1.0, 1}, {-0.9, 1.1, 1.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{4.0, 1.5, -1.2, -1.1}}, kTol, "loss");
  expect_tensor_near(r.grad, {{0.0, 1.5, 0.0, -1.1}}, kTol, "grad");
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_delta"), 1.0 / 4, 1e-6);  // (5, -2)
  // With the default dual clip as well: min(4, 6) = 4, unchanged.
  auto both = make("ppo_clip", {{"delta", "2"}});
  EXPECT_NEAR(at2(loss_and_grad(*both, b).loss, 0, 0), 4.0, kTol);
}

TEST(PpoClip, OnPolicyLossIsMinusMeanAdvantageButGradientIsNot0) {
  // logp == old (first micro-step): ratio 1, loss per token = -A, its token mean is -mean(A)
  // = -(1 - 1 + 2 - 0.5)/4 = -0.375; the gradient is -A*1, not zero.
  auto loss = make("ppo_clip");
  Batch b = batch({{{-0.5, 1.0, 1.0, 1}, {-1.0, 1.0, -1.0, 1}, {-2.0, 1.0, 2.0, 1}, {-0.1, 1.0, -0.5, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  EXPECT_NEAR(r.loss.mean().item<double>(), -0.375, kTol);
  expect_tensor_near(r.grad, {{-1.0, 1.0, -2.0, 0.5}}, kTol, "grad");
}

TEST(PpoClip, AdvantagePerSequenceIsBroadcast) {
  // advantages [B] instead of [B, T]: A=2 for the one row; r=1.1 -> -2.2, r=0.5 -> -1.0.
  auto loss = make("ppo_clip");
  Batch b = batch({{{-0.9, 1.1, 0.0, 1}, {-1.0, 0.5, 0.0, 1}}});
  PolicyLossInput in;
  in.batch.response_mask = b.mask;
  in.logp = b.logp;
  in.old_logp = b.old;
  in.advantages = at::full({1}, 2.0, at::kDouble);
  expect_tensor_near(loss->compute(in).per_token_loss, {{-2.2, -1.0}}, kTol, "loss");
}

TEST(PpoClip, FloatInputs) {
  // The runtime passes float tensors: r=1.5, A=1 -> -1.2 (float tolerance).
  auto loss = make("ppo_clip");
  Batch b = batch({{{-0.5, 1.5, 1.0, 1}, {-1.0, 0.5, 1.0, 1}}});
  PolicyLossInput in;
  in.batch.response_mask = b.mask;
  in.logp = b.logp.to(at::kFloat).set_requires_grad(true);
  in.old_logp = b.old.to(at::kFloat);
  in.advantages = b.adv.to(at::kFloat);
  PolicyLossOutput out = loss->compute(in);
  EXPECT_EQ(out.per_token_loss.scalar_type(), at::kFloat);
  EXPECT_NEAR(at2(out.per_token_loss.to(at::kDouble), 0, 0), -1.2, 1e-6);
  EXPECT_NEAR(at2(out.per_token_loss.to(at::kDouble), 0, 1), -0.5, 1e-6);
}

TEST(PpoClip, OptionsValidated) {
  EXPECT_NE(config_error("ppo_clip", {{"clip_low", "-0.1"}}).find("algorithm.policy_loss.clip_low"), std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"clip_low", "1.5"}}).find("algorithm.policy_loss.clip_low"), std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"clip_high", "-0.2"}}).find("algorithm.policy_loss.clip_high"), std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"clip_ratio_c", "0.5"}}).find("algorithm.policy_loss.clip_ratio_c"),
            std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"clip_ratio_c", "-3"}}).find("algorithm.policy_loss.clip_ratio_c"),
            std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"delta", "1.1"}}).find("algorithm.policy_loss.delta"), std::string::npos);
  EXPECT_NE(config_error("ppo_clip", {{"clip_high", "abc"}}).find("algorithm.policy_loss.clip_high"), std::string::npos);
  // An option no loss reads is rejected by the host, with its key path.
  EXPECT_NE(config_error("ppo_clip", {{"clip_lo", "0.2"}}).find("clip_lo"), std::string::npos);
}

// ======================================================================================
// cispo

Batch cispo_batch() {
  return batch({
      {{-1.0, 8.0, 1.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.5, 1.0, 2.0, 1}, {-3.0, 2.0, 0.0, 1}},
      {{-kInf, 1.0, 4.0, 0}, {-kInf, 1.0, 4.0, 0}, {-kInf, 1.0, 4.0, 0}, {-kInf, 1.0, 4.0, 0}},
  });
}

TEST(Cispo, HandComputedUpperOnly) {
  // clip_high 5 (TRL/ScaleRL): w = stopgrad(min(r, 6)); loss = -w*A*logp; grad = -w*A.
  //   r=8   A= 1 logp=-1:  w=6   -> -6*1*(-1)      =  6,  grad -6
  //   r=0.5 A=-1 logp=-2:  w=0.5 -> -0.5*(-1)*(-2) = -1,  grad 0.5  (no lower clip)
  //   r=1   A= 2 logp=-0.5: w=1  -> -1*2*(-0.5)    =  1,  grad -2
  //   r=2   A= 0 logp=-3:  0, grad 0
  //   row 1 fully masked: 0, grad 0
  auto loss = make("cispo");
  LossAndGrad r = loss_and_grad(*loss, cispo_batch());
  expect_tensor_near(r.loss, {{6.0, -1.0, 1.0, 0.0}, {0, 0, 0, 0}}, kTol, "loss");
  // The IS weight is stop-gradient: the gradient is exactly -w*A (no d w / d logp term).
  expect_tensor_near(r.grad, {{-6.0, 0.5, -2.0, 0.0}, {0, 0, 0, 0}}, kTol, "grad");
  // clipfrac_high: r=8 > 6 -> 1/4; no lower clipping; IS weight mean (6+0.5+1+2)/4 = 2.375.
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_high"), 0.25, 1e-6);
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_low"), 0.0, 1e-12);
  EXPECT_NEAR(metric(r.out, "policy/is_weight"), 2.375, 1e-6);
  // val/ratio = (8 + 0.5 + 1 + 2)/4 = 2.875
  EXPECT_NEAR(metric(r.out, "val/ratio"), 2.875, 1e-6);
}

TEST(Cispo, TwoSided) {
  // two_sided, clip_low 0.2 (verl): w = clamp(r, 0.8, 6). The r=0.5 token: w=0.8 ->
  // -0.8*(-1)*(-2) = -1.6, grad 0.8. Others unchanged.
  auto loss = make("cispo", {{"two_sided", "true"}});
  LossAndGrad r = loss_and_grad(*loss, cispo_batch());
  expect_tensor_near(r.loss, {{6.0, -1.6, 1.0, 0.0}, {0, 0, 0, 0}}, kTol, "loss");
  expect_tensor_near(r.grad, {{-6.0, 0.8, -2.0, 0.0}, {0, 0, 0, 0}}, kTol, "grad");
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_low"), 0.25, 1e-6);
  // clip_low 0.6 -> w = max(0.5, 0.4) = 0.5: lower clip inactive again.
  auto wide = make("cispo", {{"two_sided", "true"}, {"clip_low", "0.6"}});
  EXPECT_NEAR(at2(loss_and_grad(*wide, cispo_batch()).loss, 0, 1), -1.0, kTol);
}

TEST(Cispo, RatioFarOutsideBothSides) {
  // r = e^25 (clamped e^20): w = 6; loss = -6*1*(-0.1) = 0.6, grad -6.
  // r = e^-25 (clamped e^-20): one-sided w = e^-20: loss = -e^-20*(-1)*(-0.1), grad e^-20;
  //   two-sided w = 0.8: loss = -0.08, grad 0.8.
  Batch b = batch({{{-0.1, std::exp(25.0), 1.0, 1}, {-0.1, std::exp(-25.0), -1.0, 1}}});
  LossAndGrad one = loss_and_grad(*make("cispo"), b);
  expect_tensor_near(one.loss, {{0.6, -0.1 * std::exp(-20.0)}}, kTol, "one-sided loss");
  expect_tensor_near(one.grad, {{-6.0, std::exp(-20.0)}}, kTol, "one-sided grad");
  LossAndGrad two = loss_and_grad(*make("cispo", {{"two_sided", "true"}}), b);
  expect_tensor_near(two.loss, {{0.6, -0.08}}, kTol, "two-sided loss");
  expect_tensor_near(two.grad, {{-6.0, 0.8}}, kTol, "two-sided grad");
}

TEST(Cispo, GradientMatchesFiniteDifferenceWhereWeightIsConstant) {
  // Where the weight is clipped it is a constant, so the finite difference of the value
  // (-w*A*logp) equals the autograd gradient; elsewhere they differ by the d w / d logp
  // term that the stop-gradient removes (checked against -w*A above).
  auto loss = make("cispo", {{"two_sided", "true"}});
  Batch b = batch({{{-1.0, 8.0, 1.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.7, 10.0, -1.5, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  at::Tensor fd = finite_difference(*loss, b);
  EXPECT_TRUE(at::allclose(r.grad, fd, 1e-7, 1e-7)) << r.grad << "\n" << fd;
  // Unclipped (r=1.2): value derivative is -A*(r + r*logp) (r depends on logp), autograd is -A*r.
  Batch u = batch({{{-0.5, 1.2, 1.0, 1}}});
  LossAndGrad ru = loss_and_grad(*loss, u);
  EXPECT_NEAR(at2(ru.grad, 0, 0), -1.2, kTol);
  EXPECT_NEAR(at2(finite_difference(*loss, u), 0, 0), -(1.2 + 1.2 * -0.5), 1e-6);  // -0.6
}

TEST(Cispo, OptionsValidated) {
  EXPECT_NE(config_error("cispo", {{"clip_high", "-1"}}).find("algorithm.policy_loss.clip_high"), std::string::npos);
  EXPECT_NE(config_error("cispo", {{"two_sided", "true"}, {"clip_low", "-0.1"}}).find("algorithm.policy_loss.clip_low"),
            std::string::npos);
  EXPECT_NE(config_error("cispo", {{"clip_low", "0.2"}}).find("algorithm.policy_loss.clip_low"), std::string::npos);
  EXPECT_NE(config_error("cispo", {{"two_sided", "maybe"}}).find("algorithm.policy_loss.two_sided"), std::string::npos);
}

// ======================================================================================
// gspo

TEST(Gspo, HandComputedSequenceRatio) {
  // Defaults clip_low 3e-4, clip_high 4e-4 -> range [0.9997, 1.0004]. Per-token log-ratios d:
  //   row 0: d=[0.001, -0.0006], A=1:  s=0.0002, S=e^0.0002=1.0002000200013335 (inside)
  //          loss -S per token, grad -A*S per token
  //   row 1: d=[0.002, 0.004, pad], A=1: s=0.003, S=1.003004504503377 > 1.0004: loss -1.0004, grad 0
  //   row 2: d=[-0.01], A=-1: S=e^-0.01=0.9900498337491681 < 0.9997: loss max(0.99005, 0.9997)=0.9997, grad 0
  //   row 3: d=[0.01, 0.03], A=-1: s=0.02, S=1.0202013400267558 > range: loss max(S, 1.0004)=S, grad -A*S=S
  //   row 4: fully masked
  // (S values: plain Python math.exp(sum(d)/len(d)).)
  const double S0 = 1.0002000200013335, S3 = 1.0202013400267558;
  Batch b = batch({
      {{-0.5, std::exp(0.001), 1.0, 1}, {-0.6, std::exp(-0.0006), 1.0, 1}, {-0.1, 1.0, 1.0, 0}},
      {{-0.5, std::exp(0.002), 1.0, 1}, {-0.6, std::exp(0.004), 1.0, 1}, {-0.1, 3.0, 1.0, 0}},
      {{-0.5, std::exp(-0.01), -1.0, 1}, {-0.6, 1.0, -1.0, 0}, {-0.1, 1.0, -1.0, 0}},
      {{-0.5, std::exp(0.01), -1.0, 1}, {-0.6, std::exp(0.03), -1.0, 1}, {-0.1, 1.0, -1.0, 0}},
      {{-kInf, 1.0, 3.0, 0}, {-kInf, 1.0, 3.0, 0}, {-kInf, 1.0, 3.0, 0}},
  });
  auto loss = make("gspo");
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss,
                     {{-S0, -S0, 0}, {-1.0004, -1.0004, 0}, {0.9997, 0, 0}, {S3, S3, 0}, {0, 0, 0}}, 1e-9, "loss");
  expect_tensor_near(r.grad, {{-S0, -S0, 0}, {0, 0, 0}, {0, 0, 0}, {S3, S3, 0}, {0, 0, 0}}, 1e-9, "grad");
  // Clip fractions per token (7 response tokens): high = row 1 (A>0, S>1.0004) 2/7; low = row 2 1/7.
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_high"), 2.0 / 7, 1e-6);
  EXPECT_NEAR(metric(r.out, "policy/clipfrac_low"), 1.0 / 7, 1e-6);

  // With A constant per sequence, the token objective's gradient equals the gradient of the
  // sequence-level objective: central finite difference of the value (which depends on logp
  // only through s) matches autograd.
  at::Tensor fd = finite_difference(*loss, b);
  EXPECT_TRUE(at::allclose(r.grad, fd, 1e-6, 1e-7)) << r.grad << "\n" << fd;
}

TEST(Gspo, SequenceRatioIsStopGradient) {
  // d=[1e-4, 1e-4], A=[1, 2] (varying): s=1e-4, S=1.0001000050001667 (inside the range).
  // Token ratio logp - sg(logp) + sg(s): each token's gradient is -A_t*S through its own
  // logp only: [-S, -2S]. (Were s not stopped, each would be -(1+2)*S/2 = -1.5S.)
  const double S = 1.0001000050001667;
  auto loss = make("gspo");
  Batch b = batch({{{-0.5, std::exp(1e-4), 1.0, 1}, {-0.6, std::exp(1e-4), 2.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{-S, -2 * S}}, 1e-9, "loss");
  expect_tensor_near(r.grad, {{-S, -2 * S}}, 1e-9, "grad");
}

TEST(Gspo, RatioFarOutsideAndAZero) {
  // s = 25 -> clamped to 20; A=1: loss -1.0004, grad 0. s=-25 -> -20, A=-1: loss 0.9997, grad 0.
  // A=0 row: loss 0, grad 0.
  auto loss = make("gspo", {});
  Batch b = batch({{{-0.5, std::exp(25.0), 1.0, 1}}, {{-0.5, std::exp(-25.0), -1.0, 1}}, {{-0.5, 2.0, 0.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{-1.0004}, {0.9997}, {0.0}}, 1e-12, "loss");
  expect_tensor_near(r.grad, {{0.0}, {0.0}, {0.0}}, 0.0, "grad");
}

TEST(Gspo, NegativeAdvantageWithHugeRatioIsBoundedLikeVerl) {
  // GSPO has no dual clip: with A = -1 the unclipped branch -A*s wins. verl clamps the token
  // log-ratio at max 10, so s = e^15 gives loss e^10 and gradient 0 (not |A| e^15);
  // s = e^5 is below the clamp: loss e^5, gradient d(-A*s)/dlogp = -A*s = e^5.
  auto loss = make("gspo", {});
  Batch b = batch({{{-0.5, std::exp(15.0), -1.0, 1}}, {{-0.5, std::exp(5.0), -1.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{std::exp(10.0)}, {std::exp(5.0)}}, 1e-9, "loss");
  expect_tensor_near(r.grad, {{0.0}, {std::exp(5.0)}}, 1e-9, "grad");
}

TEST(Gspo, OptionsValidated) {
  EXPECT_NE(config_error("gspo", {{"clip_low", "-3e-4"}}).find("algorithm.policy_loss.clip_low"), std::string::npos);
  EXPECT_NE(config_error("gspo", {{"clip_high", "-4e-4"}}).find("algorithm.policy_loss.clip_high"), std::string::npos);
  EXPECT_NE(config_error("gspo", {{"clip_ratio_c", "3"}}).find("clip_ratio_c"), std::string::npos);  // not a gspo option
}

// ======================================================================================
// sapo

TEST(Sapo, HandComputed) {
  // loss = -sigmoid(tau*(r-1)) * 4/tau * A, tau = 1 for A>0, 1.05 otherwise;
  // grad = -A * 4 * sig * (1 - sig) * r. Plain Python (math) for the non-trivial ones:
  //   r=1   A= 1: sig(0)=0.5: loss -0.5*4 = -2,             grad -4*0.25 = -1
  //   r=1   A=-1: loss 0.5*4/1.05 = 1.9047619047619047,     grad 1
  //   r=2   A= 1: loss -2.9242343145200196, grad -1.5728954659318548
  //   r=0.5 A=-2: loss  2.831876660606733,  grad  0.9341398232853926
  //   r=1.3 A= 0: 0, grad 0; masked: 0
  auto loss = make("sapo");
  Batch b = batch({{{-0.5, 1.0, 1.0, 1}, {-0.5, 1.0, -1.0, 1}, {-0.5, 2.0, 1.0, 1}},
                   {{-0.5, 0.5, -2.0, 1}, {-0.5, 1.3, 0.0, 1}, {-kInf, 1.0, 1.0, 0}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{-2.0, 1.9047619047619047, -2.9242343145200196}, {2.831876660606733, 0.0, 0.0}}, 1e-12,
                     "loss");
  expect_tensor_near(r.grad, {{-1.0, 1.0, -1.5728954659318548}, {0.9341398232853926, 0.0, 0.0}}, 1e-12, "grad");
  at::Tensor fd = finite_difference(*loss, b);
  EXPECT_TRUE(at::allclose(r.grad, fd, 1e-7, 1e-7)) << r.grad << "\n" << fd;
  EXPECT_TRUE(has_metric(r.out, "policy/approxkl"));
  EXPECT_TRUE(has_metric(r.out, "val/ratio_var"));
}

TEST(Sapo, RatioFarOutsideBothSides) {
  // r=e^20 (clamped), A=1: sig(e^20 - 1) = 1 -> loss -4, grad 0.
  // r=e^-20, A=-1: sig(1.05*(e^-20 - 1)) ~ sig(-1.05) = 1/(1+e^1.05) = 0.2592...: loss = sig*4/1.05;
  //   grad = 4*sig*(1-sig)*e^-20 ~ 1.6e-9. sig(-1.05) computed by hand: e^1.05 = 2.857651118,
  //   1/3.857651118 = 0.259224..., loss = 0.259224*3.809524 = 0.98752 (checked to 1e-4).
  auto loss = make("sapo");
  Batch b = batch({{{-0.5, std::exp(25.0), 1.0, 1}, {-0.5, std::exp(-25.0), -1.0, 1}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  EXPECT_NEAR(at2(r.loss, 0, 0), -4.0, 1e-12);
  EXPECT_NEAR(at2(r.loss, 0, 1), 0.98752, 1e-4);
  EXPECT_NEAR(at2(r.grad, 0, 0), 0.0, 1e-12);
  EXPECT_NEAR(at2(r.grad, 0, 1), 0.0, 1e-8);
}

TEST(Sapo, OptionsValidated) {
  EXPECT_NE(config_error("sapo", {{"tau_pos", "0"}}).find("algorithm.policy_loss.tau_pos"), std::string::npos);
  EXPECT_NE(config_error("sapo", {{"tau_neg", "-1.05"}}).find("algorithm.policy_loss.tau_neg"), std::string::npos);
}

// ======================================================================================
// reinforce

TEST(Reinforce, HandComputed) {
  // loss = -A*logp; grad = -A (the IS weight is the runtime's mismatch correction).
  //   logp=-0.5 A=2 -> 1; logp=-2 A=-1 -> -2; logp=-0.7 A=0 -> 0; masked (-inf) -> 0.
  auto loss = make("reinforce");
  Batch b = batch({{{-0.5, 1.5, 2.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.7, 1.0, 0.0, 1}, {-kInf, 1.0, 3.0, 0}}});
  LossAndGrad r = loss_and_grad(*loss, b);
  expect_tensor_near(r.loss, {{1.0, -2.0, 0.0, 0.0}}, kTol, "loss");
  expect_tensor_near(r.grad, {{-2.0, 1.0, 0.0, 0.0}}, kTol, "grad");
  // Ratio metrics against old: (1.5 + 0.5 + 1)/3 = 1.
  EXPECT_NEAR(metric(r.out, "val/ratio"), 1.0, 1e-9);
  Batch f = batch({{{-0.5, 1.5, 2.0, 1}, {-2.0, 0.5, -1.0, 1}, {-0.7, 1.0, 0.0, 1}}});
  EXPECT_TRUE(at::allclose(loss_and_grad(*loss, f).grad, finite_difference(*loss, f), 1e-7, 1e-7));
}

TEST(Reinforce, RejectsOptions) {
  EXPECT_NE(config_error("reinforce", {{"clip_high", "0.2"}}).find("clip_high"), std::string::npos);
}

// ======================================================================================

TEST(PolicyLosses, ShapeMismatchIsReported) {
  auto loss = make("ppo_clip");
  Batch b = mixed_batch();
  PolicyLossInput in;
  in.batch.response_mask = b.mask;
  in.logp = b.logp;
  in.old_logp = b.old.narrow(1, 0, 2);
  in.advantages = b.adv;
  EXPECT_NE(error_of<std::invalid_argument>([&] { loss->compute(in); }).find("old_logp"), std::string::npos);
}

TEST(PolicyLosses, AllRegistered) {
  for (const char* n : {"ppo_clip", "cispo", "gspo", "sapo", "reinforce"}) EXPECT_NO_THROW(make(n)) << n;
}

}  // namespace
