// Loss aggregation: how per-token losses L [B, T] (masked by the response mask M) become the
// scalar that is back-propagated. The denominators are GLOBAL: computed once for the whole
// accumulated batch (all micro-batches of one optimizer step, all data-parallel ranks), so the
// loss and its gradient do not depend on the micro-batch size or the world size.
//
//   token-mean              sum(L*M) / global_tokens                 (DAPO, open-instruct default)
//   seq-mean-token-mean     sum_s(sum_t(L*M)/|y_s|) / global_sequences   (original GRPO, TRL "grpo")
//   seq-mean-token-sum      sum(L*M) / global_sequences
//   seq-mean-token-sum-norm sum(L*M) / (global_rows * max_response_len)  (Dr.GRPO, a constant)
//
// Use: scale = aggregation_scale(masks of every micro-batch of the step, max_response_len);
// all-reduce it over ranks (merge_scales / SUM of the counts, MAX of max_response_len); then
// for each micro-batch backprop aggregate_loss(L, M, mode, scale). The sum of the micro-batch
// losses over micro-batches and ranks equals the loss of the full batch; so do the gradients
// when the data-parallel gradient reduction SUMS (multiply by world_size if it averages).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/algo/modes.h"

namespace grpo::core {

struct AggregationScale {
  double global_tokens = 0.0;     // response tokens (sum of M) of the accumulated batch
  double global_sequences = 0.0;  // sequences with at least one response token
  double global_rows = 0.0;       // all sequences, empty ones included (Dr.GRPO's "batch")
  std::int64_t max_response_len = 0;
};

// Counts over every micro-batch mask ([B_i, T_i], float or bool) of one optimizer step.
// max_response_len: the configured generation limit (Dr.GRPO's constant); <= 0 uses the
// widest mask (max T_i), which depends on padding — pass the configured limit in training.
AggregationScale aggregation_scale(const std::vector<at::Tensor>& micro_batch_masks, std::int64_t max_response_len = 0);

// Combines the scales of two ranks (or partial batches): counts add, max_response_len is the max.
AggregationScale merge_scales(const AggregationScale& a, const AggregationScale& b);

// This micro-batch's share of the full-batch loss (0-dim tensor, differentiable w.r.t.
// per_token_loss). Never NaN: an empty denominator counts as 1 (the numerator is then 0).
at::Tensor aggregate_loss(const at::Tensor& per_token_loss, const at::Tensor& mask, LossAggregation mode,
                          const AggregationScale& scale);

}  // namespace grpo::core
