#include "core/train/optimizer.h"

#include <cmath>
#include <stdexcept>

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
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.detach().to(torch::kDouble).norm(2));
  const double norm = torch::stack(norms).norm(2).to(torch::kCPU).item<double>();  // read back on the host
  if (std::isfinite(norm) && max_norm > 0.0 && norm > max_norm) {
    const double coef = max_norm / (norm + 1e-6);
    torch::NoGradGuard no_grad;
    for (const auto& g : grads) g.mul_(coef);
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

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& model, const OptimizerSettings& s) {
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

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<torch::Tensor>& parameters, const OptimizerSettings& s) {
  return std::make_unique<torch::optim::AdamW>(adamw_param_groups(parameters, s), adamw_options(s, s.weight_decay));
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
