// The mixture-of-experts block (SparseMoeBlock, transformer.h), the two ways its experts run
// (moe.h) and the load-balancing loss.
#include "core/model/moe.h"

#include <stdexcept>
#include <vector>

#include <torch/version.h>

#include "core/model/device_info.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define GRPO_HAVE_GROUPED_MM 1
#endif

namespace grpo::core {

namespace {

const MLPImpl& expert_at(const torch::nn::ModuleList& experts, std::size_t e) {
  return *experts->ptr(e)->as<MLPImpl>();
}

torch::Tensor activate(Activation act, const torch::Tensor& gate) {
  return act == Activation::kGeluTanh ? torch::gelu(gate, "tanh") : torch::silu(gate);
}

}  // namespace

bool grouped_experts_compiled() {
#if defined(GRPO_HAVE_GROUPED_MM)
  return true;
#else
  return false;
#endif
}

std::string grouped_experts_unsupported(const torch::nn::ModuleList& experts, const torch::Tensor& routed) {
  if (!grouped_experts_compiled())
    return "this LibTorch (" TORCH_VERSION ") has no grouped matrix product (_grouped_mm, LibTorch 2.9 and later)";
  if (experts->size() == 0) return "the block has no experts";
  const MLPImpl& first = expert_at(experts, 0);
  if (first.gate_up_proj) return "its experts fuse gate and up into one projection";
  const torch::Dtype dtype = autocast_compute_dtype(first.gate_proj->weight);
  // LibTorch's grouped kernel on CUDA takes bf16 on sm90 and sm100 only; anything else makes it
  // loop over the groups after reading their ends on the host (three reads per projection kind,
  // more than the looped way's one). sm100 is left out until its groups without rows are known
  // to get zero weight gradients (pytorch/pytorch#172439 reports otherwise on B200).
  if (routed.is_cuda()) {
    if (dtype != torch::kBFloat16) return "on CUDA the grouped kernel takes bf16 operands only";
    const int capability = cuda_compute_capability(routed.device());
    if (capability / 10 != 9)
      return "on CUDA the grouped kernel is used on sm90 (Hopper) only; this device is " +
             (capability == 0 ? std::string("of unknown compute capability") : "sm" + std::to_string(capability));
  }
  // The kernel reads rows in 16-byte units: both matrix widths must be whole units.
  const int64_t unit = 16 / static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t hidden = first.gate_proj->weight.size(1), inner = first.gate_proj->weight.size(0);
  if (hidden % unit != 0 || inner % unit != 0)
    return "its widths (hidden " + std::to_string(hidden) + ", expert " + std::to_string(inner) +
           ") are not multiples of " + std::to_string(unit) + " elements";
  for (std::size_t e = 0; e < experts->size(); ++e) {
    const MLPImpl& mlp = expert_at(experts, e);
    for (const Projection* p : {&mlp.gate_proj, &mlp.up_proj, &mlp.down_proj}) {
      if ((*p)->hook_active()) return "an adapter on its experts is on";
      if ((*p)->bias.defined()) return "its experts' projections have biases";
    }
  }
  return "";
}

namespace {

void check_ends(const char* who, const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends) {
  if (routed.dim() != 2) throw std::invalid_argument(std::string(who) + ": routed rows must be [rows, hidden]");
  if (ends.dim() != 1 || ends.size(0) != static_cast<int64_t>(experts->size()))
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(ends.numel()) + " group ends for " +
                                std::to_string(experts->size()) + " experts");
}

// run_experts_grouped once grouped_experts_unsupported() is known to be empty.
torch::Tensor grouped_mlp(const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends) {
#if defined(GRPO_HAVE_GROUPED_MM)
  const MLPImpl& first = expert_at(experts, 0);
  const torch::Dtype dtype = autocast_compute_dtype(first.gate_proj->weight);
  // The weights stacked [E, out, in] on every pass (differentiable: the stack's backward hands
  // each expert its slice of the gradient). A persistent stacked copy would save the copy but
  // go stale under weights that change storage without a version bump (sharding's gathers).
  // Each weight cast, then stacked: float32 masters are read once (a stack before the cast would
  // read and write them in float32 first).
  auto stacked = [&](Projection MLPImpl::*member) {
    std::vector<torch::Tensor> weights;
    weights.reserve(experts->size());
    for (std::size_t e = 0; e < experts->size(); ++e) weights.push_back((expert_at(experts, e).*member)->weight.to(dtype));
    return torch::stack(weights);
  };
  // _grouped_mm(a [M, in], b [E, in, out], ends) -> [M, out]: b is the stack transposed, a view
  // in the column-major layout the kernel reads. The rows are cast once per product, as autocast
  // casts them for each linear: under bf16-mixed the gate's and up's gradients then meet in
  // float32, where the looped way adds them, not in bf16.
  const torch::Tensor int_ends = ends.to(torch::kInt32);
  const torch::Tensor gate = at::_grouped_mm(routed.to(dtype), stacked(&MLPImpl::gate_proj).transpose(1, 2), int_ends);
  const torch::Tensor up = at::_grouped_mm(routed.to(dtype), stacked(&MLPImpl::up_proj).transpose(1, 2), int_ends);
  const torch::Tensor inner = activate(first.activation(), gate) * up;
  return at::_grouped_mm(inner, stacked(&MLPImpl::down_proj).transpose(1, 2), int_ends);
#else
  (void)ends;
  throw std::invalid_argument("run_experts_grouped: " + grouped_experts_unsupported(experts, routed));
#endif
}

}  // namespace

std::string experts_run_looped(const torch::nn::ModuleList& experts, const torch::Tensor& routed) {
  if (!routed.is_cuda())
    return "on " + routed.device().str() + " the experts run one by one: no host read to save, and stacking their weights costs more";
  return grouped_experts_unsupported(experts, routed);
}

