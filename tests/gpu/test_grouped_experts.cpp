// The two ways a mixture-of-experts block runs its experts (core/model/moe.h) against each
// other, on the MoE fixtures' own expert weights and rows routed unevenly (some experts get
// none): the grouped matrix products must give what each expert's MLP gives on its slice,
// forward and backward. On the CPU in float32 both end in the same matrix products, so they
// agree bit for bit; on the device under test in bf16-mixed (the training precision) the
// grouped kernel and cuBLAS round differently, within bf16's error. The whole model with
// grouped experts is held to float32 on the CPU by Bf16MixedParity and Bf16Greedy, and its
// decode graphs to eager steps by DecodeGraphs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/device_info.h"
#include "core/model/lora.h"
#include "core/model/moe.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;

namespace {

// The MoE blocks of a fixture, in layer order.
std::vector<core::SparseMoeBlock> moe_blocks(core::CausalLM& model) {
  std::vector<core::SparseMoeBlock> out;
  for (const auto& m : model->modules(/*include_self=*/false))
    if (auto block = std::dynamic_pointer_cast<core::SparseMoeBlockImpl>(m)) out.emplace_back(block);
  return out;
}

// Rows sorted by expert: expert e gets (3e + 5) mod 8 rows (5, 0, 3, 6, 1, 4, 7, 2 for eight
// experts), so expert 1 gets none and the first and last groups are both non-empty.
struct Routed {
  torch::Tensor rows;  // [M, hidden]
  torch::Tensor ends;  // [E] int32, cumulative
};

Routed routed_rows(std::int64_t experts, std::int64_t hidden, const torch::Device& device, std::uint64_t seed) {
  std::vector<std::int32_t> ends;
  std::int32_t total = 0;
  for (std::int64_t e = 0; e < experts; ++e) {
    total += static_cast<std::int32_t>((3 * e + 5) % 8);
    ends.push_back(total);
  }
  auto gen = at::detail::createCPUGenerator(seed);
  Routed r;
  r.rows = at::randn({total, hidden}, gen, torch::kFloat32).to(device);
  r.ends = torch::tensor(ends, torch::kInt32).to(device);
  return r;
}

// Forward output, the rows' gradient and the experts' weight gradients of one way, for the
// upstream gradient `upstream`.
struct Pass {
  torch::Tensor out, rows_grad;
  std::vector<torch::Tensor> weight_grads;
};

template <typename Run>
Pass run_pass(core::SparseMoeBlock& block, const Routed& routed, const torch::Tensor& upstream, Run run) {
  for (auto& p : block->experts->parameters()) p.mutable_grad() = torch::Tensor();
  const torch::Tensor rows = routed.rows.clone().requires_grad_(true);
  Pass pass;
  pass.out = run(block->experts, rows, routed.ends);
  (pass.out.to(torch::kFloat32) * upstream).sum().backward();
  pass.rows_grad = rows.grad();
  for (auto& p : block->experts->parameters()) pass.weight_grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return pass;
}

class GroupedExperts : public ::testing::TestWithParam<std::string> {};

std::string model_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

// Float32 on the CPU: the same products, so the same bits (forward and both gradients).
TEST_P(GroupedExperts, Float32OnTheCpuEqualsEachExpertsMlpBitForBit) {
  if (!core::grouped_experts_compiled()) GTEST_SKIP() << "this LibTorch has no _grouped_mm (2.9 and later)";
  core::LoadedModel loaded = core::load_model(fixture_dir(GetParam()), torch::kFloat32, torch::kCPU);
  auto blocks = moe_blocks(loaded.model);
  ASSERT_FALSE(blocks.empty());
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    auto& block = blocks[b];
    const std::int64_t experts = static_cast<std::int64_t>(block->experts->size());
    const Routed routed = routed_rows(experts, loaded.config.hidden_size, torch::kCPU, 40 + b);
    ASSERT_EQ(core::grouped_experts_unsupported(block->experts, routed.rows), "");
    const torch::Tensor upstream = torch::randn({routed.rows.size(0), loaded.config.hidden_size});
    const Pass grouped = run_pass(block, routed, upstream, core::run_experts_grouped);
    const Pass looped = run_pass(block, routed, upstream, core::run_experts_looped);
    EXPECT_TRUE(torch::equal(grouped.out, looped.out)) << "layer block " << b << ": max |diff| "
                                                       << grpo::testing::max_abs_diff(grouped.out, looped.out);
    EXPECT_TRUE(torch::equal(grouped.rows_grad, looped.rows_grad))
        << "max |diff| " << grpo::testing::max_abs_diff(grouped.rows_grad, looped.rows_grad);
    ASSERT_EQ(grouped.weight_grads.size(), looped.weight_grads.size());
    for (std::size_t i = 0; i < grouped.weight_grads.size(); ++i)
      EXPECT_TRUE(torch::equal(grouped.weight_grads[i], looped.weight_grads[i]))
          << "expert parameter " << i << ": max |diff| " << grpo::testing::max_abs_diff(grouped.weight_grads[i], looped.weight_grads[i]);
  }
}

