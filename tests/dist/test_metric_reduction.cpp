// Metrics reduced over ranks: each rule against a hand computation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dist/metric_reduction.h"

namespace {

using grpo::core::MetricList;
using grpo::core::dist::decode_metrics;
using grpo::core::dist::encode_metrics;
using grpo::core::dist::merge_rank_metrics;
using grpo::core::dist::metric_reduction;
using grpo::core::dist::MetricReduction;

double value(const MetricList& m, const std::string& name) {
  for (const auto& [n, v] : m)
    if (n == name) return v;
  ADD_FAILURE() << name << " missing";
  return NAN;
}

TEST(MetricReduction, KindsFollowTheName) {
  EXPECT_EQ(metric_reduction("time/generation"), MetricReduction::kMax);
  EXPECT_EQ(metric_reduction("val/advantages_max"), MetricReduction::kMean);  // a mean of per-rank maxima is not meant
  EXPECT_EQ(metric_reduction("sampling/ratio/max"), MetricReduction::kMax);
  EXPECT_EQ(metric_reduction("sampling/ratio/min"), MetricReduction::kMin);
  EXPECT_EQ(metric_reduction("eval/prompts"), MetricReduction::kSum);
  EXPECT_EQ(metric_reduction("rollout/tokens_per_second"), MetricReduction::kSum);
  EXPECT_EQ(metric_reduction("other/zero_std_groups_dropped"), MetricReduction::kSum);
  EXPECT_EQ(metric_reduction("objective/scores"), MetricReduction::kMean);
}

TEST(MetricReduction, MergesByKindWithWeights) {
  // Rank 0: 3 prompts, rank 1: 1 prompt.
  const MetricList r0{{"objective/scores", 0.5}, {"time/step", 2.0}, {"eval/prompts", 3}, {"x/min", 4}, {"only/rank0", 7}};
  const MetricList r1{{"objective/scores", 1.0}, {"time/step", 3.0}, {"eval/prompts", 1}, {"x/min", -1}, {"only/rank1", 9}};
  const MetricList m = merge_rank_metrics({r0, r1}, {3.0, 1.0});
  EXPECT_DOUBLE_EQ(value(m, "objective/scores"), (0.5 * 3 + 1.0 * 1) / 4);  // 0.625
  EXPECT_DOUBLE_EQ(value(m, "time/step"), 3.0);
  EXPECT_DOUBLE_EQ(value(m, "eval/prompts"), 4.0);
  EXPECT_DOUBLE_EQ(value(m, "x/min"), -1.0);
  EXPECT_DOUBLE_EQ(value(m, "only/rank0"), 7.0);  // reduced over the ranks that report it
  EXPECT_DOUBLE_EQ(value(m, "only/rank1"), 9.0);
  // Rank 0's order first, then names only later ranks have.
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].first, "objective/scores");
  EXPECT_EQ(m[5].first, "only/rank1");
}

TEST(MetricReduction, ZeroWeightRanksFallBackToThePlainMean) {
  const MetricList m = merge_rank_metrics({{{"a", 1.0}}, {{"a", 3.0}}}, {0.0, 0.0});
  EXPECT_DOUBLE_EQ(value(m, "a"), 2.0);
}

TEST(MetricReduction, NanInAMaxStaysNan) {
  const MetricList m = merge_rank_metrics({{{"time/x", NAN}}, {{"time/x", 1.0}}}, {1, 1});
  EXPECT_TRUE(std::isnan(value(m, "time/x")));
}

TEST(MetricReduction, EncodingRoundTripsExactly) {
  const MetricList in{{"a/b", 0.1}, {"", -0.0}, {"c", 1e308}, {"d", std::nextafter(1.0, 2.0)}};
  double w = 0;
  const MetricList out = decode_metrics(encode_metrics(in, 2.5), &w);
  EXPECT_EQ(w, 2.5);
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second, in[i].second);
  }
  const std::string bytes = encode_metrics(in, 1.0);
  EXPECT_THROW(decode_metrics(bytes.substr(0, bytes.size() - 3), nullptr), std::runtime_error);
  EXPECT_THROW(decode_metrics(bytes + "x", nullptr), std::runtime_error);
}

}  // namespace
