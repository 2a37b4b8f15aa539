// run.deterministic (core::use_deterministic_algorithms) on the device under test: the same
// training step twice from the same weights — bf16-mixed forward and backward through the
// attention kernels auto picks, the MoE block, the fused AdamW step — gives bit-identical
// weights. Without the mode, atomics-based kernels (flash and memory-efficient attention's
// backward, index_add_, cuBLAS's split-K workspaces) may sum in another order each run.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "core/model/checkpoint.h"
#include "core/model/precision.h"
#include "core/optim/optimizer.h"
#include "core/train/packing.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;

namespace {

class DeterministicMode : public ::testing::TestWithParam<std::string> {};

std::map<std::string, torch::Tensor> one_step(const std::string& model_name, const grpo::testing::TokenBatch& batch) {
  const torch::Device device = device_under_test();
  core::LoadedModel m = core::load_model(fixture_dir(model_name), torch::kFloat32, device);
  m.model->train();
  core::OptimizerSettings settings;
  settings.learning_rate = 1e-3;
  auto optimizer = core::make_adamw(*m.model, settings);
  optimizer->zero_grad();
  {
    const core::ComputePrecisionScope scope(core::Precision::kBf16Mixed, device);
    const torch::Tensor lp = core::packed_response_logprobs(m.model, batch.sequences(), batch.width, {}).logprobs;
    const torch::Tensor mask = batch.mask().to(device);
    (-(lp * mask).sum() / mask.sum()).backward();
  }
  optimizer->step();
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.model->named_parameters()) out[p.key()] = p.value().detach().to(torch::kCPU).clone();
  return out;
}

}  // namespace

TEST_P(DeterministicMode, TwoTrainingStepsAreBitIdentical) {
  GRPO_SKIP_WITHOUT_DEVICE();
  core::use_deterministic_algorithms(true);
  struct Restore {
    ~Restore() { core::use_deterministic_algorithms(false); }
  } restore;
  const auto batch =
      grpo::testing::random_batch(8, core::load_model_config(fixture_dir(GetParam()) + "/config.json").vocab_size, 31);
  const auto first = one_step(GetParam(), batch);
  const auto second = one_step(GetParam(), batch);
  ASSERT_EQ(first.size(), second.size());
  for (const auto& [name, w] : first) EXPECT_TRUE(w.equal(second.at(name))) << name << " differs between the two runs";
}

// A dense family (flash/sdpa attention when not deterministic), Gemma 2 (soft-capping: eager),
// and a mixture of experts (index_add_, the router).
INSTANTIATE_TEST_SUITE_P(Fixtures, DeterministicMode, ::testing::Values("qwen2", "gemma2", "qwen3_moe"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