// bf16-mixed on the device under test (float32 weights, autocast to bf16): the grouped kernel
// against each expert's cuBLAS products. Both take bf16 operands and accumulate in float32, so
// they differ by the roundings of the bf16 intermediates (gate, up and their product, relative
// 2^-9 each): relative RMS differences of a few 1e-3; a wrong slice, a transposed weight or a
// missed expert is off by O(1).
TEST_P(GroupedExperts, Bf16MixedOnTheDeviceMatchesEachExpertsMlp) {
  GRPO_SKIP_WITHOUT_DEVICE();
  if (!core::grouped_experts_compiled()) GTEST_SKIP() << "this LibTorch has no _grouped_mm (2.9 and later)";
  const torch::Device device = device_under_test();
  core::LoadedModel loaded = core::load_model(fixture_dir(GetParam()), torch::kFloat32, device);
  const core::ComputePrecisionScope bf16_mixed(core::Precision::kBf16Mixed, device);
  auto blocks = moe_blocks(loaded.model);
  ASSERT_FALSE(blocks.empty());
  auto relative_rms = [](const torch::Tensor& a, const torch::Tensor& b) {
    const auto x = grpo::testing::host_f64(a), y = grpo::testing::host_f64(b);
    return ((x - y).pow(2).mean().sqrt() / y.pow(2).mean().sqrt()).item<double>();
  };
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    auto& block = blocks[b];
    const std::int64_t experts = static_cast<std::int64_t>(block->experts->size());
    const Routed routed = routed_rows(experts, loaded.config.hidden_size, device, 60 + b);
    ASSERT_EQ(core::grouped_experts_unsupported(block->experts, routed.rows), "");
    const torch::Tensor upstream = torch::randn({routed.rows.size(0), loaded.config.hidden_size}).to(device);
    const Pass grouped = run_pass(block, routed, upstream, core::run_experts_grouped);
    const Pass looped = run_pass(block, routed, upstream, core::run_experts_looped);
    EXPECT_EQ(grouped.out.scalar_type(), torch::kBFloat16);
    EXPECT_LT(relative_rms(grouped.out, looped.out), 1e-2) << "block " << b;
    EXPECT_LT(relative_rms(grouped.rows_grad, looped.rows_grad), 1e-2) << "block " << b;
    for (std::size_t i = 0; i < grouped.weight_grads.size(); ++i) {
      if (looped.weight_grads[i].abs().max().item<double>() == 0.0) {  // an expert with no rows
        EXPECT_EQ(grouped.weight_grads[i].abs().max().item<double>(), 0.0) << "expert parameter " << i;
        continue;
      }
      EXPECT_LT(relative_rms(grouped.weight_grads[i], looped.weight_grads[i]), 1e-2) << "expert parameter " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GroupedExperts, ::testing::Values("qwen2_moe", "qwen3_moe"), model_name);

// What the grouped products leave out sends the block back to the loop, and says so: an adapter
// on the experts that is on (the grouped products would drop its update), and on CUDA operands
// other than bf16. Calling the grouped way directly is then an error naming the reason.
TEST(GroupedExperts, AnAdapterOnTheExpertsRunsThemOneByOne) {
  core::LoadedModel loaded = core::load_model(fixture_dir("qwen3_moe"), torch::kFloat32, torch::kCPU);
  auto block = moe_blocks(loaded.model).front();
  const torch::Tensor x = torch::randn({2, 5, loaded.config.hidden_size});
  torch::NoGradGuard no_grad;
  const torch::Tensor base = block->forward(x);
  core::LoraSettings settings;
  settings.r = 4;
  settings.target_modules = {"gate_proj", "up_proj", "down_proj"};
  core::LoraAdapters adapters(loaded.model, settings, 3);
  for (auto& p : adapters.parameters()) p.fill_(0.05);  // B != 0: the adapters change the output
  const Routed routed = routed_rows(static_cast<std::int64_t>(block->experts->size()), loaded.config.hidden_size, torch::kCPU, 7);
  const std::string why = core::grouped_experts_unsupported(block->experts, routed.rows);
  EXPECT_NE(why.find(core::grouped_experts_compiled() ? "adapter on its experts" : "_grouped_mm"), std::string::npos) << why;
  EXPECT_THROW(core::run_experts_grouped(block->experts, routed.rows, routed.ends), std::invalid_argument);
  // The block applies the adapters (the grouped products would give `base`) ...
  const torch::Tensor adapted = block->forward(x);
  EXPECT_GT(grpo::testing::max_abs_diff(adapted, base), 1e-3);
  // ... and, switched off, the grouped way applies again and the block gives the base output.
  adapters.set_enabled(false);
  if (core::grouped_experts_compiled()) EXPECT_EQ(core::grouped_experts_unsupported(block->experts, routed.rows), "");
  EXPECT_LT(grpo::testing::max_abs_diff(block->forward(x), base), 1e-5);
}

// The block's own choice: one by one on the CPU whatever LibTorch offers (no host read to save
// there); grouped on an sm90 GPU with bf16 weights, which the decode graphs need.
TEST(GroupedExperts, TheBlockRunsThemGroupedOnHopperOnly) {
  core::LoadedModel cpu = core::load_model(fixture_dir("qwen3_moe"), torch::kBFloat16, torch::kCPU);
  auto cpu_block = moe_blocks(cpu.model).front();
  const Routed cpu_rows = routed_rows(static_cast<std::int64_t>(cpu_block->experts->size()), cpu.config.hidden_size, torch::kCPU, 9);
  EXPECT_NE(core::experts_run_looped(cpu_block->experts, cpu_rows.rows).find("one by one"), std::string::npos);
  EXPECT_NE(cpu.model->fixed_decode_unsupported().find("mixture-of-experts"), std::string::npos);
  if (!device_under_test().is_cuda() || !torch::cuda::is_available()) GTEST_SKIP() << "the CUDA half needs a CUDA device";
  core::LoadedModel dev = core::load_model(fixture_dir("qwen3_moe"), torch::kBFloat16, device_under_test());
  auto block = moe_blocks(dev.model).front();
  const Routed routed = routed_rows(static_cast<std::int64_t>(block->experts->size()), dev.config.hidden_size, device_under_test(), 9);
  const bool hopper = core::cuda_compute_capability(device_under_test()) / 10 == 9;
  EXPECT_EQ(core::experts_run_looped(block->experts, routed.rows.to(torch::kBFloat16)).empty(), hopper && core::grouped_experts_compiled());
  EXPECT_EQ(dev.model->fixed_decode_unsupported().empty(), hopper && core::grouped_experts_compiled())
      << dev.model->fixed_decode_unsupported();
}

TEST(GroupedExperts, Float32OnCudaRunsThemOneByOne) {
  if (!device_under_test().is_cuda() || !torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device only";
  core::LoadedModel loaded = core::load_model(fixture_dir("qwen2_moe"), torch::kFloat32, device_under_test());
  auto block = moe_blocks(loaded.model).front();
  const Routed routed = routed_rows(static_cast<std::int64_t>(block->experts->size()), loaded.config.hidden_size, device_under_test(), 8);
  EXPECT_NE(core::grouped_experts_unsupported(block->experts, routed.rows).find("bf16"), std::string::npos);
}
