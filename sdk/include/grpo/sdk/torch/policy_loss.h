// PolicyLoss: per-token policy-gradient loss before aggregation (aggregation is the
// trainer's, so that denominators can be global across micro-batches and ranks).
#pragma once

#include <vector>

#include "grpo/sdk/torch/batch.h"

GRPO_SDK_NAMESPACE_BEGIN

struct PolicyLossInput {
  TokenBatch batch;
  at::Tensor logp;          // [B, T] current policy log-probs (requires grad)
  at::Tensor old_logp;      // [B, T] log-probs of the policy that produced the rollout
  at::Tensor rollout_logp;  // [B, T] rollout engine's log-probs, optional (mismatch correction)
  at::Tensor advantages;    // [B, T]
};

struct PolicyLossOutput {
  at::Tensor per_token_loss;  // [B, T]; masked positions are ignored by aggregation
  std::vector<Metric> metrics;
};

// Thread safety: called from one thread.
class PolicyLoss {
 public:
  virtual ~PolicyLoss() = default;
  virtual PolicyLossOutput compute(const PolicyLossInput& input) const = 0;
};

template <>
struct ComponentTraits<PolicyLoss> {
  static constexpr ComponentKind kind = ComponentKind::kPolicyLoss;
  static const char* torch_version() { return detail::compiled_torch_version(); }
};

GRPO_SDK_NAMESPACE_END
