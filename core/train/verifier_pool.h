// Scoring: runs the configured verifiers on every sample on a fixed-size thread pool, with a
// per-call timeout, and fills the scoring fields of Sample (rollout_batch.h). Torch-free.
//
// Routing (which verifiers judge a sample): every VerificationTarget of the group's Example
// selects verifiers by its label:
//   - label ""  -> every configured verifier except the format verifier;
//   - label L   -> the entries whose `label` list holds L; an entry without a `label` answers
//                  to its configured name, or its component part (after the last '/' of
//                  "plugin/component"); never the format verifier.
// The format verifier (RewardOptions::format_verifier: the first entry whose name matches it
// the same way) runs once per sample, on the first target's ground truth and label.
//
// Failures never stop a run: a call that throws (or returns a score that is not a finite
// number in [0, 1], or not finite for a verifier of ScoreRange::kUnbounded) scores 0 with
// failed = true and the message in details; a call still running its limit
// (verifier_call_timeout) after it started, or that the verifier's own limit stopped
// (sdk::VerifierTimeout), scores 0 with failed = timed_out = true. One summary
// warning per score() is logged when any call failed or timed out.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/example.h"
#include "core/runtime/components.h"
#include "core/train/rewards.h"
#include "core/train/rollout_batch.h"

namespace grpo::core {

struct ScoringStats {
  std::size_t calls = 0;     // verifier calls made (format calls included)
  std::size_t failures = 0;  // calls that threw or returned an invalid score (timeouts not included)
  std::size_t timeouts = 0;  // calls that exceeded timeout_s or threw sdk::VerifierTimeout
  double seconds = 0.0;      // wall time of score()
};

// Whether a configured verifier name ("exact_match", "my_plugin/score") answers to `label`:
// the whole name, or the part after its last '/'. "" matches nothing here (see routing above).
bool verifier_name_matches(const std::string& configured_name, const std::string& label);

// The most threads a verifier's concurrent_calls() can add to the pool.
inline constexpr std::size_t kMaxVerifierThreads = 1024;

// The limit of one call to `slot`: `timeout_s` (reward.timeout_s), or, for a verifier that
// asks for more concurrent calls than the pool's `threads` (it queues them itself and times
// its own work out, as python_reward does per row), timeout_s x ceil(concurrent_calls /
// threads): a call's time then includes its wait behind the others, wave after wave.
double verifier_call_timeout(const VerifierSlot& slot, double timeout_s, std::size_t threads);

// Whether a configured entry answers to a row label (routing above).
bool slot_answers_to(const VerifierSlot& slot, const std::string& label);

// Index of the format verifier's entry in `verifiers`, or nullopt when options.format_verifier
// is "" or names no entry.
std::optional<std::size_t> format_verifier_slot(const std::vector<VerifierSlot>& verifiers, const RewardOptions& options);

// The entries (indices into `verifiers`, in config order) a target label selects (routing above).
std::vector<std::size_t> selected_verifier_slots(const std::string& label, const std::vector<VerifierSlot>& verifiers,
                                                 const RewardOptions& options);

// Checks, before a run starts, that scoring can route every row. Throws std::invalid_argument
// (the caller adds the config location) when
//   - no verifier other than the format verifier is configured;
//   - reward.format_verifier names no configured verifier;
//   - a row has no verification target;
//   - a row's label selects no verifier: "data/train.jsonl:3: verifier label \"gsm8k\" selects
//     no configured verifier (verifier name not registered); configured verifiers: ..." with a
//     count of all rows and labels affected.
void check_verifier_labels(const std::vector<Example>& examples, const std::vector<VerifierSlot>& verifiers,
                           const RewardOptions& options);

class VerifierPool {
 public:
  // `threads` workers (0 = std::thread::hardware_concurrency(), at least 1); a call may run
  // `timeout_s` seconds (> 0) from the moment a worker starts it. score() adds workers when a
  // verifier asks for more concurrent calls (VerifierSlot::concurrent_calls) than there are.
  VerifierPool(std::size_t threads, double timeout_s);
  // Joins the idle workers. Workers abandoned to a timed-out call were detached when the call
  // timed out and are not waited for: they hold only shared state (the job queue, their call's
  // own copies of its inputs, the verifier through its shared_ptr), never the pool or the
  // caller's samples, and exit by themselves if the call ever returns; a verifier that never
  // returns keeps its thread until the process exits.
  ~VerifierPool();
  VerifierPool(const VerifierPool&) = delete;
  VerifierPool& operator=(const VerifierPool&) = delete;

  // Scores every sample of `groups`. `prompt_texts[i]` is the rendered prompt of groups[i]
  // (VerifierInput::prompt); it must have groups.size() entries. Every call of one score() is
  // queued at once; score() returns when each has finished or timed out, so it takes at most
  // about timeout_s longer than the slowest finishing call. A timed-out call's worker is
  // replaced by a fresh one (the pool keeps its size) and its late result is dropped.
  //
  // Fills, for every sample (and resets what an earlier score() left):
  //   verdicts         one per call: the target's selected verifiers target by target, in
  //                    config order, then the format verifier's;
  //   verifier_reward  sum over the non-format verdicts of score * weight * verification_reward;
  //                    format gate mode: 0 unless the format verifier scored >= 0.5;
  //                    additive mode: + format score * its weight * verification_reward;
  //   correct          mean raw score of the non-format verdicts >= 0.5 (false when there are
  //                    none) and, in gate mode, the format verifier scored >= 0.5.
  // reward and trainable are shape_rewards()'s (rewards.h).
  // Throws std::invalid_argument when prompt_texts has the wrong size or
  // options.format_verifier names no entry (check_verifier_labels reports both earlier).
  ScoringStats score(std::vector<Group>& groups, const std::vector<std::string>& prompt_texts,
                     const std::vector<VerifierSlot>& verifiers, const RewardOptions& options);

  std::size_t threads() const { return threads_; }
  double timeout_s() const { return timeout_s_; }
  // Workers given up on so far (each was stuck in a call past the timeout).
  std::size_t abandoned_workers() const;

 private:
  struct Impl;
  std::size_t threads_;
  double timeout_s_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grpo::core
