// The kl_estimators plugin (k1, k2, k3, k4), loaded the way a run loads it. Expected values
// are computed by hand / with Python's math module from the published formulas (see the
// comments); gradients are checked against central finite differences in double precision.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>  // torch::NoGradGuard (ATen no longer spells it at:: in LibTorch 2.x)
#include <gtest/gtest.h>

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "tests/support/error_of.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using grpo::sdk::KlEstimator;

grpo::core::PluginRegistry& registry() { return grpo::testing::build_plugin_registry(); }

std::shared_ptr<KlEstimator> make(const std::string& name, const std::vector<grpo::testing::PluginOption>& opts = {}) {
  return grpo::testing::create_component<KlEstimator>(name, opts, "algorithm.kl_estimator");
}

at::Tensor row(const std::vector<double>& v) { return at::tensor(v, at::kDouble).unsqueeze(0); }

void expect_values(const at::Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  const at::Tensor g = got.reshape({-1}).to(at::kDouble);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i].item<double>(), want[i], tol) << "element " << i;
}

// logp - ref = d = [0.5, 0, -2, 50 (-> clamped to 40), -0.1, -2.5]
const std::vector<double> kLogp = {-1.0, -0.5, -3.0, 0.0, -0.2, -3.0};
const std::vector<double> kRef = {-1.5, -0.5, -1.0, -50.0, -0.1, -0.5};

TEST(KlEstimators, K1IsTheClampedLogRatio) {
  // d = logp - ref, 50 clamped to 40.
  expect_values(make("k1")->compute(row(kLogp), row(kRef)), {0.5, 0.0, -2.0, 40.0, -0.1, -2.5});
}

TEST(KlEstimators, K2IsHalfTheSquare) {
  // d^2/2: 0.25/2, 0, 4/2, 1600/2, 0.01/2, 6.25/2
  expect_values(make("k2")->compute(row(kLogp), row(kRef)), {0.125, 0.0, 2.0, 800.0, 0.005, 3.125});
}

TEST(KlEstimators, K3LowVarianceWithVerlClamps) {
  // exp(-d) - 1 + d (Python math.expm1(-d) + d):
  //   d=0.5 -> 0.10653065971263342; d=0 -> 0; d=-2 -> e^2-3 = 4.38905609893065;
  //   d=40 -> exponent input -40 clamped to -20: e^-20 + 19 = 19.000000002 -> value clamp 10;
  //   d=-0.1 -> 0.005170918075647624; d=-2.5 -> e^2.5 - 3.5 = 8.682493960703473
  expect_values(make("k3")->compute(row(kLogp), row(kRef)),
                {0.10653065971263342, 0.0, 4.38905609893065, 10.0, 0.005170918075647624, 8.682493960703473});
}

TEST(KlEstimators, K3LargeNegativeLogRatioHitsTheValueClamp) {
  // d = -15: exp(15) - 1 - 15 = 3.27e6 -> 10; d = -30: exponent 30 -> 20, e^20 - 21 -> 10.
  expect_values(make("k3")->compute(row({-16.0, -31.0}), row({-1.0, -1.0})), {10.0, 10.0});
}

TEST(KlEstimators, K3ExponentClampAloneWithValueClampDisabled) {
  // value_clamp .inf: d = 25 -> exponent -25 clamped to -20: e^-20 - 1 + 20 = 19.000000002061153;
  // d = -25 -> exponent 25 clamped to 20: e^20 - 1 - 20 = 485165174.40979...
  const double e20 = std::exp(20.0);
  expect_values(make("k3", {{"value_clamp", ".inf"}})->compute(row({25.0, -25.0}), row({0.0, 0.0})),
                {19.000000002061153, e20 - 21.0}, 1e-6);
}

TEST(KlEstimators, K4OnPolicyValueIsTheLogRatio) {
  // ratio = exp(logp - stopgrad(logp)) = 1, so k4 = d.
  expect_values(make("k4")->compute(row(kLogp), row(kRef)), {0.5, 0.0, -2.0, 40.0, -0.1, -2.5});
}

TEST(KlEstimators, LogRatioClampIsAnOption) {
  expect_values(make("k1", {{"log_ratio_clamp", ".inf"}})->compute(row({0.0}), row({-50.0})), {50.0});
  expect_values(make("k2", {{"log_ratio_clamp", "3"}})->compute(row({0.0, -10.0}), row({-10.0, 0.0})), {4.5, 4.5});
}

TEST(KlEstimators, FloatInputsStayFloat) {
  at::Tensor logp = at::tensor({-1.0f, -2.0f}).unsqueeze(0), ref = at::tensor({-1.5f, -1.0f}).unsqueeze(0);
  for (const char* n : {"k1", "k2", "k3", "k4"}) {
    at::Tensor out = make(n)->compute(logp, ref);
    EXPECT_EQ(out.scalar_type(), at::kFloat) << n;
    EXPECT_EQ(out.sizes(), logp.sizes()) << n;
  }
}

TEST(KlEstimators, RejectsBadOptions) {
  EXPECT_NE(grpo::testing::error_of([] { make("k1", {{"log_ratio_clamp", "0"}}); }).find("algorithm.kl_estimator.log_ratio_clamp"),
            std::string::npos);
  EXPECT_NE(grpo::testing::error_of([] { make("k3", {{"value_clamp", "-1"}}); }).find("value_clamp: must be > 0"), std::string::npos);
  // k1 has no exp_clamp: the host rejects the unread option.
  EXPECT_NE(grpo::testing::error_of([] { make("k1", {{"exp_clamp", "5"}}); }).find("exp_clamp"), std::string::npos);
}

