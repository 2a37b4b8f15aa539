#include "core/model/attention/kernels.h"

#include <torch/version.h>

#include <cmath>
#include <limits>
#include <stdexcept>

// LibTorch 2.x has the public scaled_dot_product_attention (with a scale and grouped-query
// heads) and ATen's FlashAttention-2; 1.13 (Debian 12's) only a private math op.
#if TORCH_VERSION_MAJOR >= 2
#define GRPO_TORCH_SDPA 1
#endif

namespace grpo::core::attention_kernels {

torch::Tensor eager(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& allowed,
                    double scaling, double softcap) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  const int64_t rep = H / Hkv;
  // The rep query heads of KV head g (heads g*rep .. g*rep+rep-1, as in transformers'
  // repeat_kv) share its keys and values: fold them into the query rows, so that K and V are
  // read in place instead of being expanded (copied) rep times per call.
  auto qg = q.reshape({B, Hkv, rep * T, D});
  auto scores = (torch::matmul(qg, k.transpose(-1, -2)) * scaling).view({B, Hkv, rep, T, S});
  if (softcap > 0) scores = torch::tanh(scores / softcap) * softcap;  // Gemma 2, before the mask
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type()).view({B, Hkv, rep * T, S});
  auto out = torch::matmul(probs, v);  // [B, Hkv, rep * T, D]
  return out.view({B, H, T, D});
}

bool sdpa_compiled() { return true; }

bool sdpa_fused() {
#ifdef GRPO_TORCH_SDPA
  return true;
#else
  return false;
#endif
}

torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& allowed,
                   double scaling) {
  const int64_t rep = q.size(1) / k.size(1);
#ifdef GRPO_TORCH_SDPA
  // CUDA: with a mask only the memory-efficient kernel applies, and it takes no grouped heads
  // (enable_gqa would drop to the math kernel), so the keys are expanded; the CPU kernel takes
  // both.
  if (q.is_cuda() && rep > 1) {
    auto k_full = k.repeat_interleave(rep, 1), v_full = v.repeat_interleave(rep, 1);
    if (!allowed.defined()) return at::scaled_dot_product_attention(q, k_full, v_full, {}, 0.0, true, scaling);
    return at::scaled_dot_product_attention(q, k_full, v_full, allowed, 0.0, false, scaling);
  }
  if (!allowed.defined()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, scaling, rep > 1);
  return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, false, scaling, rep > 1);
#else
  // ATen 1.13's math op: no scale argument (it divides by sqrt(D): q is pre-scaled to give
  // `scaling`), no grouped heads, an additive float mask.
  auto k_full = rep > 1 ? k.repeat_interleave(rep, 1) : k;
  auto v_full = rep > 1 ? v.repeat_interleave(rep, 1) : v;
  const double to_scaling = scaling * std::sqrt(static_cast<double>(q.size(-1)));
  if (!allowed.defined())
    return std::get<0>(at::_scaled_dot_product_attention(q * to_scaling, k_full, v_full, c10::nullopt, 0.0, false,
                                                         /*is_causal=*/true));
  auto mask = torch::zeros(allowed.sizes(), q.options()).masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  return std::get<0>(at::_scaled_dot_product_attention(q * to_scaling, k_full, v_full, mask, 0.0, false, false));
#endif
}

bool flash_varlen_compiled() {
#ifdef GRPO_TORCH_SDPA
  return true;
#else
  return false;
#endif
}

torch::Tensor flash_varlen(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const VarlenPlan& plan,
                           double scaling) {
#ifdef GRPO_TORCH_SDPA
  std::optional<int64_t> left, right;
  if (plan.window_left >= 0) {
    left = plan.window_left;
    right = plan.window_right;
  }
  // Differentiable: autograd runs ATen's _flash_attention_backward with the saved logsumexp.
  return std::get<0>(at::_flash_attention_forward(q, k, v, plan.cu_seqlens, plan.cu_seqlens, plan.max_seqlen,
                                                  plan.max_seqlen, 0.0, /*is_causal=*/true,
                                                  /*return_debug_mask=*/false, scaling, left, right));
#else
  (void)q, (void)k, (void)v, (void)plan, (void)scaling;
  throw std::logic_error("flash_varlen attention needs LibTorch 2.x with CUDA");
#endif
}

}  // namespace grpo::core::attention_kernels
