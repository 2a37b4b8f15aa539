// How a mixture-of-experts block runs its experts (SparseMoeBlock, core/model/transformer.h):
// the routed rows come sorted by expert, expert e's rows ending at ends[e], and each expert's
// gated MLP runs on its slice. Two ways, same results:
//  - grouped: one matrix product per projection for all experts (LibTorch's _grouped_mm over the
//    experts' weights stacked [E, out, in], as torchtitan and transformers 5 run their experts).
//    Nothing is read back to the host: the slices are cut on the device from `ends`, so the
//    step can be captured in a CUDA graph. The block uses it on CUDA with bf16 operands on sm90,
//    where LibTorch has a CUTLASS kernel (elsewhere LibTorch loops over the groups itself after
//    reading `ends` on the host). The stack's backward gives an expert without rows a zero
//    gradient, not none.
//  - looped: each expert's MLP module on its slice, cut on the host. The block's way on the
//    CPU (no host read to save there, and the stack would copy every expert's weights: twice
//    the time of a 32-row decode step on Qwen3-30B-A3B's layer), with LibTorch before 2.9, on
//    other GPUs and dtypes, and when an expert's projections carry what the stack leaves out (a
//    hook that is active, e.g. a LoRA adapter switched on; biases; fused gate/up).
#pragma once

#include <torch/torch.h>

#include <string>

namespace grpo::core {

// Whether this LibTorch has _grouped_mm with its fallback for every device (2.9 and later).
bool grouped_experts_compiled();

// Why `experts` (a ModuleList of MLP) cannot run grouped on rows like `routed`; empty when
// they can. Checked on every pass: projection hooks (LoRA adapters) are switched on and off at run time.
std::string grouped_experts_unsupported(const torch::nn::ModuleList& experts, const torch::Tensor& routed);

// Why SparseMoeBlock runs `experts` one by one on rows like `routed` (cutting their slices on
// the host); empty when it runs them grouped: on CUDA where grouped_experts_unsupported is empty.
std::string experts_run_looped(const torch::nn::ModuleList& experts, const torch::Tensor& routed);

// routed [M, hidden] sorted by expert; ends [E] int32 on routed's device: expert e's rows are
// [ends[e-1], ends[e]) (ends[-1] = 0, ends[E-1] = M). Returns [M, hidden], row m the output of
// its expert's MLP, in the dtype autocast computes in (the experts' dtype when it is off).
// Differentiable in `routed` and in the experts' parameters.
torch::Tensor run_experts_grouped(const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends);
torch::Tensor run_experts_looped(const torch::nn::ModuleList& experts, const torch::Tensor& routed, const torch::Tensor& ends);

}  // namespace grpo::core