// ---- gradients -------------------------------------------------------------------------

at::Tensor autograd_grad(const KlEstimator& k, const at::Tensor& logp0, const at::Tensor& ref) {
  at::Tensor logp = logp0.clone().requires_grad_(true);
  k.compute(logp, ref).sum().backward();
  return logp.grad();
}

// Central finite differences of sum(f(logp)) w.r.t. each element of logp.
at::Tensor finite_diff(const std::function<at::Tensor(const at::Tensor&)>& f, const at::Tensor& logp0, double h = 1e-6) {
  at::Tensor g = at::zeros_like(logp0);
  torch::NoGradGuard ng;
  for (int64_t i = 0; i < logp0.size(1); ++i) {
    at::Tensor up = logp0.clone(), down = logp0.clone();
    up[0][i] += h;
    down[0][i] -= h;
    g[0][i] = (f(up).sum().item<double>() - f(down).sum().item<double>()) / (2 * h);
  }
  return g;
}

// d = [0.5, -0.3, 1.7, -2.2, 0.05]: inside every clamp.
const std::vector<double> kSmoothLogp = {-1.0, -0.8, -0.3, -3.2, -0.45};
const std::vector<double> kSmoothRef = {-1.5, -0.5, -2.0, -1.0, -0.5};

TEST(KlEstimatorGradients, K1K2K3MatchFiniteDifferences) {
  const at::Tensor logp = row(kSmoothLogp), ref = row(kSmoothRef);
  for (const char* n : {"k1", "k2", "k3"}) {
    auto k = make(n);
    const at::Tensor fd = finite_diff([&](const at::Tensor& x) { return k->compute(x, ref); }, logp);
    EXPECT_TRUE(at::allclose(autograd_grad(*k, logp, ref), fd, 1e-6, 1e-7)) << n << "\n" << autograd_grad(*k, logp, ref) << fd;
  }
  // Analytic cross-check: k2' = d; k3' = 1 - exp(-d).
  const at::Tensor d = row(kSmoothLogp) - row(kSmoothRef);
  EXPECT_TRUE(at::allclose(autograd_grad(*make("k2"), logp, ref), d, 1e-12, 1e-12));
  EXPECT_TRUE(at::allclose(autograd_grad(*make("k3"), logp, ref), 1 - at::exp(-d), 1e-12, 1e-12));
}

TEST(KlEstimatorGradients, K4MatchesOpenInstructDefinitionOnPolicy) {
  // open-instruct: k4 = exp(logp - old) * clamp(logp - ref); with old fixed at the current
  // logp0 its finite-difference gradient is the reference for our on-policy k4.
  const at::Tensor logp0 = row(kSmoothLogp), ref = row(kSmoothRef);
  const at::Tensor fd = finite_diff([&](const at::Tensor& x) { return at::exp(x - logp0) * (x - ref); }, logp0);
  EXPECT_TRUE(at::allclose(autograd_grad(*make("k4"), logp0, ref), fd, 1e-6, 1e-7));
  // = d + 1 at ratio 1.
  EXPECT_TRUE(at::allclose(fd, logp0 - ref + 1, 1e-6, 1e-7));
}

TEST(KlEstimatorGradients, ZeroInsideClampedRegions) {
  // d = 50 and d = -45: outside the +-40 log-ratio clamp -> zero gradient for k1, k2, k3.
  const at::Tensor logp = row({0.0, -46.0}), ref = row({-50.0, -1.0});
  for (const char* n : {"k1", "k2", "k3"}) EXPECT_TRUE(at::equal(autograd_grad(*make(n), logp, ref), at::zeros({1, 2}, at::kDouble))) << n;
  // k4 = ratio * clamp(d): only the ratio factor carries a gradient there: clamp(d) * 1 = 40, -40.
  expect_values(autograd_grad(*make("k4"), logp, ref), {40.0, -40.0});
  // k3 value clamp: d = -15 (value 3.27e6 -> 10), d = -3 (e^3 - 4 = 16.09 -> 10): zero gradient.
  EXPECT_TRUE(at::equal(autograd_grad(*make("k3"), row({-16.0, -4.0}), row({-1.0, -1.0})), at::zeros({1, 2}, at::kDouble)));
  // k3 exponent clamp with the value clamp off: d = 25 -> exponent clamped, value 19 + e^-20 constant.
  EXPECT_TRUE(at::equal(autograd_grad(*make("k3", {{"value_clamp", ".inf"}}), row({25.0}), row({0.0})), at::zeros({1, 1}, at::kDouble)));
}

TEST(KlEstimatorGradients, K1IsAnOrdinaryFunctionOfTheReference) {
  // k1 gradient w.r.t. ref is -1: nothing in the estimator detaches the reference (the trainer
  // computes ref under no_grad).
  at::Tensor ref = row({-1.0}).requires_grad_(true);
  make("k1")->compute(row({-0.5}), ref).sum().backward();
  expect_values(ref.grad(), {-1.0});
}

}  // namespace
