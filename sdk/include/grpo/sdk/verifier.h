// Verifier: scores one completion against its ground truth. Torch-free by design: reward
// plugins link nothing but the C++ standard library (readelf -d shows no libtorch).
#pragma once

#include <cstdint>
#include <stdexcept>
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
  double score = 0.0;   // in [0, 1] (or any finite number: ScoreRange::kUnbounded); the host
                        // scales it by the verifier's weight
  std::string details;  // JSON object text for logs (extracted answer, failed checks); may be empty
};

// The scores a verifier returns (ABI 1.1). kUnit: [0, 1]; the host counts any other score as
// a failed call. kUnbounded: any finite number reaches the reward unchanged (TRL and verl
// reward functions return arbitrary floats); NaN and infinities are still failures.
enum class ScoreRange : std::uint32_t { kUnit = 0, kUnbounded = 1 };

// Thrown by verify() when the verifier's own time limit stopped the call (a verifier that
// queues its calls and times its work out itself, as python_reward does per row): the host
// scores the sample 0 and counts it under reward/verifier_timeouts, not as an error, with
// what() as the reason. A host that predates it counts it as an error (it is a
// std::runtime_error).
class VerifierTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thread safety: verify() is const and must be reentrant: the trainer calls it concurrently
// from a thread pool on one instance. Keep per-call state on the stack.
// Errors: verify() may throw; the host then scores the sample 0, counts the failure (a
// VerifierTimeout: the time-out) and records the message in the details. It never takes the
// run down.
class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual VerifierResult verify(const VerifierInput& input) const = 0;

  // ---- ABI 1.1. Appended after verify() so that 1.0 vtables are a prefix of 1.1 ones; the
  // host calls these only on objects of plugins built for ABI minor >= 1 (a 1.0 plugin's
  // vtable has no such slots) and assumes the defaults for older plugins.

  // The range of verify()'s scores. Asked once, after construction.
  virtual ScoreRange score_range() const { return ScoreRange::kUnit; }

  // How many verify() calls this instance wants in flight at once (0 = no preference: the
  // host's verifier thread count). A verifier that batches concurrent calls (python_reward:
  // workers x batch_size) asks for more than the host's threads so that batches can fill: the
  // host's pool grows to the largest such request (at most 1024 threads). Such a verifier
  // queues calls itself and must time its own work out; the host's per-call limit for it is
  // reward.timeout_s x ceil(concurrent_calls / reward.num_threads), since a call's time then
  // includes its wait behind the others. Asked once, after construction.
  virtual std::uint32_t concurrent_calls() const { return 0; }
};

GRPO_SDK_NAMESPACE_END
