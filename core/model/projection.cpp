#include "core/model/projection.h"

#include <stdexcept>

#include "core/model/precision.h"

namespace grpo::core {

const char* projection_name(ProjectionRole role) {
  switch (role) {
    case ProjectionRole::kQuery: return "q_proj";
    case ProjectionRole::kKey: return "k_proj";
    case ProjectionRole::kValue: return "v_proj";
    case ProjectionRole::kOutput: return "o_proj";
    case ProjectionRole::kGate: return "gate_proj";
    case ProjectionRole::kUp: return "up_proj";
    case ProjectionRole::kDown: return "down_proj";
    case ProjectionRole::kLmHead: return "lm_head";
    case ProjectionRole::kQkv: return "qkv_proj";
    case ProjectionRole::kGateUp: return "gate_up_proj";
    case ProjectionRole::kRouter: return "gate";
    case ProjectionRole::kSharedExpertGate: return "shared_expert_gate";
    case ProjectionRole::kScore: return "score";
  }
  return "projection";
}

ProjectionImpl::ProjectionImpl(const ProjectionSpec& spec)
    : torch::nn::LinearImpl(torch::nn::LinearOptions(spec.in_features, spec.out_features).bias(spec.bias)), spec_(spec) {}

void ProjectionImpl::set_hook(std::shared_ptr<const ProjectionHook> hook) {
  if (hook && hook_)
    throw std::logic_error(std::string("projection ") + projection_name(spec_.role) + " of layer " +
                           std::to_string(spec_.layer) + " has a hook attached already (detach it first)");
  hook_ = std::move(hook);
}

torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) {
  // On CUDA ATen's linear: one matmul with the bias in its epilogue (the C++ frontend's
  // functional::linear adds the bias of a 3-d input in a kernel of its own, and its backward
  // sums it in another). The CPU keeps the arithmetic every CPU test and checkpoint was made with.
  torch::Tensor y = x.is_cuda() ? at::linear(x, weight, bias) : torch::nn::functional::linear(x, weight, bias);
  if (hook_active()) y = hook_->apply(x, std::move(y), is_training());
  return y;
}

torch::Tensor ProjectionImpl::forward_float32(const torch::Tensor& x) {
  AutocastStateScope no_autocast(AutocastState{});  // both autocasts off inside
  auto x32 = x.to(torch::kFloat32);
  // .to() of float32 weights is the weight itself (no copy); bf16 ones are widened exactly.
  torch::Tensor y = torch::nn::functional::linear(x32, weight.to(torch::kFloat32),
                                                  bias.defined() ? bias.to(torch::kFloat32) : bias);
  if (hook_active()) y = hook_->apply(x32, std::move(y), is_training());
  return y;
}

Projection make_projection(const ProjectionSpec& spec) { return Projection(spec); }

}  // namespace grpo::core
