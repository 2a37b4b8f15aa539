// AdamW set-up, the learning-rate schedules (Hugging Face's formulas, values worked by hand)
// and the optimizer state round trip an exact resume relies on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "core/optim/optimizer.h"
#include "tests/support/test_dir.h"

namespace {

using grpo::core::lr_factor;
using grpo::core::LrSchedule;
using grpo::core::OptimizerSettings;

OptimizerSettings schedule(LrSchedule kind, std::int64_t warmup, double min_ratio = 0.0) {
  OptimizerSettings s;
  s.schedule = kind;
  s.warmup_steps = warmup;
  s.min_lr_ratio = min_ratio;
  return s;
}

TEST(LrSchedule, WarmupIsLinearFromZero) {
  // get_constant_schedule_with_warmup(4): step / 4 for steps 0..3, then 1.
  const auto s = schedule(LrSchedule::kConstant, 4);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0, 10), 0.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1, 10), 0.25);
  EXPECT_DOUBLE_EQ(lr_factor(s, 3, 10), 0.75);
  EXPECT_DOUBLE_EQ(lr_factor(s, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 9, 10), 1.0);
}

TEST(LrSchedule, LinearDecaysToMinRatio) {
  // Warmup 2 of 10 steps: after warmup (10 - s) / 8; with min 0.1: 0.1 + 0.9 * that.
  const auto s = schedule(LrSchedule::kLinear, 2);
  EXPECT_DOUBLE_EQ(lr_factor(s, 2, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 6, 10), 0.5);
  EXPECT_DOUBLE_EQ(lr_factor(s, 10, 10), 0.0);
  const auto m = schedule(LrSchedule::kLinear, 2, 0.1);
  EXPECT_NEAR(lr_factor(m, 6, 10), 0.1 + 0.9 * 0.5, 1e-15);
  EXPECT_NEAR(lr_factor(m, 12, 10), 0.1, 1e-15);
}

TEST(LrSchedule, CosineHalfwayIsHalf) {
  // No warmup, 8 steps: 0.5 * (1 + cos(pi * s / 8)): s = 4 -> 0.5, s = 2 -> (1 + sqrt(2)/2) / 2.
  const auto s = schedule(LrSchedule::kCosine, 0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0, 8), 1.0);
  EXPECT_NEAR(lr_factor(s, 4, 8), 0.5, 1e-15);
  EXPECT_NEAR(lr_factor(s, 2, 8), (1.0 + std::sqrt(2.0) / 2.0) / 2.0, 1e-15);
  EXPECT_NEAR(lr_factor(s, 8, 8), 0.0, 1e-15);
}

TEST(LrSchedule, CosineDecaysToMinRatio) {
  // get_cosine_with_min_lr_schedule_with_warmup (min_lr_rate 0.1), warmup 2 of 10 steps:
  // 0.1 + 0.9 * 0.5 * (1 + cos(pi * (s - 2) / 8)): s = 6 -> 0.55, s = 4 -> 0.1 + 0.9 * (1 + sqrt(2)/2) / 2.
  const auto s = schedule(LrSchedule::kCosine, 2, 0.1);
  EXPECT_DOUBLE_EQ(lr_factor(s, 1, 10), 0.5);
  EXPECT_NEAR(lr_factor(s, 2, 10), 1.0, 1e-15);
  EXPECT_NEAR(lr_factor(s, 6, 10), 0.55, 1e-15);
  EXPECT_NEAR(lr_factor(s, 4, 10), 0.1 + 0.9 * (1.0 + std::sqrt(2.0) / 2.0) / 2.0, 1e-15);
  EXPECT_NEAR(lr_factor(s, 10, 10), 0.1, 1e-15);
  EXPECT_NEAR(lr_factor(s, 12, 10), 0.1, 1e-15);  // past the end: stays at the floor
}

