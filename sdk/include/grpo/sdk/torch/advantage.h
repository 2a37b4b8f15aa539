// AdvantageEstimator: sequence rewards (and optional token rewards) to per-token advantages
// (group z-score for GRPO, group-centred for Dr.GRPO, leave-one-out for RLOO, ...).
#pragma once

#include <vector>

#include "grpo/sdk/torch/batch.h"

GRPO_SDK_NAMESPACE_BEGIN

struct AdvantageInput {
  TokenBatch batch;
  at::Tensor rewards;        // [B] float: sequence-level reward
  at::Tensor token_rewards;  // [B, T] float, optional (undefined when unused)
};

struct AdvantageOutput {
  at::Tensor advantages;  // [B, T] float, zero outside the response mask
  at::Tensor returns;     // [B, T] float, optional
  std::vector<Metric> metrics;
};

// Thread safety: called from one thread. May throw; the trainer stops the step with the message.
class AdvantageEstimator {
 public:
  virtual ~AdvantageEstimator() = default;
  virtual AdvantageOutput compute(const AdvantageInput& input) const = 0;
};

template <>
struct ComponentTraits<AdvantageEstimator> {
  static constexpr ComponentKind kind = ComponentKind::kAdvantage;
  static const char* torch_version() { return detail::compiled_torch_version(); }
};

GRPO_SDK_NAMESPACE_END
