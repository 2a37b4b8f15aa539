// bf16-mixed on the GPU against float32 on the CPU, on the tiny fixture models
// (tests/fixtures/models): the response log-probs of a packed forward, and one training step
// (loss = -mean log p, backward, AdamW) with float32 master weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/model/model_config.h"
#include "core/model/precision.h"
#include "core/optim/optimizer.h"
#include "core/train/packing.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::cosine;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;
using grpo::testing::max_abs_diff;
using grpo::testing::random_batch;
using grpo::testing::TokenBatch;

namespace {

// Log-probs, bf16-mixed vs fp32: at most 0.25 nats apart on any response token, 0.04 on average.
// bfloat16 keeps 8 significant bits, so every operand and output of a matmul is rounded by up
// to 2^-9 relative (~2e-3); through two layers and the LM head that adds up to ~1-2e-2 relative
// on the logits, whose magnitude on these models is up to ~6: ~0.1 absolute, and
// log p = z_t - logsumexp(z) moves by up to twice the largest logit error. Measured with CPU
// bf16 autocast (GRPO_GPU_TESTS_DEVICE=cpu, the same rounding): max 0.05-0.12, mean 0.012-0.018
// over 126 tokens per model; the bounds leave ~2x for the GPU's kernels. Real errors (a missing
// cast back to float32, a float16 overflow, the wrong attention mask) are 0.5 nats and more.
constexpr double kLogprobMaxAbs = 0.25;
// Mixtures of experts: at least this share of the response tokens must come before their row's
// first token routed differently (grpo::testing::routed_differently), so that the comparison
// cannot become vacuous (measured with CPU bf16 on LibTorch 2.11: 68% qwen3_moe, 81% qwen2_moe).
constexpr double kMinComparedShare = 0.5;
constexpr double kLogprobMeanAbs = 0.04;
// bf16 must be visible: float32 on two devices agrees to ~1e-6, so a difference below this
// means the scope did not switch the matmuls to bf16.
constexpr double kBf16Visible = 1e-4;

// One training step. The gradients of all parameters together point the same way (cosine over
// the concatenation); each parameter's own gradient too, a little less strictly (a small norm
// weight's gradient sums few terms, so its relative rounding error is larger). Measured with
// CPU bf16: 0.9995-0.9998 overall, lowest single parameter 0.9989.
constexpr double kGradCosineAll = 0.99;
constexpr double kGradCosineEach = 0.98;
// Updated weights: |w_gpu - w_cpu| against the update itself, over all parameters:
// ||Δ_gpu - Δ_cpu|| <= kUpdateRelTol * ||Δ_cpu||. AdamW's first step is lr * g / (|g| + eps),
// i.e. lr * sign(g) for all but the tiniest gradients, so an element whose gradient is within
// bf16's noise of 0 may flip sign and move 2 lr the other way: with a fraction f of flips the
// ratio is 2 sqrt(f). 0.5 allows f up to ~6% (measured with CPU bf16: 0.16-0.18, f ~ 0.8%);
// a wrong gradient (cosine < 0.9) flips far more.
constexpr double kUpdateRelTol = 0.5;
constexpr double kLearningRate = 1e-3;

// The response mask of `batch` for a mixture of experts compared across precisions: each
// sequence's response tokens that come before its row's first token routed differently
// (routed_differently) by the two passes whose router logits are given. The packed row holds
// the sequences back to back, and response token j of a sequence with prompt p is predicted at
// its position p - 1 + j. Checks (and prints) that at least kMinComparedShare is left.
torch::Tensor routed_alike_mask(const std::string& model, const TokenBatch& batch, const std::vector<torch::Tensor>& a,
                                const std::vector<torch::Tensor>& b, std::int64_t top_k) {
  torch::Tensor mask = batch.mask();
  const std::vector<bool> flipped = grpo::testing::routed_differently(a, b, top_k);
  const double all = mask.sum().item<double>();
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < batch.prompts.size(); ++s) {
    const auto p = static_cast<std::int64_t>(batch.prompts[s].size()), r = static_cast<std::int64_t>(batch.responses[s].size());
    bool seen = false;
    for (std::int64_t pos = 0; pos < p + r - 1; ++pos) {
      seen = seen || flipped.at(static_cast<std::size_t>(offset + pos));
      if (seen && pos >= p - 1) mask[static_cast<std::int64_t>(s)][pos - (p - 1)] = 0.0;
    }
    offset += p + r;
  }
  EXPECT_EQ(static_cast<std::size_t>(offset), flipped.size());
  std::cout << model << ": " << mask.sum().item<double>() << " of " << all
            << " response tokens come before their row's first token routed differently\n";
  EXPECT_GE(mask.sum().item<double>(), kMinComparedShare * all);
  return mask;
}

