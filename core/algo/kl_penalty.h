// Where the KL(policy || reference) penalty enters: the loss or the reward.
//
//   loss   (open-instruct beta, verl use_kl_loss):  per_token = pg + beta * kl,  kl = k(logp, ref)
//   reward (verl use_kl_in_reward):                 token_reward = token_reward - kl_coef * kl,
//                                                   kl = k(old_logp, ref) (no gradient), on response tokens
//
// algorithm.kl_coef is the coefficient of either placement; algorithm.kl_in_reward picks the
// reward. kl_coef = 0 disables the penalty: no reference model is needed and none is loaded
// (TRL's default beta 0.0).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "grpo/sdk/torch/component.h"

namespace grpo::core {

struct KlSettings {
  double kl_coef = 0.0;       // algorithm.kl_coef (open-instruct beta 0.05, verl 0.001, TRL 0.0)
  bool kl_in_reward = false;  // algorithm.kl_in_reward
};

// Throws std::invalid_argument unless kl_coef is finite and >= 0.
void validate(const KlSettings& settings);

// True when the penalty is active (kl_coef != 0), in either placement.
bool needs_reference_model(const KlSettings& settings);
// The coefficient of each placement: kl_coef for the chosen one, 0 for the other.
double loss_kl_coef(const KlSettings& settings);
double reward_kl_coef(const KlSettings& settings);

// per_token_loss + beta * kl. With beta == 0, returns per_token_loss and `kl` may be undefined.
at::Tensor add_kl_to_loss(const at::Tensor& per_token_loss, const at::Tensor& kl, double beta);

// token_rewards - coef * kl on response tokens (mask > 0), token_rewards elsewhere. `kl` is
// detached (a reward carries no gradient). With coef == 0, `kl` may be undefined.
at::Tensor kl_in_token_rewards(const at::Tensor& token_rewards, const at::Tensor& kl, const at::Tensor& mask, double coef);

// Metrics of a per-token KL tensor over response tokens:
//   loss placement:   objective/kl_avg (token mean of kl), loss/kl_avg (beta * that)
//   reward placement: actor/reward_kl_penalty (mean over sequences of the per-sequence token
//                     mean, verl), actor/reward_kl_penalty_coeff
std::vector<sdk::Metric> kl_loss_metrics(const at::Tensor& kl, const at::Tensor& mask, double beta);
std::vector<sdk::Metric> kl_reward_metrics(const at::Tensor& kl, const at::Tensor& mask, double coef);

}  // namespace grpo::core