torch::Tensor run_experts_grouped(const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends) {
  const std::string why = grouped_experts_unsupported(experts, routed);
  if (!why.empty()) throw std::invalid_argument("run_experts_grouped: " + why);
  check_ends("run_experts_grouped", experts, routed, ends);
  return grouped_mlp(experts, routed.contiguous(), ends);
}

torch::Tensor run_experts_looped(const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends) {
  check_ends("run_experts_looped", experts, routed, ends);
  const torch::Tensor host_ends = ends.to(torch::kCPU, torch::kLong);  // where the slices are cut
  const auto* end = host_ends.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  int64_t offset = 0;
  for (std::size_t e = 0; e < experts->size(); ++e) {
    const int64_t count = end[e] - offset;
    if (count == 0) continue;
    outputs.push_back(experts->ptr(e)->as<MLPImpl>()->forward(routed.narrow(0, offset, count)));
    offset = end[e];
  }
  if (outputs.empty()) return torch::zeros_like(routed);  // no rows routed at all
  return torch::cat(outputs);
}

// ---- the block ------------------------------------------------------------------------------

SparseMoeBlockImpl::SparseMoeBlockImpl(const ModelConfig& c, int64_t layer_index)
    : top_k_(c.num_experts_per_tok), norm_topk_prob_(c.norm_topk_prob) {
  gate = register_module("gate", make_projection({ProjectionRole::kRouter, layer_index, c.hidden_size, c.num_experts, false}));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < c.num_experts; ++e) experts->push_back(MLP(c, layer_index, c.moe_intermediate_size));
  if (c.shared_expert_intermediate_size > 0) {
    shared_expert = register_module("shared_expert", MLP(c, layer_index, c.shared_expert_intermediate_size));
    shared_expert_gate = register_module(
        "shared_expert_gate", make_projection({ProjectionRole::kSharedExpertGate, layer_index, c.hidden_size, 1, false}));
  }
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  auto flat = x.reshape({-1, x.size(-1)});  // [N, H]
  // The router in float32 whatever the compute dtype (Megatron's moe_router_dtype=fp32): bf16
  // logits keep 8 significant bits, so experts whose scores differ by less than ~0.4% tie or
  // swap places, and a bf16 pass sends those tokens to other experts than a float32 one — or
  // than the same pass under another GPU kernel: a whole expert's output of difference.
  auto router_logits = gate->forward_float32(flat);  // [N, E] float32
  if (record_router_logits) last_router_logits = router_logits;
  auto probs = torch::softmax(router_logits, -1, torch::kFloat32);
  auto [weights, chosen] = torch::topk(probs, top_k_, -1);  // [N, k], largest first
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  // The (token, choice) pairs sorted by expert (stable: each expert's tokens in order), so that
  // each expert runs once on a contiguous slice: no per-expert search for its tokens (a mask, a
  // nonzero and its host sync each), one gather before and one scatter-add after. The scatter
  // adds each token's experts in ascending expert order, as a loop over the experts would.
  auto [sorted_experts, order] = torch::sort(chosen.flatten(), c10::optional<bool>(true), 0);  // [N * k], stable
  const torch::Tensor token_of = order.div(top_k_, "floor");                                  // its token
  const torch::Tensor routed = flat.index_select(0, token_of);                                // [N * k, H]
  // Expert e's slice ends where the sorted ids pass e: counted on the device, deterministically
  // (CUDA's bincount has no deterministic kernel).
  const auto num_experts = static_cast<int64_t>(experts->size());
  const torch::Tensor ends = torch::searchsorted(
      sorted_experts, torch::arange(num_experts, sorted_experts.options()), /*out_int32=*/true, /*right=*/true);
  const torch::Tensor y = experts_run_looped(experts, routed).empty() ? grouped_mlp(experts, routed, ends)
                                                                      : run_experts_looped(experts, routed, ends);
  const torch::Tensor scaled = y * weights.flatten().index_select(0, order).unsqueeze(-1);
  auto out = torch::zeros_like(flat).index_add_(0, token_of, scaled);  // in place: nothing else saved `out`
  if (shared_expert) out = out + torch::sigmoid(shared_expert_gate(flat)) * shared_expert(flat);
  return out.view(shape);
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& token_mask) {
  if (router_logits.empty()) throw std::invalid_argument("load_balancing_loss: no router logits (is the model an MoE?)");
  auto logits = torch::cat(router_logits, 0);  // [layers * N, E]
  auto probs = torch::softmax(logits.to(torch::kFloat32), -1);
  auto chosen = std::get<1>(torch::topk(probs, top_k, -1));
  auto expert_mask = torch::one_hot(chosen, num_experts).to(torch::kFloat32);  // [layers * N, k, E]
  torch::Tensor tokens_per_expert, prob_per_expert;
  if (!token_mask.defined()) {
    tokens_per_expert = expert_mask.mean(0);  // [k, E]
    prob_per_expert = probs.mean(0);          // [E]
  } else {
    const int64_t layers = static_cast<int64_t>(router_logits.size());
    auto m = token_mask.reshape({-1}).to(torch::kFloat32).to(logits.device()).repeat({layers});  // [layers * N]
    if (m.size(0) != logits.size(0))
      throw std::invalid_argument("load_balancing_loss: token_mask has " + std::to_string(token_mask.numel()) +
                                  " tokens, the router logits " + std::to_string(logits.size(0) / layers));
    tokens_per_expert = (expert_mask * m.view({-1, 1, 1})).sum(0) / m.sum();
    prob_per_expert = (probs * m.view({-1, 1})).sum(0) / m.sum();
  }
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

}  // namespace grpo::core
