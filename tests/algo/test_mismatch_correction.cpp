// core/algo/mismatch_correction: hand-computed importance weights for every mode (values of
// exp() from Python's math.exp), masked tokens, a fully masked sequence, and no gradient.
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/algo/mismatch_correction.h"

namespace {

using grpo::core::MismatchCorrection;
using grpo::core::MismatchCorrectionOptions;
using grpo::core::MismatchMode;
using grpo::core::SequenceReduction;
using grpo::core::mismatch_correction;

// math.exp(...) in Python:
constexpr double kE05 = 1.6487212707001282;    // e^0.5
constexpr double kEm08 = 0.44932896411722156;  // e^-0.8
constexpr double kEm1 = 0.36787944117144233;   // e^-1
constexpr double kEm03 = 0.7408182206817179;   // e^-0.3
constexpr double kEm01 = 0.9048374180359595;   // e^-0.1
constexpr double kEm05 = 0.6065306597126334;   // e^-0.5
constexpr double kE10 = 22026.465794806718;    // e^10

// old  = [[-1.0, -1.0, -1.0], [-0.5, -2.0, 0.0], [-1, -1, -1]]
// samp = [[-1.5, -0.2, -1.0], [-0.5, -1.0, NaN], [NaN, NaN, NaN]]
// mask = [[1, 1, 1], [1, 1, 0], [0, 0, 0]]   (third sequence fully masked)
// old - samp on response tokens = [[0.5, -0.8, 0], [0, -1.0, .], [., ., .]]
at::Tensor t(std::vector<double> v) { return at::tensor(v, at::kDouble).reshape({3, 3}); }
at::Tensor old_lp() { return t({-1.0, -1.0, -1.0, -0.5, -2.0, 0.0, -1.0, -1.0, -1.0}); }
at::Tensor samp_lp() { return t({-1.5, -0.2, -1.0, -0.5, -1.0, NAN, NAN, NAN, NAN}); }
at::Tensor mask() { return t({1, 1, 1, 1, 1, 0, 0, 0, 0}); }

std::map<std::string, double> metrics(const MismatchCorrection& c) {
  std::map<std::string, double> out;
  for (const auto& m : c.metrics) {
    EXPECT_EQ(m.value.dim(), 0) << m.name;
    out[m.name] = m.value.item<double>();
  }
  return out;
}

void expect_weights(const MismatchCorrection& c, const std::vector<double>& want) {
  ASSERT_EQ(c.weights.sizes(), (at::IntArrayRef{3, 3}));
  EXPECT_FALSE(at::isnan(c.weights).any().item<bool>());
  const at::Tensor w = c.weights.reshape({-1});
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(w[i].item<double>(), want[i], 1e-12) << "element " << i;
}

MismatchCorrectionOptions opts(MismatchMode mode, double max, double min = 0.0, SequenceReduction r = SequenceReduction::kSum) {
  MismatchCorrectionOptions o;
  o.mode = mode;
  o.max = max;
  o.min = min;
  o.sequence_reduction = r;
  return o;
}

TEST(MismatchCorrection, ParsesNames) {
  EXPECT_EQ(grpo::core::parse_mismatch_mode("none"), MismatchMode::kNone);
  EXPECT_EQ(grpo::core::parse_mismatch_mode("token_truncate"), MismatchMode::kTokenTruncate);
  EXPECT_EQ(grpo::core::parse_mismatch_mode("token_mask"), MismatchMode::kTokenMask);
  EXPECT_EQ(grpo::core::parse_mismatch_mode("sequence_truncate"), MismatchMode::kSequenceTruncate);
  EXPECT_EQ(grpo::core::parse_mismatch_mode("sequence_mask"), MismatchMode::kSequenceMask);
  EXPECT_EQ(grpo::core::parse_sequence_reduction("mean"), SequenceReduction::kMean);
  EXPECT_EQ(grpo::core::parse_sequence_reduction("sum"), SequenceReduction::kSum);
  try {
    grpo::core::parse_mismatch_mode("tis");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("none, token_truncate, token_mask, sequence_truncate, sequence_mask"), std::string::npos);
  }
  EXPECT_THROW(grpo::core::parse_sequence_reduction("max"), std::invalid_argument);
}

