// KlEstimator: per-token estimate of KL(policy || reference) from the two log-probs of the
// sampled tokens (the k1, k2, k3 and k4 estimators of Schulman's "Approximating KL divergence").
#pragma once

#include "grpo/sdk/torch/batch.h"

GRPO_SDK_NAMESPACE_BEGIN

// Thread safety: const and reentrant.
class KlEstimator {
 public:
  virtual ~KlEstimator() = default;
  // logp, ref_logp: [B, T]. Returns [B, T].
  virtual at::Tensor compute(const at::Tensor& logp, const at::Tensor& ref_logp) const = 0;
};

template <>
struct ComponentTraits<KlEstimator> {
  static constexpr ComponentKind kind = ComponentKind::kKlEstimator;
  static const char* torch_version() { return detail::compiled_torch_version(); }
};

GRPO_SDK_NAMESPACE_END
