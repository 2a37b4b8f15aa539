#include "core/model/attention/varlen.h"

#include <algorithm>
#include <stdexcept>

#include "core/model/host_copy.h"

namespace grpo::core {

VarlenPlan varlen_plan(const std::vector<int64_t>& cu_seqlens, int64_t window, const torch::Device& device,
                       VarlenCopy* copy) {
  if (cu_seqlens.size() < 2 || cu_seqlens.front() != 0)
    throw std::invalid_argument("varlen_plan: cu_seqlens must start at 0 and hold at least one sequence");
  VarlenPlan plan;
  std::vector<int32_t> cu;  // the kernel's type
  cu.reserve(cu_seqlens.size());
  for (std::size_t i = 0; i < cu_seqlens.size(); ++i) {
    if (i > 0) plan.max_seqlen = std::max(plan.max_seqlen, cu_seqlens[i] - cu_seqlens[i - 1]);
    cu.push_back(static_cast<int32_t>(cu_seqlens[i]));
  }
  if (copy != nullptr && copy->device.defined() && copy->device.device() == device && copy->host == cu_seqlens) {
    plan.cu_seqlens = copy->device;
  } else {
    plan.cu_seqlens = to_device(torch::tensor(cu, torch::kInt32), device);
    if (copy != nullptr) *copy = VarlenCopy{cu_seqlens, plan.cu_seqlens};
  }
  // Our window is i - window < j <= i, so the kernel's left offset is window - 1.
  if (window > 0) plan.window_left = window - 1;
  return plan;
}

torch::Tensor varlen_visibility(const VarlenPlan& plan) {
  auto cu = plan.cu_seqlens.to(torch::kCPU, torch::kLong);
  const int64_t n = cu.size(0) - 1, T = cu[n].item<int64_t>();
  auto index = torch::arange(T, torch::kLong);
  // Sequence of each token: the number of boundaries cu[1..n] at or below it.
  auto sequence = torch::searchsorted(cu.narrow(0, 1, n), index, /*out_int32=*/false, /*right=*/true);
  auto i = index.view({T, 1}), j = index.view({1, T});
  auto visible = (sequence.view({T, 1}) == sequence.view({1, T})) & (j <= i + plan.window_right);
  if (plan.window_left >= 0) visible = visible & (j >= i - plan.window_left);
  return visible;
}

}  // namespace grpo::core