struct TwoLayer : torch::nn::Module {
  TwoLayer() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    norm = register_parameter("norm", torch::ones({3}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc->forward(x) * norm; }
  torch::nn::Linear fc{nullptr};
  torch::Tensor norm;
};

void train_steps(TwoLayer& m, torch::optim::Optimizer& opt, int steps, int offset) {
  for (int i = 0; i < steps; ++i) {
    torch::manual_seed(100 + offset + i);
    const torch::Tensor x = torch::randn({5, 4});
    opt.zero_grad();
    m.forward(x).pow(2).mean().backward();
    opt.step();
  }
}

TEST(AdamW, WeightDecaySkipsVectors) {
  // With a zero gradient, AdamW changes a parameter only through decay: p *= (1 - lr * wd).
  TwoLayer m;
  OptimizerSettings s;
  s.learning_rate = 0.1;
  s.weight_decay = 0.5;
  auto opt = grpo::core::make_adamw(m, s);
  const torch::Tensor w0 = m.fc->weight.detach().clone(), b0 = m.fc->bias.detach().clone(), n0 = m.norm.detach().clone();
  for (auto& p : m.parameters()) p.mutable_grad() = torch::zeros_like(p);
  opt->step();
  EXPECT_TRUE(torch::allclose(m.fc->weight, w0 * (1 - 0.1 * 0.5), 1e-6, 1e-7));
  EXPECT_TRUE(torch::equal(m.fc->bias, b0));
  EXPECT_TRUE(torch::equal(m.norm, n0));
}

// torch.nn.utils.clip_grad_norm_: the global L2 norm over every gradient, and when it exceeds
// max_norm every gradient is scaled by max_norm / (norm + 1e-6). Gradients 3, 4 and 12 in three
// parameters: norm sqrt(9 + 16 + 144) = 13.
TEST(AdamW, ClipGradNormScalesEveryGradientByTheGlobalNorm) {
  TwoLayer m;
  OptimizerSettings s;
  auto opt = grpo::core::make_adamw(m, s);
  auto set_grads = [&] {
    m.fc->weight.mutable_grad() = torch::zeros({3, 4});
    m.fc->weight.mutable_grad()[0][0] = 3.0;
    m.fc->bias.mutable_grad() = torch::tensor({4.0f, 0.0f, 0.0f});
    m.norm.mutable_grad() = torch::tensor({0.0f, 0.0f, 12.0f});
  };
  set_grads();
  EXPECT_NEAR(grpo::core::clip_grad_norm(*opt, 20.0), 13.0, 1e-6);  // under the bound: unchanged
  EXPECT_FLOAT_EQ(m.fc->weight.grad()[0][0].item<float>(), 3.0f);
  EXPECT_NEAR(grpo::core::clip_grad_norm(*opt, 0.0), 13.0, 1e-6);  // 0 = no clipping
  EXPECT_FLOAT_EQ(m.norm.grad()[2].item<float>(), 12.0f);

  EXPECT_NEAR(grpo::core::clip_grad_norm(*opt, 1.3), 13.0, 1e-6);  // returns the norm before clipping
  const double coef = 1.3 / (13.0 + 1e-6);
  EXPECT_NEAR(m.fc->weight.grad()[0][0].item<float>(), 3.0 * coef, 1e-6);
  EXPECT_NEAR(m.fc->bias.grad()[0].item<float>(), 4.0 * coef, 1e-6);
  EXPECT_NEAR(m.norm.grad()[2].item<float>(), 12.0 * coef, 1e-6);
  EXPECT_NEAR(grpo::core::clip_grad_norm(*opt, 100.0), 1.3, 1e-5);  // the clipped norm
}

TEST(AdamW, SavedStateContinuesBitIdentically) {
  const std::string dir = grpo::testing::fresh_test_dir("optimizer");
  OptimizerSettings s;
  s.learning_rate = 0.01;
  s.weight_decay = 0.1;
  torch::manual_seed(1);
  TwoLayer a;
  TwoLayer b;
  {
    torch::NoGradGuard g;
    for (std::size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
  }
  auto opt_a = grpo::core::make_adamw(a, s);
  train_steps(a, *opt_a, 3, 0);
  grpo::core::save_optimizer(*opt_a, dir + "/opt.pt");
  EXPECT_FALSE(std::filesystem::exists(dir + "/opt.pt.tmp"));
  {
    torch::NoGradGuard g;
    for (std::size_t i = 0; i < a.parameters().size(); ++i) b.parameters()[i].copy_(a.parameters()[i]);
  }
  auto opt_b = grpo::core::make_adamw(b, s);
  grpo::core::load_optimizer(*opt_b, dir + "/opt.pt");
  train_steps(a, *opt_a, 3, 3);
  train_steps(b, *opt_b, 3, 3);
  for (std::size_t i = 0; i < a.parameters().size(); ++i) EXPECT_TRUE(torch::equal(a.parameters()[i], b.parameters()[i]));
  // A missing state file is an error, not a silent fresh start.
  TwoLayer c;
  auto opt_c = grpo::core::make_adamw(c, s);
  EXPECT_THROW(grpo::core::load_optimizer(*opt_c, dir + "/missing.pt"), std::runtime_error);
}

}  // namespace
