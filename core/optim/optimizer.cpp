#include "core/optim/optimizer.h"

#include <torch/version.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/config/config_access.h"
#include "core/model/checkpoint.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

const char* lr_schedule_name(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kLinear: return "linear";
    case LrSchedule::kCosine: return "cosine";
    case LrSchedule::kConstant: break;
  }
  return "constant";
}

// torch.nn.utils.clip_grad_norm_ over the optimizer's parameters' .grad.
double clip_param_grad_norm(torch::optim::Optimizer& optimizer, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // CUDA: the foreach kernels, a few launches for all the gradients where one per tensor (a cast,
  // a norm, a multiply: ~900 launches for a 0.5B model) kept the host busy; the per-tensor
  // norms in float32, as PyTorch's clip_grad_norm_ takes them, summed in float64. The CPU keeps
  // its float64 norms, with which every CPU test and checkpoint was made.
  bool foreach = TORCH_VERSION_MAJOR >= 2;
  for (const auto& g : grads)
    foreach = foreach && g.is_cuda() && g.device() == grads.front().device() && g.scalar_type() == torch::kFloat32;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  if (foreach) {
    norms = at::_foreach_norm(grads, 2);
  } else {
    norms.reserve(grads.size());
    for (const auto& g : grads) norms.push_back(g.detach().to(torch::kDouble).norm(2));
  }
  const double norm = torch::stack(norms).to(torch::kDouble).norm(2).to(torch::kCPU).item<double>();  // read back on the host
  if (std::isfinite(norm) && max_norm > 0.0 && norm > max_norm) {
    const double coef = max_norm / (norm + 1e-6);
    if (foreach) {
      at::_foreach_mul_(grads, coef);
    } else {
      for (const auto& g : grads) g.mul_(coef);
    }
  }
  return norm;
}

}  // namespace

OptimizerSettings optimizer_settings(const sdk::ConfigValue& root) {
  OptimizerSettings s;
  const sdk::ConfigView train(find_config_node(root, {"train"}), "train");
  auto positive = [&](const char* key, double v, bool allow_zero) {
    if (!std::isfinite(v) || v < 0.0 || (!allow_zero && v == 0.0))
      fail_at_key(find_config_node(root, {"train", key}), std::string("train.") + key,
                  std::string("expected a finite number ") + (allow_zero ? ">= 0" : "> 0") + ", got " + std::to_string(v));
    return v;
  };
  s.learning_rate = positive("learning_rate", train.get_double("learning_rate", s.learning_rate), true);
  const std::string schedule = train.get_choice("lr_schedule", lr_schedule_name(s.schedule), {"constant", "linear", "cosine"});
  s.schedule = schedule == "linear" ? LrSchedule::kLinear : schedule == "cosine" ? LrSchedule::kCosine : LrSchedule::kConstant;
  s.warmup_steps = train.get_int("warmup_steps", s.warmup_steps);
  if (s.warmup_steps < 0)
    fail_at_key(find_config_node(root, {"train", "warmup_steps"}), "train.warmup_steps", "expected an integer >= 0");
  s.min_lr_ratio = train.get_double("min_lr_ratio", s.min_lr_ratio);
  if (!(s.min_lr_ratio >= 0.0 && s.min_lr_ratio <= 1.0))
    fail_at_key(find_config_node(root, {"train", "min_lr_ratio"}), "train.min_lr_ratio", "expected a number in [0, 1]");
  s.weight_decay = positive("weight_decay", train.get_double("weight_decay", s.weight_decay), true);
  s.beta1 = train.get_double("adam_beta1", s.beta1);
  s.beta2 = train.get_double("adam_beta2", s.beta2);
  for (const auto& [key, v] : {std::pair<const char*, double>{"adam_beta1", s.beta1}, {"adam_beta2", s.beta2}})
    if (!(v >= 0.0 && v < 1.0))
      fail_at_key(find_config_node(root, {"train", key}), std::string("train.") + key, "expected a number in [0, 1)");
  s.eps = positive("adam_eps", train.get_double("adam_eps", s.eps), false);
  s.max_grad_norm = positive("max_grad_norm", train.get_double("max_grad_norm", s.max_grad_norm), true);
  return s;
}

double lr_factor(const OptimizerSettings& s, std::int64_t step, std::int64_t total_steps) {
  if (step < s.warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, s.warmup_steps));
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - s.warmup_steps));
  const double progress = static_cast<double>(step - s.warmup_steps) / span;
  switch (s.schedule) {
    case LrSchedule::kConstant:
      return 1.0;
    case LrSchedule::kLinear:
      return s.min_lr_ratio + (1.0 - s.min_lr_ratio) * std::max(0.0, 1.0 - progress);
    case LrSchedule::kCosine:
      return s.min_lr_ratio + (1.0 - s.min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  return 1.0;
}

std::unique_ptr<AdamW> make_adamw(torch::nn::Module& model, const OptimizerSettings& s) {
  std::vector<torch::Tensor> trainable;
  for (auto& p : model.parameters())
    if (p.requires_grad()) trainable.push_back(p);
  return make_adamw(trainable, s);
}

bool adamw_decays(const torch::Tensor& parameter) { return parameter.dim() >= 2; }

std::vector<torch::optim::OptimizerParamGroup> adamw_param_groups(const std::vector<torch::Tensor>& parameters,
                                                                  const OptimizerSettings& s) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : parameters) (adamw_decays(p) ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(adamw_options(s, s.weight_decay)));
  if (!no_decay.empty()) groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adamw_options(s, 0.0)));
  return groups;
}

