// Rollout/trainer mismatch correction: the rollout engine's log-probs (`samp`) of the sampled
// tokens differ from the trainer's recomputation (`old`) — kernels, precision, batching. The
// policy-gradient estimate is corrected with importance weights of the trainer policy over
// the sampling policy:
//
//   token:    log_rho_t = clamp(old_t - samp_t, -log_ratio_clamp, log_ratio_clamp),  rho_t = exp(log_rho_t)
//   sequence: log_rho   = clamp(R_t(old_t - samp_t over response tokens), -c, c),   R = sum | mean
//             rho_t = rho for every token of the sequence
//   truncate: w = min(rho, max)                      (truncated IS, C = max)
//   mask:     w = rho where min <= rho <= max, else 0 (rejection)
//   none:     w = 1
//
// The weights are detached (stop-gradient) and multiply the per-token policy loss; they are 0
// outside the response mask. Masked-out (rejected) tokens keep counting in the aggregation
// denominators (the weight zeroes their loss only), as in TRL.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/algo/modes.h"
#include "grpo/sdk/torch/component.h"

namespace grpo::core {

// algorithm.mismatch_correction.{mode, max, min, sequence_reduction, log_ratio_clamp}
struct MismatchCorrectionOptions {
  MismatchMode mode = MismatchMode::kNone;
  double max = 2.0;   // C: truncation cap, and the upper bound of the mask modes (TRL uses 3)
  double min = 0.0;   // lower bound of the mask modes (0 = no lower rejection, TRL behaviour)
  SequenceReduction sequence_reduction = SequenceReduction::kSum;
  double log_ratio_clamp = 10.0;  // bound of the exponent input
};

// Throws std::invalid_argument naming the field: max > 0, 0 <= min < max, log_ratio_clamp > 0.
void validate(const MismatchCorrectionOptions& options);

struct MismatchCorrection {
  at::Tensor weights;                      // [B, T], detached, 0 outside the mask
  std::vector<sdk::Metric> metrics;        // 0-dim tensors, see the .cpp / docs for names
};

// old_logp, rollout_logp: [B, T] log-probs of the sampled tokens (trainer, rollout engine);
// mask: [B, T] response mask. Values outside the mask are ignored (may be NaN).
// Always computes the mismatch metrics, also with mode none.
MismatchCorrection mismatch_correction(const at::Tensor& old_logp, const at::Tensor& rollout_logp,
                                       const at::Tensor& mask, const MismatchCorrectionOptions& options);

}  // namespace grpo::core
