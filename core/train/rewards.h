// Reward options, reward shaping, zero-std group filtering, active sampling and the reward
// metrics (shared/REFERENCE.md "Rewards" and "Zero-std groups"). Scoring itself (running the
// verifiers) is core/train/verifier_pool.h. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/train/rollout_batch.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct RewardOptions {
  double verification_reward = 10.0;  // a verifier's score x its weight x this
  std::string format_verifier;        // configured name of the format verifier; "" = none
  bool format_additive = false;       // reward.format_mode: false = gate, true = additive
  bool non_stop_penalty = false;
  double non_stop_penalty_value = 0.0;
  std::int64_t overlong_buffer = 0;   // DAPO overlong shaping; 0 = off
  double overlong_penalty_factor = 1.0;
  std::int64_t max_new_tokens = 256;  // rollout.max_new_tokens: the overlong shaping's limit
  bool mask_truncated_completions = false;
  std::size_t num_threads = 0;        // verifier pool size; 0 = hardware threads
  double timeout_s = 30.0;            // per verifier call
};

// Reads reward.* and rollout.max_new_tokens from a validated config tree. Throws
// sdk::ConfigError naming file:line:key for a value out of range (overlong_buffer outside
// [0, max_new_tokens), timeout_s <= 0, num_threads < 0, a non-finite number, ...).
RewardOptions reward_options(const sdk::ConfigValue& root);

// Sets Sample::reward and Sample::trainable of every sample from its verifier_reward (filled
// by VerifierPool::score), in this order:
//   1. reward = verifier_reward + model_reward (the reward model's share, core/train/reward_model.h)
//   2. DAPO overlong shaping (overlong_buffer > 0), len = response token count:
//      expected = max_new_tokens - buffer; reward += min(-(len - expected) / buffer * factor, 0)
//   3. non-stop penalty: an unfinished sample's reward becomes non_stop_penalty_value
//   4. trainable = !(mask_truncated_completions && !finished)
void shape_rewards(std::vector<Group>& groups, const RewardOptions& options);

// True when every shaped reward of the group is the same (exact equality): zero advantage,
// no gradient. A group of one sample (or none) counts as zero-std.
bool is_zero_std_group(const Group& group);

struct GroupFilter {
  std::size_t kept = 0, dropped = 0;
};

// Removes the zero-std groups (is_zero_std_group), keeping the order of the others.
GroupFilter filter_zero_std_groups(std::vector<Group>& groups);

// DAPO dynamic sampling / open-instruct active_sampling: collects groups with reward spread
// over several generation batches until it holds `target_groups` of them.
class ActiveSamplingBatch {
 public:
  // Throws std::invalid_argument for target_groups == 0.
  explicit ActiveSamplingBatch(std::size_t target_groups);

  // Keeps the groups with reward spread (in order); counts the zero-std ones as dropped.
  void add(std::vector<Group> groups);
  bool full() const { return groups_.size() >= target_; }
  // Groups held now (may exceed the target until take()).
  std::size_t size() const { return groups_.size(); }
  // Hands over exactly target_groups groups when full (the ones beyond are dropped and
  // counted in surplus_dropped()), or everything held when not full. Empties the batch, so a
  // second take() returns nothing: read size() to report how many there are.
  std::vector<Group> take();

  std::size_t target() const { return target_; }
  std::size_t batches_added() const { return batches_added_; }
  std::size_t zero_std_dropped() const { return zero_std_dropped_; }
  std::size_t surplus_dropped() const { return surplus_dropped_; }

 private:
  std::size_t target_;
  std::vector<Group> groups_;
  std::size_t batches_added_ = 0;
  std::size_t zero_std_dropped_ = 0;
  std::size_t surplus_dropped_ = 0;
};

// Unbiased pass@k estimate from n samples of which c are correct (Chen et al. 2021):
// 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i) (no huge binomials).
// Throws std::invalid_argument for k < 1, k > n, or c outside [0, n].
double pass_at_k(std::int64_t n, std::int64_t c, std::int64_t k);

// Metrics over every sample of `groups` (open-instruct / TRL names), in this order:
//   objective/scores (mean shaped reward), objective/scores_std (population std, ddof 0),
//   objective/verifiable_correct_rate (share of correct samples), objective/verifier_reward,
//   reward/<verifier>/score and reward/<verifier>/correct_rate (raw score >= 0.5) for each
//   configured verifier name that produced a verdict (sorted by name; failed calls count as 0),
//   reward/verifier_errors and reward/verifier_timeouts (verdict counts; an error is a call that
//   threw or returned an invalid score, a timeout is not an error),
//   val/stop_token_rate (finished share), val/sequence_lengths (mean response tokens),
//   val/sequence_lengths_min, val/sequence_lengths_max, val/num_truncated_masked (samples with
//   trainable == false).
// Empty when there are no samples.
std::vector<std::pair<std::string, double>> reward_metrics(const std::vector<Group>& groups);

}  // namespace grpo::core
