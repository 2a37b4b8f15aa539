#include "core/algo/loss_aggregation.h"

#include <algorithm>
#include <stdexcept>

namespace grpo::core {

AggregationScale aggregation_scale(const std::vector<at::Tensor>& micro_batch_masks, std::int64_t max_response_len) {
  AggregationScale s;
  std::int64_t widest = 0;
  for (const at::Tensor& m : micro_batch_masks) {
    if (m.dim() != 2) throw std::invalid_argument("aggregation_scale: a mask must be [B, T], got " + std::to_string(m.dim()) + " dims");
    const at::Tensor mf = m.detach().to(at::kDouble);
    s.global_tokens += mf.sum().item<double>();
    s.global_sequences += (mf.sum(1) > 0).sum().item<double>();
    s.global_rows += static_cast<double>(m.size(0));
    widest = std::max<std::int64_t>(widest, m.size(1));
  }
  s.max_response_len = max_response_len > 0 ? max_response_len : widest;
  return s;
}

AggregationScale merge_scales(const AggregationScale& a, const AggregationScale& b) {
  AggregationScale s;
  s.global_tokens = a.global_tokens + b.global_tokens;
  s.global_sequences = a.global_sequences + b.global_sequences;
  s.global_rows = a.global_rows + b.global_rows;
  s.max_response_len = std::max(a.max_response_len, b.max_response_len);
  return s;
}

at::Tensor aggregate_loss(const at::Tensor& per_token_loss, const at::Tensor& mask, LossAggregation mode,
                          const AggregationScale& scale) {
  const at::Tensor m = mask.to(per_token_loss.scalar_type());
  // where() rather than L*M alone: a NaN/inf loss at a padded position must not leak in.
  const at::Tensor masked = at::where(m > 0, per_token_loss, at::zeros_like(per_token_loss)) * m;
  auto at_least_one = [](double v) { return std::max(v, 1.0); };
  switch (mode) {
    case LossAggregation::kTokenMean:
      return masked.sum() / at_least_one(scale.global_tokens);
    case LossAggregation::kSeqMeanTokenMean: {
      const at::Tensor per_seq = masked.sum(-1) / m.sum(-1).clamp_min(1.0);
      return per_seq.sum() / at_least_one(scale.global_sequences);
    }
    case LossAggregation::kSeqMeanTokenSum:
      return masked.sum() / at_least_one(scale.global_sequences);
    case LossAggregation::kSeqMeanTokenSumNorm:
      return masked.sum() / (at_least_one(scale.global_rows) * at_least_one(static_cast<double>(scale.max_response_len)));
  }
  throw std::invalid_argument("aggregate_loss: unknown mode");
}

}  // namespace grpo::core
