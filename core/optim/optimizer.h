// AdamW and the learning-rate schedule of the trainer (train.* keys).
//
// The schedule follows Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup: the
// rate used by optimizer step s (0-based) is peak * factor(s), with factor = s / warmup during
// warmup (so step 0 of a warmup runs at rate 0, as in transformers) and, after it,
//   constant: 1
//   linear:   min + (1 - min) * max(0, (T - s) / max(1, T - warmup))
//   cosine:   min + (1 - min) * 0.5 * (1 + cos(pi * (s - warmup) / max(1, T - warmup)))
// where T is the total number of optimizer steps of the run and min = train.min_lr_ratio.
//
// Weight decay (decoupled, AdamW) applies to matrices only: biases and norm weights (1-D
// parameters) are in a second group without decay, as the Hugging Face Trainer does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "grpo/sdk/config_value.h"

namespace grpo::core {

enum class LrSchedule { kConstant, kLinear, kCosine };

struct OptimizerSettings {
  double learning_rate = 1e-6;
  LrSchedule schedule = LrSchedule::kConstant;
  std::int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double max_grad_norm = 1.0;
};

// train.learning_rate, lr_schedule, warmup_steps, min_lr_ratio, weight_decay, adam_*,
// max_grad_norm; ranges checked with errors naming the key.
OptimizerSettings optimizer_settings(const sdk::ConfigValue& root);

// The multiplier of the peak rate for optimizer step `step` of `total_steps`.
double lr_factor(const OptimizerSettings& settings, std::int64_t step, std::int64_t total_steps);

// torch::optim::AdamW whose step, for parameters on CUDA (LibTorch 2.x), is ATen's fused
// multi-tensor kernel (PyTorch's AdamW(fused=True)): one launch per group and step instead of
// about ten per parameter. Same state (AdamWParamState: step, exp_avg, exp_avg_sq), so
// checkpoints and exact resume do not change; the update is the same formula in float32 per
// element (it may differ from the unfused one by float32 rounding). Elsewhere, and when
// set_fused(false), torch::optim::AdamW's own step.
class AdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // Whether step() may use the fused kernel (default: on CUDA). Tests force it on the CPU,
  // where LibTorch 2.x has the kernel too.
  void set_fused(bool on) { fused_ = on; }
  void set_fused_on_cpu(bool on) { fused_on_cpu_ = on; }
  // This build's LibTorch has the fused kernel (2.x).
  static bool fused_available();

 private:
  bool fused_ = true;
  bool fused_on_cpu_ = false;
  bool fusable(const torch::optim::OptimizerParamGroup& group) const;
  void fused_group_step(torch::optim::OptimizerParamGroup& group);
};

// AdamW over `model`'s parameters that require gradients (two groups: with and without weight
// decay), or over `parameters` (LoRA adapters: core/model/lora.h).
std::unique_ptr<AdamW> make_adamw(torch::nn::Module& model, const OptimizerSettings& settings);
std::unique_ptr<AdamW> make_adamw(const std::vector<torch::Tensor>& parameters, const OptimizerSettings& settings);
// make_adamw's parts: its options (with this weight decay), whether a parameter decays, and its
// parameter groups (decaying first, then the rest when there is any), for optimizers that
// follow it (core/dist/sharding.h).
torch::optim::AdamWOptions adamw_options(const OptimizerSettings& settings, double weight_decay);
bool adamw_decays(const torch::Tensor& parameter);
std::vector<torch::optim::OptimizerParamGroup> adamw_param_groups(const std::vector<torch::Tensor>& parameters,
                                                                  const OptimizerSettings& settings);

// An optimizer that measures and clips its gradients itself, because they are not all in its
// parameters' .grad (a sharded one, core/dist/sharding.h); clip_grad_norm() defers to it.
class SelfClippingOptimizer {
 public:
  virtual ~SelfClippingOptimizer() = default;
  virtual double clip_grad_norm(double max_norm) = 0;

 protected:
  // clip_grad_norm's own measure over the optimizer's parameters' .grad.
  double measure_and_clip(double max_norm);
};

// An optimizer whose saved state can be checked against it before anything is restored (a
// sharded one: its world size, rank and layout); check_state throws std::runtime_error saying
// why it does not fit.
class CheckedOptimizerState {
 public:
  virtual ~CheckedOptimizerState() = default;
  virtual void check_state(torch::serialize::InputArchive& archive) const = 0;
};

// The global L2 norm of the optimizer's gradients (each tensor's norm in float64 on the CPU, in
// float32 by foreach kernels on CUDA as torch.nn.utils.clip_grad_norm_ takes it; their norm in
// float64; 0 without gradients). When it is finite and above max_norm > 0 the gradients
// are scaled by clip_grad_norm_'s coefficient max_norm / (norm + 1e-6); a non-finite norm is
// returned as is (the caller skips the step).
double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm);

// Sets every parameter group's rate.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The optimizer's state (moments, step counts) to and from a file; the save is atomic
// (save_archive, core/model/checkpoint.h). Both throw std::runtime_error naming the file.
void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& path);
void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& path);

}  // namespace grpo::core
