// dist::Parallelism (core/dist/parallelism.h), the seam the step loop trains through: its trivial
// form in one process, and what each dist.sharding mode gives two Gloo ranks (threads of this
// process, each with its own copy of a fixture model). The end-to-end runs of every mode (the
// same weights as one process, exact resume) are in test_data_parallel.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/dist/parallelism.h"
#include "core/dist/process_group.h"
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "tests/support/fixture_models.h"
#include "tests/support/gloo_ranks.h"

namespace {

using namespace grpo::core;
namespace dist = grpo::core::dist;

const grpo::sdk::ConfigValue& no_config() {
  static const grpo::sdk::ConfigValue config = grpo::sdk::ConfigValue::make_map();
  return config;
}

bool has_metric(const MetricList& m, const std::string& name) {
  for (const auto& kv : m)
    if (kv.first == name) return true;
  return false;
}

// Every parameter holds values (its storage is allocated).
bool every_parameter_present(CausalLM& model) {
  for (const auto& p : model->parameters())
    if (p.storage().nbytes() == 0) return false;
  return true;
}

// One process: AdamW over every weight, and every operation the identity or nothing.
TEST(Parallelism, OneProcessIsTheTrivialForm) {
  LoadedModel m = load_model(grpo::testing::fixture_dir("qwen2"));
  dist::Parallelism p(m.model, nullptr, OptimizerSettings{}, dist::Sharding::kFull, nullptr, no_config());
  p.start();
  EXPECT_FALSE(p.data_parallel());
  EXPECT_EQ(p.communicator(), nullptr);
  EXPECT_EQ(p.rank(), 0);
  EXPECT_EQ(p.world_size(), 1);
  EXPECT_TRUE(p.is_main());
  EXPECT_FALSE(p.optimizer_per_rank());  // dist.sharding without ranks: warned, unsharded
  EXPECT_NE(dynamic_cast<grpo::core::AdamW*>(&p.optimizer()), nullptr);
  EXPECT_EQ(p.trainable_parameters().size(), m.model->parameters().size());
  EXPECT_EQ(p.matched_passes(3), 3u);
  EXPECT_EQ(p.sum_over_ranks(2.5, "x"), 2.5);
  std::vector<at::Tensor> t{torch::tensor({1.0, 2.0}, torch::kFloat64)};
  p.sum_over_ranks(t, "x");
  EXPECT_TRUE(torch::equal(t[0], torch::tensor({1.0, 2.0}, torch::kFloat64)));
  EXPECT_EQ(p.gradient_buckets(), 0u);
  EXPECT_EQ(p.finish_gradients(), 0.0);
  { const auto whole = p.whole_model(); }
  EXPECT_TRUE(every_parameter_present(m.model));
  MetricList metrics{{"loss", 1.0}};
  p.add_memory_metrics(metrics);
  EXPECT_TRUE(has_metric(metrics, "memory/optimizer_state_mib"));
  EXPECT_FALSE(has_metric(metrics, "memory/parameters_at_rest_mib"));
  EXPECT_EQ(p.reduce_step_metrics(metrics, 1.0, "step").size(), metrics.size());  // unchanged
}

// dist.sharding full on two ranks: values at rest are this rank's chunks; a WholeModel scope
// gathers them on every rank (the fixture's own values) and frees them after; passes are matched
// to the rank with the most; sums are over both ranks.
TEST(Parallelism, ShardedValuesAreWholeOnlyInsideAScope) {
  grpo::testing::run_two_ranks(
      [&](int rank, dist::Distributed& d) {
        LoadedModel m = load_model(grpo::testing::fixture_dir("qwen2"));
        LoadedModel reference = load_model(grpo::testing::fixture_dir("qwen2"));
        dist::Parallelism p(m.model, nullptr, OptimizerSettings{}, dist::Sharding::kFull, &d, no_config());
        p.start();
        EXPECT_TRUE(p.data_parallel());
        EXPECT_TRUE(p.optimizer_per_rank());
        EXPECT_EQ(p.world_size(), 2);
        EXPECT_EQ(p.is_main(), rank == 0);
        EXPECT_GT(p.gradient_buckets(), 0u);
        for (const auto& q : m.model->parameters()) EXPECT_EQ(q.storage().nbytes(), 0u);  // at rest
        {
          const auto whole = p.whole_model();
          const auto ours = m.model->named_parameters();
          for (const auto& kv : reference.model->named_parameters())
            EXPECT_TRUE(torch::equal(ours[kv.key()], kv.value())) << kv.key();
          // Nested scopes keep the values until the outermost ends.
          { const auto inner = p.whole_model(); }
          EXPECT_TRUE(every_parameter_present(m.model));
        }
        for (const auto& q : m.model->parameters()) EXPECT_EQ(q.storage().nbytes(), 0u);
        {
          // Rank 1 alone needs it: both gather (a collective on both).
          const auto whole = p.whole_model_if_any_rank(rank == 1, "test passes");
          EXPECT_TRUE(every_parameter_present(m.model));
        }
        {
          const auto none = p.whole_model_if_any_rank(false, "test passes");
          for (const auto& q : m.model->parameters()) EXPECT_EQ(q.storage().nbytes(), 0u);
        }
        EXPECT_EQ(p.matched_passes(rank == 0 ? 1u : 3u), 3u);
        EXPECT_EQ(p.sum_over_ranks(static_cast<double>(rank + 1), "ranks"), 3.0);
        MetricList metrics;
        p.add_memory_metrics(metrics);
        EXPECT_TRUE(has_metric(metrics, "memory/parameters_at_rest_mib"));
      },
      0.2, 60);
}

// dist.sharding optimizer: the optimizer state is per rank, the values stay whole, and a pass
// has no collective of its own (each rank runs its own count).
TEST(Parallelism, ShardedOptimizerStateLeavesTheValuesWhole) {
  grpo::testing::run_two_ranks(
      [&](int rank, dist::Distributed& d) {
        LoadedModel m = load_model(grpo::testing::fixture_dir("qwen2"));
        dist::Parallelism p(m.model, nullptr, OptimizerSettings{}, dist::Sharding::kOptimizer, &d, no_config());
        p.start();
        EXPECT_TRUE(p.optimizer_per_rank());
        EXPECT_TRUE(every_parameter_present(m.model));
        EXPECT_EQ(p.matched_passes(rank == 0 ? 1u : 3u), rank == 0 ? 1u : 3u);
        MetricList metrics;
        p.add_memory_metrics(metrics);
        EXPECT_FALSE(has_metric(metrics, "memory/parameters_at_rest_mib"));
      },
      0.2, 60);
}

// Replicated data parallel (dist.sharding none): AdamW on every rank, one checkpoint by rank 0.
TEST(Parallelism, ReplicatedDataParallelSavesOneOptimizerState) {
  grpo::testing::run_two_ranks(
      [&](int, dist::Distributed& d) {
        LoadedModel m = load_model(grpo::testing::fixture_dir("qwen2"));
        dist::Parallelism p(m.model, nullptr, OptimizerSettings{}, dist::Sharding::kNone, &d, no_config());
        p.start();
        EXPECT_FALSE(p.optimizer_per_rank());
        EXPECT_NE(dynamic_cast<grpo::core::AdamW*>(&p.optimizer()), nullptr);
        EXPECT_GT(p.gradient_buckets(), 0u);
        EXPECT_EQ(p.matched_passes(2), 2u);
      },
      0.2, 60);
}

}  // namespace
