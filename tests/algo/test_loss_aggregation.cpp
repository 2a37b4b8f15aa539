// core/algo/loss_aggregation: hand-computed values for every mode, and the invariance of the
// accumulated gradient under splitting a batch into micro-batches (and ranks).
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/algo/loss_aggregation.h"

namespace {

using grpo::core::AggregationScale;
using grpo::core::LossAggregation;
using grpo::core::aggregate_loss;
using grpo::core::aggregation_scale;

const std::vector<LossAggregation> kModes = {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean,
                                             LossAggregation::kSeqMeanTokenSum, LossAggregation::kSeqMeanTokenSumNorm};

double value(const at::Tensor& t) { return t.item<double>(); }

TEST(LossAggregation, ParsesNamesAndListsThemOnError) {
  EXPECT_EQ(grpo::core::parse_loss_aggregation("token-mean"), LossAggregation::kTokenMean);
  EXPECT_EQ(grpo::core::parse_loss_aggregation("seq-mean-token-mean"), LossAggregation::kSeqMeanTokenMean);
  EXPECT_EQ(grpo::core::parse_loss_aggregation("seq-mean-token-sum"), LossAggregation::kSeqMeanTokenSum);
  EXPECT_EQ(grpo::core::parse_loss_aggregation("seq-mean-token-sum-norm"), LossAggregation::kSeqMeanTokenSumNorm);
  for (LossAggregation m : kModes) EXPECT_EQ(grpo::core::parse_loss_aggregation(grpo::core::to_string(m)), m);
  try {
    grpo::core::parse_loss_aggregation("token_mean");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"token_mean\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm"),
              std::string::npos);
  }
}

// L = [[1,2,3],[4,5,6],[7,8,NaN]], M = [[1,1,0],[1,0,0],[0,0,0]] (third row fully masked).
at::Tensor losses() { return at::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, NAN}, at::kDouble).reshape({3, 3}); }
at::Tensor mask() { return at::tensor({1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0}, at::kDouble).reshape({3, 3}); }

TEST(LossAggregation, ScaleCountsTokensSequencesRows) {
  const AggregationScale s = aggregation_scale({mask()}, 4);
  EXPECT_EQ(s.global_tokens, 3.0);     // 2 + 1 + 0
  EXPECT_EQ(s.global_sequences, 2.0);  // the empty row does not count
  EXPECT_EQ(s.global_rows, 3.0);
  EXPECT_EQ(s.max_response_len, 4);
  EXPECT_EQ(aggregation_scale({mask()}).max_response_len, 3);  // defaults to the widest mask
  // bool masks work too
  EXPECT_EQ(aggregation_scale({mask() > 0}).global_tokens, 3.0);
}

TEST(LossAggregation, HandComputedValuesOfEveryMode) {
  const AggregationScale s = aggregation_scale({mask()}, 4);
  // sum(L*M) = 1 + 2 + 4 = 7 (the NaN is masked out and must not leak)
  EXPECT_DOUBLE_EQ(value(aggregate_loss(losses(), mask(), LossAggregation::kTokenMean, s)), 7.0 / 3.0);
  // per-sequence means (1+2)/2 = 1.5 and 4/1 = 4, over 2 non-empty sequences: 5.5 / 2
  EXPECT_DOUBLE_EQ(value(aggregate_loss(losses(), mask(), LossAggregation::kSeqMeanTokenMean, s)), 2.75);
  // 7 / 2 sequences
  EXPECT_DOUBLE_EQ(value(aggregate_loss(losses(), mask(), LossAggregation::kSeqMeanTokenSum, s)), 3.5);
  // Dr.GRPO: 7 / (3 rows * 4)
  EXPECT_DOUBLE_EQ(value(aggregate_loss(losses(), mask(), LossAggregation::kSeqMeanTokenSumNorm, s)), 7.0 / 12.0);
}