TEST(MismatchCorrection, DefaultsAndValidation) {
  MismatchCorrectionOptions o;
  EXPECT_EQ(o.mode, MismatchMode::kNone);
  EXPECT_EQ(o.max, 2.0);
  EXPECT_EQ(o.min, 0.0);
  EXPECT_EQ(o.sequence_reduction, SequenceReduction::kSum);
  EXPECT_EQ(o.log_ratio_clamp, 10.0);
  EXPECT_THROW(grpo::core::validate(opts(MismatchMode::kTokenMask, 0.0)), std::invalid_argument);
  EXPECT_THROW(grpo::core::validate(opts(MismatchMode::kTokenMask, 2.0, 2.0)), std::invalid_argument);
  EXPECT_THROW(grpo::core::validate(opts(MismatchMode::kTokenMask, 2.0, -0.1)), std::invalid_argument);
  EXPECT_NO_THROW(grpo::core::validate(opts(MismatchMode::kTokenMask, 3.0, 0.5)));
}

TEST(MismatchCorrection, NoneIsTheMaskAndReportsTheMismatch) {
  const MismatchCorrection c = mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kNone, 2.0));
  expect_weights(c, {1, 1, 1, 1, 1, 0, 0, 0, 0});
  auto m = metrics(c);
  // |old - samp| over the 5 response tokens: (0.5 + 0.8 + 0 + 0 + 1.0) / 5 = 0.46; max 1.0
  EXPECT_NEAR(m.at("sampling/sampling_logp_difference/mean"), 0.46, 1e-12);
  EXPECT_NEAR(m.at("sampling/sampling_logp_difference/max"), 1.0, 1e-12);
  // rho mean (e^0.5 + e^-0.8 + 1 + 1 + e^-1) / 5, max e^0.5, min e^-1
  EXPECT_NEAR(m.at("sampling/importance_sampling_ratio/mean"), (kE05 + kEm08 + 2.0 + kEm1) / 5.0, 1e-12);
  EXPECT_NEAR(m.at("sampling/importance_sampling_ratio/max"), kE05, 1e-12);
  EXPECT_NEAR(m.at("sampling/importance_sampling_ratio/min"), kEm1, 1e-12);
}

TEST(MismatchCorrection, TokenTruncate) {
  // C = 1.5: e^0.5 = 1.6487 -> 1.5; one of 5 response tokens truncated.
  const MismatchCorrection c = mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kTokenTruncate, 1.5));
  expect_weights(c, {1.5, kEm08, 1.0, 1.0, kEm1, 0, 0, 0, 0});
  auto m = metrics(c);
  EXPECT_NEAR(m.at("sampling/is_truncated_frac"), 0.2, 1e-12);
  EXPECT_NEAR(m.at("sampling/is_weight/mean"), (1.5 + kEm08 + 2.0 + kEm1) / 5.0, 1e-12);
}

TEST(MismatchCorrection, TokenMask) {
  // [0.4, 1.5]: e^0.5 = 1.6487 above -> 0; e^-1 = 0.3679 below -> 0; e^-0.8 = 0.4493 kept.
  const MismatchCorrection c = mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kTokenMask, 1.5, 0.4));
  expect_weights(c, {0.0, kEm08, 1.0, 1.0, 0.0, 0, 0, 0, 0});
  EXPECT_NEAR(metrics(c).at("sampling/is_masked_frac"), 0.4, 1e-12);  // 2 of 5
}

