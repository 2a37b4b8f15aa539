// The engine's CUDA graphs (plugins/backends/native/bucketed_decoder.h) against the same
// fixed-shape steps run eagerly: the graphs replay exactly the kernels the eager steps launch,
// so tokens and log-probs must be bit for bit the same, greedy and sampled, across buckets
// (samples of different lengths leave the batch at different steps), after the weights change
// in place (a replay reads them where they are) and after they move to new storage (graphs
// captured again). The eager steps themselves are held to naive full recomputation on the CPU by
// tests/plugins/backends/native/test_bucketed_decoder.cpp, and graphs to float32 on the CPU by
// Bf16Greedy (test_greedy_parity.cpp), which decodes with the default decode_steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "plugins/backends/native/engine.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::native::DecodeSteps;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;

namespace {

// Twelve requests: greedy and sampled (seeded, two samples each), 6..39 new tokens, so the live
// rows shrink through several buckets.
std::vector<sdk::GenerationRequest> requests_for(std::int64_t vocab) {
  auto gen = at::detail::createCPUGenerator(5);
  std::vector<sdk::GenerationRequest> out;
  for (int i = 0; i < 12; ++i) {
    sdk::GenerationRequest r;
    r.id = "p" + std::to_string(i);
    const std::int64_t len = 2 + (i * 7) % 23;
    const auto t = at::randint(3, vocab, {len}, gen, torch::kLong);
    r.prompt_ids.assign(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + len);
    r.seed = 100 + i;
    r.n = i % 2 == 0 ? 1 : 2;
    r.sampling.temperature = i % 2 == 0 ? 0.0 : 0.8;
    r.sampling.top_k = i % 2 == 0 ? -1 : 20;
    r.sampling.max_new_tokens = 6 + (i * 3) % 34;
    out.push_back(std::move(r));
  }
  return out;
}

void expect_identical(const std::vector<sdk::GenerationResult>& graphs, const std::vector<sdk::GenerationResult>& eager) {
  ASSERT_EQ(graphs.size(), eager.size());
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    ASSERT_TRUE(graphs[i].status.is_ok()) << graphs[i].status.message();
    ASSERT_TRUE(eager[i].status.is_ok()) << eager[i].status.message();
    ASSERT_EQ(graphs[i].samples.size(), eager[i].samples.size());
    for (std::size_t j = 0; j < graphs[i].samples.size(); ++j) {
      EXPECT_EQ(graphs[i].samples[j].token_ids, eager[i].samples[j].token_ids) << "request " << i << " sample " << j;
      EXPECT_EQ(graphs[i].samples[j].logprobs, eager[i].samples[j].logprobs) << "request " << i << " sample " << j;
    }
  }
}

class DecodeGraphs : public ::testing::TestWithParam<std::string> {};

std::string model_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

TEST_P(DecodeGraphs, ReplaysEqualTheSameStepsRunEagerly) {
  GRPO_SKIP_WITHOUT_DEVICE();
  torch::NoGradGuard no_grad;
  const torch::Device device = device_under_test();
  core::LoadedModel loaded = core::load_model(fixture_dir(GetParam()), torch::kBFloat16, device);
  auto engine_with = [&](DecodeSteps steps) {
    native::EngineOptions options;
    options.max_num_seqs = 8;
    options.ignore_eos = true;
    options.decode_steps = steps;
    return native::Engine(loaded.model, std::nullopt, loaded.config.eos_token_ids, options);
  };
  native::Engine graphs = engine_with(DecodeSteps::kGraphs), eager = engine_with(DecodeSteps::kBucketed);
  const auto requests = requests_for(loaded.config.vocab_size);
  expect_identical(graphs.generate(requests), eager.generate(requests));
  const native::EngineStats first = graphs.last_stats();
  if (device.is_cuda()) {
    EXPECT_EQ(first.decode_mode, DecodeSteps::kGraphs);
    EXPECT_GE(first.graphs_captured, 3);  // buckets 8, then smaller ones as samples finish
    EXPECT_GT(first.graph_replays, first.decode_steps / 2);
  }

  // Weights changed in place (an optimizer step): the captured graphs read the new values.
  loaded.model->lm_head_weight().mul_(0.5);
  for (auto& p : loaded.model->parameters()) p.add_(0.01 * p.sign());
  expect_identical(graphs.generate(requests), eager.generate(requests));
  if (device.is_cuda()) EXPECT_EQ(graphs.last_stats().graphs_captured, 0);  // the same graphs, replayed

  // Weights moved into new storage (a reload): the graphs are captured again.
  for (auto& p : loaded.model->parameters()) p.set_(p.clone());
  expect_identical(graphs.generate(requests), eager.generate(requests));
  if (device.is_cuda()) EXPECT_GE(graphs.last_stats().graphs_captured, 3);
}

// Families without length-dependent RoPE (those decode with dynamic steps); on CUDA the MoE ones run
// their experts as grouped matrix products (core/model/moe.h), which read nothing back to the host
// (on the CPU they keep dynamic steps, both engines alike).
INSTANTIATE_TEST_SUITE_P(Fixtures, DecodeGraphs,
                         ::testing::Values("qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3", "olmo2", "qwen2_moe",
                                           "qwen3_moe"),
                         model_name);
