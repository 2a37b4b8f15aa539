// Masked reductions over token tensors, shared by the algorithm plugins and available to user
// plugins: every advantage, loss and metric is a statistic over response tokens only.
// `mask` is the float response mask (1 = counts, 0 = ignored), broadcastable to `x`.
#pragma once

#include <ATen/ATen.h>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

// sum(x * mask) over `dim` (all dims when dim is empty).
inline at::Tensor masked_sum(const at::Tensor& x, const at::Tensor& mask, at::OptionalIntArrayRef dim = c10::nullopt) {
  return dim.has_value() ? (x * mask).sum(*dim) : (x * mask).sum();
}

// sum(x * mask) / sum(mask); 0 where the mask is empty (never NaN).
inline at::Tensor masked_mean(const at::Tensor& x, const at::Tensor& mask, at::OptionalIntArrayRef dim = c10::nullopt) {
  const at::Tensor m = mask.expand_as(x);
  const at::Tensor count = dim.has_value() ? m.sum(*dim) : m.sum();
  return masked_sum(x, m, dim) / count.clamp_min(1.0);
}

// Variance of the masked elements of `x` (all of them): unbiased (n - 1) by default, as
// verl's masked_var; population (n) with unbiased = false.
inline at::Tensor masked_var(const at::Tensor& x, const at::Tensor& mask, bool unbiased = true) {
  const at::Tensor m = mask.expand_as(x);
  const at::Tensor n = m.sum();
  const at::Tensor centred = (x - masked_mean(x, m)) * m;
  const at::Tensor denom = unbiased ? (n - 1.0).clamp_min(1.0) : n.clamp_min(1.0);
  return (centred * centred).sum() / denom;
}

// (x - mean) / sqrt(var + eps) over the masked elements, masked positions set to 0.
// shift_mean = false keeps the mean (verl's masked_whiten option).
inline at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& mask, double eps = 1e-8, bool shift_mean = true) {
  const at::Tensor m = mask.expand_as(x);
  const at::Tensor mean = masked_mean(x, m);
  at::Tensor out = (x - mean) * at::rsqrt(masked_var(x, m) + eps);
  if (!shift_mean) out = out + mean;
  return out * m;
}

GRPO_SDK_NAMESPACE_END