TEST(LossAggregation, EmptyBatchGivesZeroNotNaN) {
  const at::Tensor m = at::zeros({2, 3}, at::kDouble);
  const AggregationScale s = aggregation_scale({m});
  for (LossAggregation mode : kModes) {
    const double v = value(aggregate_loss(at::full({2, 3}, NAN, at::kDouble), m, mode, s));
    EXPECT_EQ(v, 0.0) << grpo::core::to_string(mode);
  }
}

TEST(LossAggregation, MicroBatchLossesSumToTheFullBatchLoss) {
  // Rows {0} and {1, 2} as two micro-batches, with the scale of the whole batch.
  const at::Tensor L = losses(), M = mask();
  const AggregationScale s = aggregation_scale({M.narrow(0, 0, 1), M.narrow(0, 1, 2)}, 4);
  for (LossAggregation mode : kModes) {
    const double full = value(aggregate_loss(L, M, mode, s));
    const double parts = value(aggregate_loss(L.narrow(0, 0, 1), M.narrow(0, 0, 1), mode, s)) +
                         value(aggregate_loss(L.narrow(0, 1, 2), M.narrow(0, 1, 2), mode, s));
    EXPECT_NEAR(parts, full, 1e-15) << grpo::core::to_string(mode);
  }
  // A per-micro-batch denominator would not: token-mean of {0} is 1.5, of {1,2} is 4 -> 5.5/2 != 7/3.
}

TEST(LossAggregation, MergeScalesAddsCountsAndTakesMaxLength) {
  AggregationScale a{3, 2, 3, 5}, b{4, 1, 2, 7};
  const AggregationScale m = grpo::core::merge_scales(a, b);
  EXPECT_EQ(m.global_tokens, 7.0);
  EXPECT_EQ(m.global_sequences, 3.0);
  EXPECT_EQ(m.global_rows, 5.0);
  EXPECT_EQ(m.max_response_len, 7);
}

// ---- invariance of the accumulated gradient -------------------------------------------------

struct Problem {
  at::Tensor logp0, old, adv, mask;  // [8, 6] double; sequences of lengths 6,1,3,0,5,2,4,6
};

Problem problem() {
  at::manual_seed(1234);
  Problem p;
  const int64_t B = 8, T = 6;
  p.logp0 = -at::rand({B, T}, at::kDouble) * 3.0;
  p.old = p.logp0 + 0.2 * at::randn({B, T}, at::kDouble);
  p.adv = at::randn({B, 1}, at::kDouble).expand({B, T}).contiguous();
  const std::vector<int64_t> lengths = {6, 1, 3, 0, 5, 2, 4, 6};
  p.mask = at::zeros({B, T}, at::kDouble);
  for (int64_t b = 0; b < B; ++b) p.mask[b].narrow(0, 0, lengths[b]).fill_(1.0);
  return p;
}

// -A * exp(logp - old), the small differentiable per-token loss.
at::Tensor per_token(const at::Tensor& logp, const at::Tensor& old, const at::Tensor& adv) { return -adv * at::exp(logp - old); }