TEST(MismatchCorrection, SequenceTruncateSum) {
  // sum of log ratios: seq0 0.5 - 0.8 + 0 = -0.3 -> e^-0.3 = 0.7408 -> C = 0.5 truncates it;
  // seq1 0 - 1.0 = -1 -> e^-1 = 0.3679 kept; seq2 empty -> weight 0. 3 of 5 tokens truncated.
  const MismatchCorrection c = mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kSequenceTruncate, 0.5));
  expect_weights(c, {0.5, 0.5, 0.5, kEm1, kEm1, 0, 0, 0, 0});
  EXPECT_NEAR(metrics(c).at("sampling/is_truncated_frac"), 0.6, 1e-12);
  // without truncation the sequence ratio itself
  expect_weights(mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kSequenceTruncate, 2.0)),
                 {kEm03, kEm03, kEm03, kEm1, kEm1, 0, 0, 0, 0});
}

TEST(MismatchCorrection, SequenceMaskMean) {
  // mean of log ratios: seq0 -0.3/3 = -0.1 -> e^-0.1 = 0.9048 in [0.7, 2] kept;
  // seq1 -1/2 = -0.5 -> e^-0.5 = 0.6065 < 0.7 -> 0 (2 of 5 tokens masked).
  const MismatchCorrection c = mismatch_correction(old_lp(), samp_lp(), mask(),
                                                   opts(MismatchMode::kSequenceMask, 2.0, 0.7, SequenceReduction::kMean));
  expect_weights(c, {kEm01, kEm01, kEm01, 0, 0, 0, 0, 0, 0});
  EXPECT_NEAR(metrics(c).at("sampling/is_masked_frac"), 0.4, 1e-12);
  // TRL-like: sequence_mask, C = 3, sum: e^-0.3 and e^-1 both kept.
  expect_weights(mismatch_correction(old_lp(), samp_lp(), mask(), opts(MismatchMode::kSequenceMask, 3.0)),
                 {kEm03, kEm03, kEm03, kEm1, kEm1, 0, 0, 0, 0});
  // sequence_truncate with mean: e^-0.1 and e^-0.5 under C = 2
  expect_weights(mismatch_correction(old_lp(), samp_lp(), mask(),
                                     opts(MismatchMode::kSequenceTruncate, 2.0, 0.0, SequenceReduction::kMean)),
                 {kEm01, kEm01, kEm01, kEm05, kEm05, 0, 0, 0, 0});
}

TEST(MismatchCorrection, LogRatioIsClampedBeforeTheExponential) {
  // old - samp = 30 -> clamp 10 -> e^10; -30 -> e^-10. Sequence sum 30 + 30 -> clamp 10 too.
  const at::Tensor old = at::tensor({0.0, 0.0}, at::kDouble).unsqueeze(0);
  const at::Tensor samp = at::tensor({-30.0, 30.0}, at::kDouble).unsqueeze(0);
  const at::Tensor m = at::ones({1, 2}, at::kDouble);
  const MismatchCorrection none = mismatch_correction(old, samp, m, opts(MismatchMode::kNone, 2.0));
  EXPECT_NEAR(metrics(none).at("sampling/importance_sampling_ratio/max"), kE10, 1e-8);
  EXPECT_NEAR(metrics(none).at("sampling/sampling_logp_difference/max"), 30.0, 1e-12);
  const MismatchCorrection tt = mismatch_correction(old, samp, m, opts(MismatchMode::kTokenTruncate, 2.0));
  EXPECT_NEAR(tt.weights[0][0].item<double>(), 2.0, 1e-12);
  EXPECT_NEAR(tt.weights[0][1].item<double>(), 1.0 / kE10, 1e-15);
  const at::Tensor samp2 = at::tensor({-30.0, -30.0}, at::kDouble).unsqueeze(0);
  const MismatchCorrection st = mismatch_correction(old, samp2, m, opts(MismatchMode::kSequenceTruncate, 1e6));
  EXPECT_NEAR(st.weights[0][0].item<double>(), kE10, 1e-8);
}

