// core::AdamW's fused step (ATen's _fused_adamw_, what the trainer runs on CUDA) against
// torch::optim::AdamW's own step on the CPU in float64 terms: the same formula, so after several
// steps with weight decay, both groups and a parameter that misses a step, the weights and the
// moments agree to float32 rounding and the step counts (what checkpoints save) are equal.
// GRPO_GPU_TESTS_DEVICE=cpu runs the fused kernel's CPU version (LibTorch 2.x). ClipGradNorm: the
// global-norm clipping the trainer runs before each step, against its formula.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <vector>

#include "core/optim/optimizer.h"
#include "tests/gpu/gpu_test_support.h"

using grpo::testing::device_under_test;

TEST(FusedAdamW, MatchesTheUnfusedStep) {
  GRPO_SKIP_WITHOUT_DEVICE();
#if TORCH_VERSION_MAJOR < 2
  GTEST_SKIP() << "this LibTorch has no fused AdamW (LibTorch 2.x needed)";
#else
  const torch::Device device = device_under_test();
  torch::manual_seed(3);
  std::vector<torch::Tensor> init = {torch::randn({64, 48}), torch::randn({48}), torch::randn({32, 64}), torch::randn({64})};
  std::vector<torch::Tensor> fused_params, plain_params;
  for (const auto& t : init) {
    fused_params.push_back(t.to(device).clone().set_requires_grad(true));
    plain_params.push_back(t.clone().set_requires_grad(true));
  }
  grpo::core::OptimizerSettings settings;
  settings.learning_rate = 3e-3;
  settings.weight_decay = 0.1;  // matrices decay, vectors do not: two groups
  auto fused = grpo::core::make_adamw(fused_params, settings);
  fused->set_fused_on_cpu(true);
  torch::optim::AdamW plain(grpo::core::adamw_param_groups(plain_params, settings),
                            grpo::core::adamw_options(settings, settings.weight_decay));
  for (int step = 0; step < 6; ++step) {
    for (std::size_t i = 0; i < init.size(); ++i) {
      if (step == 2 && i == 3) {  // no gradient this step: its step count falls behind
        fused_params[i].mutable_grad() = torch::Tensor();
        plain_params[i].mutable_grad() = torch::Tensor();
        continue;
      }
      auto g = torch::randn(init[i].sizes());
      fused_params[i].mutable_grad() = g.to(device);
      plain_params[i].mutable_grad() = g.clone();
    }
    fused->step();
    plain.step();
  }
  for (std::size_t i = 0; i < init.size(); ++i) {
    auto got = fused_params[i].detach().cpu().to(torch::kFloat64), want = plain_params[i].detach().to(torch::kFloat64);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5) << "parameter " << i;
    EXPECT_GT((got - init[i].to(torch::kFloat64)).abs().max().item<double>(), 1e-3) << "parameter " << i << " did not move";
    const auto& fs = static_cast<const torch::optim::AdamWParamState&>(*fused->state().at(fused_params[i].unsafeGetTensorImpl()));
    const auto& ps = static_cast<const torch::optim::AdamWParamState&>(*plain.state().at(plain_params[i].unsafeGetTensorImpl()));
    EXPECT_EQ(fs.step(), ps.step()) << "parameter " << i;
    EXPECT_LT((fs.exp_avg_sq().cpu() - ps.exp_avg_sq()).abs().max().item<double>(), 1e-6) << "parameter " << i;
  }
#endif
}

TEST(ClipGradNorm, MatchesTheFormulaInFloat64) {
  // clip_grad_norm (the trainer's; foreach kernels on CUDA): the global norm sqrt(sum of every
  // gradient element squared), and when it exceeds max_norm every gradient scaled by
  // max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_ does. The formula in float64
  // on the host is the reference; a parameter without a gradient is left out.
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  torch::manual_seed(5);
  std::vector<torch::Tensor> grads = {torch::randn({300, 40}) * 3, torch::randn({40}), torch::randn({7, 9, 11}) * 0.1};
  std::vector<torch::Tensor> params;
  for (const auto& g : grads) params.push_back(torch::zeros(g.sizes(), torch::TensorOptions().device(device)).set_requires_grad(true));
  params.push_back(torch::zeros({5}, torch::TensorOptions().device(device)).set_requires_grad(true));  // no gradient
  grpo::core::OptimizerSettings settings;
  auto optimizer = grpo::core::make_adamw(params, settings);
  double sum_sq = 0.0;
  for (const auto& g : grads) sum_sq += g.to(torch::kFloat64).square().sum().item<double>();
  const double norm = std::sqrt(sum_sq);
  for (const double max_norm : {norm * 2, norm / 4}) {
    for (std::size_t i = 0; i < grads.size(); ++i) params[i].mutable_grad() = grads[i].to(device).clone();
    const double got = grpo::core::clip_grad_norm(*optimizer, max_norm);
    EXPECT_NEAR(got / norm, 1.0, 1e-6) << "max_norm " << max_norm;
    const double coef = max_norm < norm ? max_norm / (norm + 1e-6) : 1.0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const auto want = grads[i].to(torch::kFloat64) * coef;
      const auto have = params[i].grad().cpu().to(torch::kFloat64);
      EXPECT_LT(((have - want).abs() / (want.abs() + 1e-12)).max().item<double>(), 1e-6) << "gradient " << i << ", max_norm " << max_norm;
    }
    EXPECT_FALSE(params.back().grad().defined());
  }
}
