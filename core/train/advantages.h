// The advantage stage of a training step: the configured estimator (algorithm.advantage) turns
// the step's shaped rewards into one advantage per response token (Sample::advantages), over
// this process's groups or, data-parallel, over the global batch. With the KL penalty in the
// reward (algorithm.kl_in_reward), the per-token kl(old, ref) enters the token rewards first
// (reward_token_kl, core/algo/kl_penalty.h).
//
// Devices: the estimator's input tensors are built on the host (filled element by element) and
// moved to `device`, the policy model's; whatever device the estimator answers on, the
// advantages are read back on the host. Values and operation order do not depend on it.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/metrics/metrics_log.h"
#include "core/model/transformer.h"
#include "core/train/policy_update.h"
#include "core/train/rollout_batch.h"
#include "grpo/sdk/torch/advantage.h"
#include "grpo/sdk/torch/kl_estimator.h"

namespace grpo::core {

namespace dist {
class Communicator;
}

// Per-token kl(old, ref) of every sample, no gradient: the log-probs of `policy` (the weights
// that are about to be updated: the "old" policy) and of `reference` (sample_logprobs with
// `options`' packing), through `estimator`, on the models' device. One float32 vector per
// sample (its response length), in group / sample order.
// `reference_adapters_off` set (LoRA): `reference` is `policy`, computed with these adapters off.
std::vector<std::vector<float>> reward_token_kl(CausalLM& policy, CausalLM& reference, const sdk::KlEstimator& estimator,
                                                const std::vector<Group>& groups, const UpdateOptions& options,
                                                LoraAdapters* reference_adapters_off = nullptr);

// Sets Sample::advantages (one per response token) of every sample of `groups` from
// `estimator`. Its input: response_mask [B, T] float32 (T = longest response, at least 1),
// rewards [B] float32 (Sample::reward), group_ids [B] int64 (index in `groups`), and, with
// `token_kl` (one row per sample, as reward_token_kl returns), token_rewards [B, T]: the
// sequence reward on the last response token minus reward_kl_coef * kl on every response token.
// Returns, in order: the KL-in-reward metrics (with token_kl), val/advantages_mean, _std, _min,
// _max over response tokens, then the estimator's scalar metrics. Nothing for a batch without
// samples. Throws std::runtime_error when the estimator's advantages are not [B, T].
MetricList compute_advantages(const sdk::AdvantageEstimator& estimator, std::vector<Group>& groups,
                              const std::vector<std::vector<float>>* token_kl, double reward_kl_coef,
                              const torch::Device& device);

// Data-parallel advantages: every rank sends what the estimator reads of its groups (rewards,
// response lengths, per-token KL) to all, each rank runs the estimator on the GLOBAL batch (rank
// order = the order one process would hold), so estimators with batch-wide statistics
// (REINFORCE++'s whitening) see what one process would, and keeps its own groups' advantages.
// Every rank must call it (a collective), also without groups. Returns the estimator's
// metrics; *first_group / *global_groups place this rank's groups in the global batch.
MetricList compute_global_advantages(dist::Communicator& comm, const sdk::AdvantageEstimator& estimator,
                                     std::vector<Group>& groups, const std::vector<std::vector<float>>* token_kl,
                                     double reward_kl_coef, std::int64_t step, std::size_t* first_group,
                                     std::size_t* global_groups, const torch::Device& device);

// The advantages of one step, as the trainer computes them.
struct StepAdvantages {
  MetricList metrics;
  std::size_t first_group = 0;    // global index of this rank's first group (0 in one process)
  std::size_t global_groups = 0;  // groups of the step over every rank; 0: no update this step
};

// compute_global_advantages with `comm` (data-parallel), else compute_advantages when there
// are groups.
StepAdvantages step_advantages(const sdk::AdvantageEstimator& estimator, std::vector<Group>& groups,
                               const std::vector<std::vector<float>>* token_kl, double reward_kl_coef,
                               dist::Communicator* comm, std::int64_t step, const torch::Device& device);

}  // namespace grpo::core