TEST(MismatchCorrection, FullyMaskedBatchHasNoNaN) {
  const at::Tensor nan = at::full({2, 3}, NAN, at::kDouble);
  const at::Tensor m = at::zeros({2, 3}, at::kDouble);
  for (MismatchMode mode : {MismatchMode::kNone, MismatchMode::kTokenTruncate, MismatchMode::kTokenMask,
                            MismatchMode::kSequenceTruncate, MismatchMode::kSequenceMask}) {
    for (SequenceReduction r : {SequenceReduction::kSum, SequenceReduction::kMean}) {
      const MismatchCorrection c = mismatch_correction(nan, nan, m, opts(mode, 2.0, 0.5, r));
      EXPECT_TRUE(at::equal(c.weights, m)) << grpo::core::to_string(mode);
      for (const auto& [name, v] : metrics(c)) EXPECT_TRUE(std::isfinite(v)) << name;
      EXPECT_EQ(metrics(c).at("sampling/importance_sampling_ratio/min"), 1.0);
    }
  }
}

TEST(MismatchCorrection, WeightsCarryNoGradient) {
  at::Tensor old = old_lp().requires_grad_(true);
  at::Tensor samp = at::where(mask() > 0, samp_lp(), at::zeros_like(mask())).requires_grad_(true);
  for (MismatchMode mode : {MismatchMode::kTokenTruncate, MismatchMode::kTokenMask, MismatchMode::kSequenceTruncate,
                            MismatchMode::kSequenceMask}) {
    const MismatchCorrection c = mismatch_correction(old, samp, mask(), opts(mode, 1.5, 0.4));
    EXPECT_FALSE(c.weights.requires_grad()) << grpo::core::to_string(mode);
    // The weights scale the policy loss; the gradient w.r.t. logp is w * dL/dlogp, and nothing
    // flows into old or samp through the weights.
    at::Tensor logp = at::zeros({3, 3}, at::kDouble).requires_grad_(true);
    (c.weights * (logp * 2.0 + old)).sum().backward();
    EXPECT_TRUE(at::allclose(logp.grad(), 2.0 * c.weights));
    EXPECT_FALSE(samp.grad().defined() && samp.grad().abs().sum().item<double>() != 0.0);
    // old gets only the direct term (= w), not anything through the weights.
    EXPECT_TRUE(at::allclose(old.grad(), c.weights));
    old.mutable_grad() = at::Tensor();
  }
}

}  // namespace

namespace {

TEST(MismatchCorrection, EmptyBatchAndNonFiniteTokensGiveNoCrashAndNoNaN) {
  MismatchCorrectionOptions o;
  o.mode = MismatchMode::kTokenTruncate;
  // A [0, 4] batch: no tokens, metrics at their neutral values.
  const at::Tensor empty = at::zeros({0, 4}, at::kDouble);
  MismatchCorrection e = mismatch_correction(empty, empty, empty, o);
  EXPECT_EQ(e.weights.numel(), 0);
  for (const auto& m : e.metrics) EXPECT_TRUE(std::isfinite(m.value.item<double>())) << m.name;
  // -inf on both sides (diff NaN) and a NaN rollout log-prob on response tokens: weight 0,
  // the finite token keeps its weight: old - samp = 0.5 -> e^0.5 (under the cap 2).
  const at::Tensor old_logp = at::tensor({-INFINITY, -1.0, -1.0}, at::kDouble).reshape({1, 3});
  const at::Tensor samp = at::tensor({-INFINITY, NAN, -1.5}, at::kDouble).reshape({1, 3});
  MismatchCorrection c = mismatch_correction(old_logp, samp, at::ones({1, 3}, at::kDouble), o);
  EXPECT_EQ(c.weights[0][0].item<double>(), 0.0);
  EXPECT_EQ(c.weights[0][1].item<double>(), 0.0);
  EXPECT_NEAR(c.weights[0][2].item<double>(), kE05, 1e-12);
  for (const auto& m : c.metrics) EXPECT_TRUE(std::isfinite(m.value.item<double>())) << m.name;
}

}  // namespace
