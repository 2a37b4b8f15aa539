// Tensor conventions shared by advantage estimators, policy losses and KL estimators.
//
// A batch holds B sequences; token tensors are [B, T], right-padded, with `response_mask`
// (float, 1.0 on response tokens that enter the loss, 0.0 elsewhere). Log-probs are the
// log-probabilities of the tokens actually sampled, aligned with the response positions.
#pragma once

#include "grpo/sdk/torch/component.h"

GRPO_SDK_NAMESPACE_BEGIN

struct TokenBatch {
  at::Tensor response_mask;  // [B, T] float
  at::Tensor group_ids;      // [B] int64: the samples of one prompt share an id
};

GRPO_SDK_NAMESPACE_END
