// The arguments of FlashAttention's variable-length kernel for a packed row: cumulative
// sequence lengths (int32 on the device), the longest sequence, and the window as
// (left, right) key offsets from each query. Built on any device, so that a CPU test can hold
// them to the eager masks (varlen_visibility is flash's rule written out); the kernel itself
// runs on CUDA only (kernels.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace grpo::core {

struct VarlenPlan {
  torch::Tensor cu_seqlens;  // [n + 1] int32: sequence i is tokens [cu[i], cu[i+1])
  int64_t max_seqlen = 0;
  int64_t window_left = -1;  // a query at i sees keys j >= i - window_left of its sequence; -1 = all
  int64_t window_right = 0;  // ... and j <= i + window_right (causal: 0)
};

// cu_seqlens copied to a device, kept across varlen_plan calls: the layers of one pass share
// one layout, so one host-to-device copy serves them all.
struct VarlenCopy {
  std::vector<int64_t> host;  // the values `device` holds
  torch::Tensor device;       // int32
};

// The plan for sequences cu_seqlens (host values, as AttentionLayout keeps them) and a sliding
// window (0 = full attention), on `device`. With `copy`, its device tensor is reused when it
// holds these values on this device, and replaced otherwise.
VarlenPlan varlen_plan(const std::vector<int64_t>& cu_seqlens, int64_t window, const torch::Device& device,
                       VarlenCopy* copy = nullptr);

// What flash_attn_varlen_func computes as visible for `plan`: [T, T] bool, query row i, key
// column j, true when i and j are in the same sequence and i - left <= j <= i + right (left < 0:
// no lower bound). The test oracle for the plan: it reads only the plan's fields.
torch::Tensor varlen_visibility(const VarlenPlan& plan);

}  // namespace grpo::core
