// The attention kernels behind attend() (core/model/attention/attention.h). Internal to the seam:
// each takes its inputs in the layout its library wants and trusts attend() to have chosen it
// only where it applies (choose_attention_kernel).
#pragma once

#include <torch/torch.h>

#include "core/model/attention/varlen.h"

namespace grpo::core::attention_kernels {

// softmax(q k^T * scaling [soft-capped] + mask) v with grouped-query heads, as transformers'
// eager path: scores in the model dtype, softmax in float32, cast back.
//   q [B, H, T, D], k/v [B, Hkv, S, D], allowed [B or 1, 1, T, S] bool (true = may attend).
torch::Tensor eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& allowed,
                    double scaling, double softcap);

// LibTorch's scaled_dot_product_attention with the same arguments (no soft-capping); `allowed`
// undefined = causal with S == T.
bool sdpa_compiled();
// LibTorch 2.x: sdpa picks fused kernels (flash / memory-efficient on CUDA, flash on CPU); on
// 1.13 it is ATen's math op, no faster than eager.
bool sdpa_fused();
torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& allowed,
                   double scaling);

// FlashAttention-2's variable-length forward (ATen's, with its backward): q [T, H, D],
// k/v [T, Hkv, D] in bf16 or fp16 on CUDA -> [T, H, D].
bool flash_varlen_compiled();
torch::Tensor flash_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const VarlenPlan& plan,
                           double scaling);

}  // namespace grpo::core::attention_kernels
