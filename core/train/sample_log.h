// samples.jsonl: what the policy actually wrote. Every log.samples_every steps (and at the
// first step) grpo-run appends, per logged trajectory, one JSON line:
//   {"step", "group", "sample", "prompt", "ground_truth", "turns": [{"role": "policy" |
//    "observation", "text"}], "tool_calls": [{"tool", "arguments", "observation", "is_error",
//    "timed_out", "seconds"}], "reward", "advantage" (mean over the policy's tokens),
//    "correct", "finished", "response_tokens", "observation_tokens", "kept"}
// the first sample of each of the step's first log.samples_per_step groups; when the step kept
// fewer groups (zero-std groups filtered), groups it dropped fill the rest with "kept": false
// (advantage 0: they enter no update). Reading it is the
// reward-hacking check every practitioner runs. Written by rank 0 from its own groups.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/train/rollout_batch.h"

namespace grpo::core {

class Tokenizer;

class SampleLog {
 public:
  // `path`: the run's samples.jsonl. `resumed_step` >= 0: a resumed run; lines of later steps
  // (written after that checkpoint) are dropped first, with an atomic rewrite.
  SampleLog(std::string path, const Tokenizer& tokenizer, std::int64_t every, std::int64_t per_step,
            std::int64_t resumed_step = -1);

  bool due(std::int64_t step) const { return every_ > 0 && (step == 1 || step % every_ == 0); }
  // Appends the step's lines (flushed; one write per step).
  void write(std::int64_t step, const std::vector<Group>& groups, const std::vector<Group>& dropped = {}) const;

  // One trajectory's JSON object (without step/group/sample): exposed for tests and grpo-eval.
  std::string trajectory_json(const Group& group, const Sample& sample) const;

 private:
  std::string path_;
  const Tokenizer& tokenizer_;
  std::int64_t every_, per_step_;
};

}  // namespace grpo::core
