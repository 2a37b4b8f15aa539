#include "core/algo/mismatch_correction.h"

#include <cmath>
#include <stdexcept>

namespace grpo::core {


void validate(const MismatchCorrectionOptions& o) {
  if (!(o.max > 0.0)) throw std::invalid_argument("mismatch_correction.max must be > 0, got " + std::to_string(o.max));
  if (!(o.min >= 0.0) || !(o.min < o.max))
    throw std::invalid_argument("mismatch_correction.min must satisfy 0 <= min < max, got min " + std::to_string(o.min) +
                                ", max " + std::to_string(o.max));
  if (!(o.log_ratio_clamp > 0.0))
    throw std::invalid_argument("mismatch_correction.log_ratio_clamp must be > 0, got " + std::to_string(o.log_ratio_clamp));
}

MismatchCorrection mismatch_correction(const at::Tensor& old_logp, const at::Tensor& rollout_logp,
                                       const at::Tensor& mask, const MismatchCorrectionOptions& o) {
  validate(o);
  at::NoGradGuard no_grad;
  const at::Tensor m = mask.detach().to(old_logp.scalar_type());
  const at::Tensor in = m > 0;
  const at::Tensor zero = at::zeros_like(m);
  // old - samp on response tokens, 0 elsewhere (the rollout log-probs of prompt/padding may be NaN).
  const at::Tensor diff = at::where(in, old_logp.detach() - rollout_logp.detach(), zero);
  const at::Tensor n_tokens = m.sum();
  const at::Tensor abs_diff = diff.abs();

  MismatchCorrection out;
  out.metrics.push_back({"sampling/sampling_logp_difference/mean", abs_diff.sum() / n_tokens.clamp_min(1.0)});
  out.metrics.push_back({"sampling/sampling_logp_difference/max", abs_diff.max()});

  const bool sequence = o.mode == MismatchMode::kSequenceTruncate || o.mode == MismatchMode::kSequenceMask;
  at::Tensor rho;
  if (sequence) {
    at::Tensor seq_log = diff.sum(-1, /*keepdim=*/true);
    if (o.sequence_reduction == SequenceReduction::kMean) seq_log = seq_log / m.sum(-1, true).clamp_min(1.0);
    rho = at::exp(at::clamp(seq_log, -o.log_ratio_clamp, o.log_ratio_clamp)).expand_as(m);
  } else {
    rho = at::exp(at::clamp(diff, -o.log_ratio_clamp, o.log_ratio_clamp));
  }

  at::Tensor affected = at::zeros_like(in);
  at::Tensor w;
  switch (o.mode) {
    case MismatchMode::kNone:
      w = at::ones_like(m);
      break;
    case MismatchMode::kTokenTruncate:
    case MismatchMode::kSequenceTruncate:
      affected = rho > o.max;
      w = at::clamp_max(rho, o.max);
      break;
    case MismatchMode::kTokenMask:
    case MismatchMode::kSequenceMask:
      affected = at::logical_or(rho < o.min, rho > o.max);
      w = at::where(affected, zero, rho);
      break;
  }
  w = at::where(in, w, zero).contiguous();
  const at::Tensor affected_f = at::logical_and(affected, in).to(m.scalar_type());
  const at::Tensor frac = affected_f.sum() / n_tokens.clamp_min(1.0);
  const at::Tensor rho_in = at::where(in, rho, zero);
  out.metrics.push_back({"sampling/importance_sampling_ratio/mean", rho_in.sum() / n_tokens.clamp_min(1.0)});
  out.metrics.push_back({"sampling/importance_sampling_ratio/max", rho_in.max()});
  // min over response tokens; 1 (no mismatch) when there are none, never inf.
  const at::Tensor rho_min = at::where(in, rho, at::full_like(rho, INFINITY)).min();
  out.metrics.push_back({"sampling/importance_sampling_ratio/min", at::where(n_tokens > 0, rho_min, at::ones_like(rho_min))});
  out.metrics.push_back({"sampling/is_weight/mean", w.sum() / n_tokens.clamp_min(1.0)});
  if (o.mode == MismatchMode::kTokenTruncate || o.mode == MismatchMode::kSequenceTruncate)
    out.metrics.push_back({"sampling/is_truncated_frac", frac});
  if (o.mode == MismatchMode::kTokenMask || o.mode == MismatchMode::kSequenceMask)
    out.metrics.push_back({"sampling/is_masked_frac", frac});
  out.weights = w;
  return out;
}

}  // namespace grpo::core
