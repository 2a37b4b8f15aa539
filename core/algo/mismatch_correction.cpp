#include "core/algo/mismatch_correction.h"

#include <cmath>
#include <stdexcept>

#include <torch/utils.h>  // torch::NoGradGuard (ATen no longer spells it at:: in LibTorch 2.x)

namespace grpo::core {


void validate(const MismatchCorrectionOptions& o) {
  if (!(o.max > 0.0)) throw std::invalid_argument("mismatch_correction.max must be > 0, got " + std::to_string(o.max));
  if (!(o.min >= 0.0) || !(o.min < o.max))
    throw std::invalid_argument("mismatch_correction.min must satisfy 0 <= min < max, got min " + std::to_string(o.min) +
                                ", max " + std::to_string(o.max));
  if (!(o.log_ratio_clamp > 0.0))
    throw std::invalid_argument("mismatch_correction.log_ratio_clamp must be > 0, got " + std::to_string(o.log_ratio_clamp));
}

namespace {
// max() of a possibly empty tensor ([0, T] batches): `empty` then.
at::Tensor max_or(const at::Tensor& t, double empty) { return t.numel() == 0 ? at::full({}, empty, t.options()) : t.max(); }
}  // namespace

MismatchCorrection mismatch_correction(const at::Tensor& old_logp, const at::Tensor& rollout_logp,
                                       const at::Tensor& mask, const MismatchCorrectionOptions& o) {
  validate(o);
  torch::NoGradGuard no_grad;
  const at::Tensor m = mask.detach().to(old_logp.scalar_type());
  const at::Tensor zero = at::zeros_like(m);
  const at::Tensor raw_diff = old_logp.detach() - rollout_logp.detach();
  // A response token whose log-probs are not finite (-inf on both sides, NaN) gets weight 0
  // instead of poisoning the loss with NaN; it still counts in the aggregation denominators.
  const at::Tensor in = at::logical_and(m > 0, at::isfinite(raw_diff));
  // old - samp on response tokens, 0 elsewhere (the rollout log-probs of prompt/padding may be NaN).
  const at::Tensor diff = at::where(in, raw_diff, zero);
  const at::Tensor n_tokens = m.sum();
  const at::Tensor abs_diff = diff.abs();

  MismatchCorrection out;
  out.metrics.push_back({"sampling/sampling_logp_difference/mean", abs_diff.sum() / n_tokens.clamp_min(1.0)});
  out.metrics.push_back({"sampling/sampling_logp_difference/max", max_or(abs_diff, 0.0)});

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
  out.metrics.push_back({"sampling/importance_sampling_ratio/max", max_or(rho_in, 1.0)});
  // min over response tokens; 1 (no mismatch) when there are none, never inf.
  const at::Tensor rho_min = rho.numel() == 0 ? at::ones({}, rho.options()) : at::where(in, rho, at::full_like(rho, INFINITY)).min();
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