// Accumulated gradient with `chunks` micro-batches of equal size, each trimmed to its own
// longest response (as a packer/collator would), split across `ranks` simulated ranks whose
// local scales are merged (the all-reduce).
at::Tensor accumulated_grad(const Problem& p, LossAggregation mode, int64_t chunks, int64_t ranks = 1) {
  at::Tensor logp = p.logp0.clone().requires_grad_(true);
  const int64_t B = p.logp0.size(0), per = B / chunks;
  struct Micro { int64_t start, width; };
  std::vector<Micro> micro;
  for (int64_t c = 0; c < chunks; ++c) {
    const at::Tensor m = p.mask.narrow(0, c * per, per);
    const int64_t width = std::max<int64_t>(1, (m.sum(0) > 0).sum().item<int64_t>());
    micro.push_back({c * per, width});
  }
  auto mask_of = [&](const Micro& u) { return p.mask.narrow(0, u.start, per).narrow(1, 0, u.width); };
  // Each rank computes the scale of its own micro-batches; the merge is the all-reduce.
  AggregationScale scale;
  const int64_t per_rank = chunks / ranks;
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<at::Tensor> masks;
    for (int64_t c = r * per_rank; c < (r + 1) * per_rank; ++c) masks.push_back(mask_of(micro[c]));
    scale = grpo::core::merge_scales(scale, aggregation_scale(masks, /*max_response_len=*/6));
  }
  for (const Micro& u : micro) {
    auto cut = [&](const at::Tensor& x) { return x.narrow(0, u.start, per).narrow(1, 0, u.width); };
    aggregate_loss(per_token(cut(logp), cut(p.old), cut(p.adv)), mask_of(u), mode, scale).backward();
  }
  return logp.grad();
}

// Independent reference: the full-batch formula written out directly for each mode.
at::Tensor reference_grad(const Problem& p, LossAggregation mode) {
  at::Tensor logp = p.logp0.clone().requires_grad_(true);
  const at::Tensor LM = per_token(logp, p.old, p.adv) * p.mask;
  const at::Tensor lens = p.mask.sum(1);
  at::Tensor loss;
  switch (mode) {
    case LossAggregation::kTokenMean: loss = LM.sum() / p.mask.sum(); break;  // / 27 tokens
    case LossAggregation::kSeqMeanTokenMean: {
      const at::Tensor nonempty = lens > 0;  // 7 of 8
      loss = (LM.sum(1).index({nonempty}) / lens.index({nonempty})).mean();
      break;
    }
    case LossAggregation::kSeqMeanTokenSum: loss = LM.sum() / 7.0; break;
    case LossAggregation::kSeqMeanTokenSumNorm: loss = LM.sum() / (8.0 * 6.0); break;
  }
  loss.backward();
  return logp.grad();
}

TEST(LossAggregationInvariance, SameGradientFor1_2_4MicroBatchesAndRanks) {
  const Problem p = problem();
  ASSERT_EQ(p.mask.sum().item<double>(), 27.0);
  for (LossAggregation mode : kModes) {
    const at::Tensor ref = reference_grad(p, mode);
    ASSERT_GT(ref.abs().sum().item<double>(), 0.0);
    for (int64_t chunks : {1, 2, 4}) {
      const at::Tensor g = accumulated_grad(p, mode, chunks);
      EXPECT_TRUE(at::allclose(g, ref, 0.0, 1e-6)) << grpo::core::to_string(mode) << " chunks " << chunks;
      EXPECT_LT((g - ref).abs().max().item<double>(), 1e-12) << grpo::core::to_string(mode) << " chunks " << chunks;
    }
    // 4 micro-batches over 2 ranks (2 each): the sum over ranks is the full-batch gradient.
    EXPECT_LT((accumulated_grad(p, mode, 4, 2) - ref).abs().max().item<double>(), 1e-12) << grpo::core::to_string(mode);
  }
}

TEST(LossAggregationInvariance, PerMicroBatchDenominatorWouldDiffer) {
  // Guard that the test problem is sensitive: averaging per-micro-batch token means (the bug
  // the global denominator fixes) gives a different gradient.
  const Problem p = problem();
  at::Tensor logp = p.logp0.clone().requires_grad_(true);
  for (int64_t c = 0; c < 4; ++c) {
    auto cut = [&](const at::Tensor& x) { return x.narrow(0, 2 * c, 2); };
    const at::Tensor m = cut(p.mask);
    ((per_token(cut(logp), cut(p.old), cut(p.adv)) * m).sum() / m.sum() / 4.0).backward();
  }
  EXPECT_GT((logp.grad() - reference_grad(p, LossAggregation::kTokenMean)).abs().max().item<double>(), 1e-3);
}

}  // namespace