class Bf16MixedParity : public ::testing::TestWithParam<std::string> {};

std::string model_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace

TEST_P(Bf16MixedParity, ResponseLogprobsMatchCpuFp32) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  core::LoadedModel cpu = core::load_model(fixture_dir(GetParam()), torch::kFloat32, torch::kCPU);
  core::LoadedModel dev = core::load_model(fixture_dir(GetParam()), torch::kFloat32, device);
  const TokenBatch batch = random_batch(12, cpu.config.vocab_size, 17);
  torch::NoGradGuard no_grad;
  const core::LogProbOptions options;
  const bool moe = cpu.config.num_experts > 0;
  cpu.model->set_record_router_logits(moe);
  dev.model->set_record_router_logits(moe);
  const torch::Tensor ref = core::packed_response_logprobs(cpu.model, batch.sequences(), batch.width, options).logprobs;
  torch::Tensor got;
  {
    const core::ComputePrecisionScope precision(core::Precision::kBf16Mixed, device);
    got = core::packed_response_logprobs(dev.model, batch.sequences(), batch.width, options).logprobs;
  }
  EXPECT_EQ(got.device(), device);
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  ASSERT_EQ(got.sizes(), ref.sizes());
  const torch::Tensor mask = moe ? routed_alike_mask(GetParam(), batch, cpu.model->router_logits(), dev.model->router_logits(),
                                                    cpu.config.num_experts_per_tok)
                                 : batch.mask();
  const torch::Tensor diff = (got.to(torch::kCPU) - ref).abs() * mask;
  const double worst = diff.max().item<double>();
  const double mean = diff.sum().item<double>() / mask.sum().item<double>();
  std::cout << GetParam() << ": bf16-mixed vs fp32 response log-probs: max |diff| " << worst << ", mean " << mean
            << " over " << mask.sum().item<double>() << " tokens\n";
  EXPECT_TRUE(torch::isfinite(got).all().item<bool>());
  EXPECT_LT(worst, kLogprobMaxAbs);
  EXPECT_LT(mean, kLogprobMeanAbs);
  EXPECT_GT(worst, kBf16Visible) << "bf16-mixed gave float32's results: the matmuls did not run in bfloat16";
}

