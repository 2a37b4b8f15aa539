// Verifier: scores one completion against its ground truth. Torch-free by design: reward
// plugins link nothing but the C++ standard library (readelf -d shows no libtorch).
#pragma once

#include <string>
#include <string_view>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

struct VerifierInput {
  std::string_view prompt;        // the rendered prompt text the policy saw
  std::string_view completion;    // the decoded completion (response only)
  std::string_view ground_truth;  // JSON text: a string, number, list or object, as in the dataset
  std::string_view dataset;       // the row's dataset / verifier label ("gsm8k", "ifeval", ...)
  std::string_view metadata;      // JSON object text with the row's other columns ("{}" when none)
  bool finished = true;           // false when generation stopped at the length limit
};

struct VerifierResult {
  double score = 0.0;   // in [0, 1]; the host scales it by the verifier's weight
  std::string details;  // JSON object text for logs (extracted answer, failed checks); may be empty
};

// Thread safety: verify() is const and must be reentrant: the trainer calls it concurrently
// from a thread pool on one instance. Keep per-call state on the stack.
// Errors: verify() may throw; the host then scores the sample 0, counts the failure and
// records the message in the details. It never takes the run down.
class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual VerifierResult verify(const VerifierInput& input) const = 0;
};

GRPO_SDK_NAMESPACE_END
