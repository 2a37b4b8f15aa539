// LoRA on the device under test (docs/lora.md): a bfloat16 base with float32 adapters, and a
// bf16-mixed training step, against float32 on the CPU, on the independent LoRA fixture
// (tests/fixtures/lora/qwen2_all_linear: non-zero adapters over the qwen2 fixture model).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/lora.h"
#include "core/model/precision.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::cosine;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;
using grpo::testing::max_abs_diff;

namespace {

const std::string kAdapter = grpo::testing::repo_dir() + "/tests/fixtures/lora/qwen2_all_linear";

torch::Tensor fixture_ids() {
  for (auto& [k, t] : core::load_safetensors(kAdapter + "/reference.safetensors"))
    if (k == "input_ids") return t;
  throw std::runtime_error("no input_ids");
}

torch::Tensor logits_of(core::CausalLM& model, const torch::Tensor& ids) {
  const torch::Tensor input = ids.view({1, -1}).to(model->lm_head_weight().device());
  return model->forward(input, core::AttentionLayout::padded(torch::ones_like(input)))[0].to(torch::kCPU, torch::kFloat);
}

// The qwen2 fixture in `dtype` on `device` with the fixture's adapter loaded (float32 adapters).
struct Adapted {
  core::LoadedModel model;
  std::unique_ptr<core::LoraAdapters> lora;
};
Adapted adapted_fixture(torch::Dtype dtype, torch::Device device) {
  Adapted a;
  a.model = core::load_model(fixture_dir("qwen2"), dtype, device);
  a.lora = std::make_unique<core::LoraAdapters>(a.model.model, core::read_peft_adapter_config(kAdapter).settings, 0);
  a.lora->load_peft_folder(kAdapter);
  return a;
}

torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(0);
  const torch::Tensor lp = torch::log_softmax(logits.narrow(0, 0, T - 1).to(torch::kFloat), -1);
  return -lp.gather(1, ids.narrow(0, 1, T - 1).view({-1, 1}).to(lp.device())).mean();
}

}  // namespace

// bf16 base weights on the device, float32 adapters: the adapters stay float32 and on the
// device, and the logits follow the float32 CPU model within bf16's rounding (logits up to ~5,
// bf16's 2^-9 relative rounding through two layers: ~0.1; a dropped adapter moves them by ~7).
TEST(LoraGpu, Bf16BaseWithFloat32AdaptersFollowsFloat32) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  const torch::Tensor ids = fixture_ids();
  Adapted cpu = adapted_fixture(torch::kFloat, torch::kCPU), dev = adapted_fixture(torch::kBFloat16, device);
  for (const auto& p : dev.lora->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat);
    EXPECT_EQ(p.device(), device);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor want = logits_of(cpu.model.model, ids), got = logits_of(dev.model.model, ids);
  EXPECT_LT(max_abs_diff(got, want), 0.25);
  EXPECT_GT(cosine(got.flatten(), want.flatten()), 0.999);
  // The merged weights for a bf16 engine, made on the device, equal the CPU's merge rounded to bf16.
  const auto merged_dev = dev.lora->merged_weights(torch::kBFloat16);
  const auto merged_cpu = cpu.lora->merged_weights();
  ASSERT_EQ(merged_dev.size(), merged_cpu.size());
  for (std::size_t i = 0; i < merged_dev.size(); ++i) {
    EXPECT_EQ(merged_dev[i].second.device(), device);
    // The device's base is bf16 already: W_bf16 + s B A, rounded once more to bf16.
    EXPECT_LT(max_abs_diff(merged_dev[i].second.to(torch::kCPU, torch::kFloat), merged_cpu[i].second),
              0.02 * merged_cpu[i].second.abs().max().item<double>())
        << merged_dev[i].first;
  }
}

// One bf16-mixed training step on the device (float32 base and adapters, bf16 matmuls): only the
// adapters get gradients, and they point where the float32 CPU gradients point.
TEST(LoraGpu, Bf16MixedStepTrainsOnlyTheAdapters) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  const torch::Tensor ids = fixture_ids();
  Adapted cpu = adapted_fixture(torch::kFloat, torch::kCPU), dev = adapted_fixture(torch::kFloat, device);
  auto backward = [&](core::CausalLM& model) {
    const torch::Tensor input = ids.view({1, -1}).to(model->lm_head_weight().device());
    next_token_loss(model->forward(input, core::AttentionLayout::padded(torch::ones_like(input)))[0], ids).backward();
  };
  backward(cpu.model.model);
  {
    const core::ComputePrecisionScope scope(core::Precision::kBf16Mixed, device);
    backward(dev.model.model);
  }
  for (const auto& p : dev.model.model->named_parameters()) EXPECT_FALSE(p.value().grad().defined()) << p.key();
  std::vector<torch::Tensor> want, got;
  const auto a = cpu.lora->parameters(), b = dev.lora->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].grad().defined());
    EXPECT_EQ(b[i].grad().scalar_type(), torch::kFloat);
    want.push_back(a[i].grad().flatten());
    got.push_back(b[i].grad().to(torch::kCPU).flatten());
  }
  EXPECT_GT(cosine(torch::cat(got), torch::cat(want)), 0.99);
}