TEST_P(Bf16MixedParity, OneAdamWStepMatchesCpuFp32) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  const TokenBatch batch = random_batch(10, core::load_model_config(fixture_dir(GetParam()) + "/config.json").vocab_size, 23);
  core::OptimizerSettings settings;
  settings.learning_rate = kLearningRate;
  // Mixtures of experts: the loss over the response tokens before their row's first token routed
  // differently (routed_alike_mask, from a no-grad pass of each side; the step's own passes are
  // the same computations and route alike). Past a flip the two sides compute different
  // functions, and an expert's gradient sums other tokens (on an H200, qwen3_moe's expert 3 of
  // layer 1 gained or lost one: cosine 0.95); before it, only positions routed alike in every
  // layer reach the loss (attention is causal within each sequence).
  torch::Tensor loss_mask;
  {
    const core::ModelConfig config = core::load_model_config(fixture_dir(GetParam()) + "/config.json");
    if (config.num_experts > 0) {
      auto routers = [&](const torch::Device& d, core::Precision precision) {
        core::LoadedModel m = core::load_model(fixture_dir(GetParam()), torch::kFloat32, d);
        m.model->train();
        m.model->set_record_router_logits(true);
        torch::NoGradGuard no_grad;
        const core::ComputePrecisionScope scope(precision, d);
        core::packed_response_logprobs(m.model, batch.sequences(), batch.width, {});
        return m.model->router_logits();
      };
      loss_mask = routed_alike_mask(GetParam(), batch, routers(torch::kCPU, core::Precision::kFp32),
                                    routers(device, core::Precision::kBf16Mixed), config.num_experts_per_tok);
    } else {
      loss_mask = batch.mask();
    }
  }

  struct StepResult {
    double loss = 0;
    std::map<std::string, torch::Tensor> before, grad, after;  // on the host, float32
  };
  auto step = [&](const torch::Device& d, core::Precision precision) {
    core::LoadedModel m = core::load_model(fixture_dir(GetParam()), torch::kFloat32, d);
    m.model->train();
    auto optimizer = core::make_adamw(*m.model, settings);
    StepResult r;
    for (const auto& p : m.model->named_parameters()) r.before[p.key()] = p.value().detach().to(torch::kCPU).clone();
    optimizer->zero_grad();
    {
      // As the policy update does: one scope around forward and backward of the step.
      const core::ComputePrecisionScope scope(precision, d);
      const torch::Tensor lp = core::packed_response_logprobs(m.model, batch.sequences(), batch.width, {}).logprobs;
      const torch::Tensor mask = loss_mask.to(d);
      const torch::Tensor loss = -(lp * mask).sum() / mask.sum();
      loss.backward();
      r.loss = loss.item<double>();
    }
    for (const auto& p : m.model->named_parameters()) {
      EXPECT_EQ(p.value().scalar_type(), torch::kFloat32) << p.key() << ": master weights stay float32";
      EXPECT_TRUE(p.value().grad().defined()) << p.key();
      if (p.value().grad().defined()) r.grad[p.key()] = p.value().grad().to(torch::kCPU).to(torch::kFloat32);
    }
    optimizer->step();
    for (const auto& p : m.model->named_parameters()) r.after[p.key()] = p.value().detach().to(torch::kCPU).clone();
    return r;
  };
  const StepResult ref = step(torch::kCPU, core::Precision::kFp32);
  const StepResult got = step(device, core::Precision::kBf16Mixed);

  EXPECT_NEAR(got.loss, ref.loss, kLogprobMaxAbs);
  ASSERT_EQ(got.grad.size(), ref.grad.size());
  std::vector<torch::Tensor> g_ref, g_got, d_ref, d_got;
  double worst_each = 1.0;
  std::string worst_name;
  for (const auto& [name, g] : ref.grad) {
    ASSERT_TRUE(got.grad.count(name)) << name;
    const double c = cosine(got.grad.at(name), g);
    if (c < worst_each) worst_each = c, worst_name = name;
    EXPECT_GE(c, kGradCosineEach) << name;
    EXPECT_EQ(max_abs_diff(got.before.at(name), ref.before.at(name)), 0.0) << name << ": both start from the same weights";
    g_ref.push_back(g.flatten());
    g_got.push_back(got.grad.at(name).flatten());
    d_ref.push_back((ref.after.at(name) - ref.before.at(name)).flatten());
    d_got.push_back((got.after.at(name) - got.before.at(name)).flatten());
  }
  const double c_all = cosine(torch::cat(g_got), torch::cat(g_ref));
  const torch::Tensor dr = torch::cat(d_ref).to(torch::kFloat64), dg = torch::cat(d_got).to(torch::kFloat64);
  const double update_rel = (dg - dr).norm().item<double>() / dr.norm().item<double>();
  const double weight_max = (dg - dr).abs().max().item<double>();
  std::cout << GetParam() << ": loss fp32 " << ref.loss << " vs bf16-mixed " << got.loss << "; gradient cosine " << c_all
            << " (lowest " << worst_each << ", " << worst_name << "); ||dW_bf16 - dW_fp32|| / ||dW_fp32|| = " << update_rel
            << ", max |w_bf16 - w_fp32| = " << weight_max << " (lr " << kLearningRate << ")\n";
  EXPECT_GE(c_all, kGradCosineAll);
  EXPECT_LE(update_rel, kUpdateRelTol);
  // AdamW's step is at most ~lr per element (bias-corrected first step: exactly lr * g/(|g|+eps)).
  EXPECT_LE(weight_max, 2 * kLearningRate * 1.01);
  EXPECT_GT(dr.norm().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16MixedParity, ::testing::ValuesIn(grpo::testing::fixture_models()), model_name);
