// core::AdamW's fused step (ATen's _fused_adamw_, what the trainer runs on CUDA) against
// torch::optim::AdamW's own step on the CPU in float64 terms: the same formula, so after several
// steps with weight decay, both groups and a parameter that misses a step, the weights and the
// moments agree to float32 rounding and the step counts (what checkpoints save) are equal.
// GRPO_GPU_TESTS_DEVICE=cpu runs the fused kernel's CPU version (LibTorch 2.x).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

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