torch::optim::AdamWOptions adamw_options(const OptimizerSettings& s, double weight_decay) {
  return torch::optim::AdamWOptions(s.learning_rate).betas({s.beta1, s.beta2}).eps(s.eps).weight_decay(weight_decay);
}

std::unique_ptr<AdamW> make_adamw(const std::vector<torch::Tensor>& parameters, const OptimizerSettings& s) {
  return std::make_unique<AdamW>(adamw_param_groups(parameters, s), adamw_options(s, s.weight_decay));
}

bool AdamW::fused_available() {
#if TORCH_VERSION_MAJOR >= 2
  return true;
#else
  return false;
#endif
}

torch::Tensor AdamW::step(LossClosure closure) {
  bool fused = fused_ && fused_available();
  // Every group or none: a group the kernel does not take (mixed devices or dtypes, sparse
  // gradients, the CPU) makes the whole step torch::optim::AdamW's.
  for (auto& group : param_groups()) fused = fused && fusable(group);
  if (!fused) return torch::optim::AdamW::step(std::move(closure));
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) fused_group_step(group);
  return loss;
}

bool AdamW::fusable(const torch::optim::OptimizerParamGroup& group) const {
  const torch::Tensor* first = nullptr;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse() || (!p.is_cuda() && !fused_on_cpu_) || p.grad().scalar_type() != p.scalar_type() ||
        (first && (p.device() != first->device() || p.scalar_type() != first->scalar_type())))
      return false;
    if (!first) first = &p;
  }
  return true;
}

void AdamW::fused_group_step(torch::optim::OptimizerParamGroup& group) {
#if TORCH_VERSION_MAJOR >= 2
  const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<torch::optim::AdamWParamState*> states;
  for (auto& p : group.params())
    if (p.grad().defined()) params.push_back(p);
  if (params.empty()) return;
  for (auto& p : params) {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) {  // as torch::optim::AdamW::step initializes a parameter's state
      auto state = std::make_unique<torch::optim::AdamWParamState>();
      state->step(0);
      state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      if (options.amsgrad()) state->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      it = state_.emplace(p.unsafeGetTensorImpl(), std::move(state)).first;
    }
    auto& state = static_cast<torch::optim::AdamWParamState&>(*it->second);
    states.push_back(&state);
    grads.push_back(p.grad());
    exp_avgs.push_back(state.exp_avg());
    exp_avg_sqs.push_back(state.exp_avg_sq());
    if (options.amsgrad()) max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
  }
  // The kernel reads each parameter's step count (after this step's increment) from a float32
  // scalar on the device: one tensor for all, since a group's parameters step together (a
  // parameter that missed steps, having had no gradient, gets its own count).
  std::vector<at::Tensor> steps;
  const auto step_options = torch::TensorOptions().dtype(torch::kFloat32).device(params.front().device());
  const int64_t first = states.front()->step();
  bool uniform = true;
  for (const auto* st : states) uniform = uniform && st->step() == first;
  if (uniform) {
    steps = torch::full({static_cast<int64_t>(states.size())}, static_cast<double>(first + 1), step_options).unbind(0);
  } else {
    for (const auto* st : states) steps.push_back(torch::full({}, static_cast<double>(st->step() + 1), step_options));
  }
  const auto [beta1, beta2] = options.betas();
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, options.lr(), beta1, beta2,
                    options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false);
  for (auto* st : states) st->step(st->step() + 1);
#else
  (void)group;
  throw std::logic_error("AdamW: the fused step needs LibTorch 2.x");
#endif
}

double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm) {
  if (auto* self_clipping = dynamic_cast<SelfClippingOptimizer*>(&optimizer)) return self_clipping->clip_grad_norm(max_norm);
  return clip_param_grad_norm(optimizer, max_norm);
}

double SelfClippingOptimizer::measure_and_clip(double max_norm) {
  auto* optimizer = dynamic_cast<torch::optim::Optimizer*>(this);
  if (!optimizer) throw std::logic_error("SelfClippingOptimizer: not an optimizer");
  return clip_param_grad_norm(*optimizer, max_norm);
}


void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& path) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  save_archive(archive, path);
}

void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": cannot load the optimizer state: " + e.what_without_backtrace());
  }
}

}  // namespace grpo::core
