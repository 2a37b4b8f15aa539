// What one training step carries from generation to the policy update: a group of samples
// per prompt, each with its tokens, the backend's log-probs and, once scored, its reward.
// Torch-free (the update turns these into tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/example.h"
#include "core/tools/tool_call_record.h"

namespace grpo::core {

// One verifier's verdict on one sample (for metrics and logs).
struct VerifierVerdict {
  std::string verifier;   // the configured name ("exact_match", "my_plugin/score")
  double score = 0.0;     // the verifier's raw score in [0, 1] (0 on error/timeout)
  double weight = 1.0;    // the entry's weight
  bool failed = false;    // threw or timed out
  bool timed_out = false;
  std::string details;    // the verifier's details, or the error message
};

struct Sample {
  // Everything after the prompt: with tools, the policy's turns and the observations between.
  std::vector<std::int64_t> response_ids;
  // Empty: every response token was sampled by the policy. Else one per response token: 1 =
  // the policy's, 0 = an observation (a tool's output), which enters no loss, KL, entropy or
  // denominator.
  std::vector<std::uint8_t> policy_mask;
  std::vector<ToolCallRecord> tool_calls;
  std::string text;                    // decoded completion
  std::vector<float> rollout_logprobs;  // one per response token, from the backend (0 for observations)
  bool finished = true;                // stopped (EOS / stop string); false = cut at the limit
  // Filled by scoring and shaping (core/train/rewards.h):
  double verifier_reward = 0.0;        // sum of score * weight * verification_reward (after format gating)
  double model_reward = 0.0;           // the reward model's weighted (normalized) score; 0 without one
  double reward_model_score = 0.0;     // the reward model's raw score (core/train/reward_model.h)
  double reward = 0.0;                 // final shaped reward (verifier_reward + model_reward, shaped)
  bool correct = false;                // every non-format verifier scored >= 0.5 (verifiable_correct_rate)
  bool trainable = true;               // false: enters no loss term (mask_truncated_completions)
  std::vector<VerifierVerdict> verdicts;
  // Filled by the advantage estimator: one per response token.
  std::vector<float> advantages;

  bool is_policy_token(std::size_t t) const { return policy_mask.empty() || policy_mask[t] != 0; }
};

struct Group {
  Example example;                     // the prompt's row
  std::vector<std::int64_t> prompt_ids;
  std::vector<Sample> samples;         // num_samples_per_prompt of them
  std::int64_t policy_version = 0;     // weights version that generated it (staleness = trainer - this)
};

}  // namespace grpo::core
