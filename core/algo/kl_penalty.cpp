#include "core/algo/kl_penalty.h"

#include <cmath>
#include <stdexcept>

namespace grpo::core {

void validate(const KlSettings& s) {
  if (!std::isfinite(s.kl_coef) || s.kl_coef < 0.0)
    throw std::invalid_argument("algorithm.kl_coef must be a finite number >= 0, got " + std::to_string(s.kl_coef));
}

bool needs_reference_model(const KlSettings& s) { return s.kl_coef != 0.0; }
double loss_kl_coef(const KlSettings& s) { return s.kl_in_reward ? 0.0 : s.kl_coef; }
double reward_kl_coef(const KlSettings& s) { return s.kl_in_reward ? s.kl_coef : 0.0; }

at::Tensor add_kl_to_loss(const at::Tensor& per_token_loss, const at::Tensor& kl, double beta) {
  if (beta == 0.0) return per_token_loss;
  return per_token_loss + beta * kl;
}

at::Tensor kl_in_token_rewards(const at::Tensor& token_rewards, const at::Tensor& kl, const at::Tensor& mask, double coef) {
  if (coef == 0.0) return token_rewards;
  const at::Tensor m = mask.to(token_rewards.scalar_type());
  const at::Tensor penalty = at::where(m > 0, kl.detach().to(token_rewards.scalar_type()), at::zeros_like(m)) * m;
  return token_rewards - coef * penalty;
}

namespace {
at::Tensor token_mean(const at::Tensor& x, const at::Tensor& m) {
  return at::where(m > 0, x, at::zeros_like(x)).mul(m).sum() / m.sum().clamp_min(1.0);
}
}  // namespace

std::vector<sdk::Metric> kl_loss_metrics(const at::Tensor& kl, const at::Tensor& mask, double beta) {
  const at::Tensor k = kl.detach();
  const at::Tensor mean = token_mean(k, mask.to(k.scalar_type()));
  return {{"objective/kl_avg", mean}, {"loss/kl_avg", mean * beta}};
}

std::vector<sdk::Metric> kl_reward_metrics(const at::Tensor& kl, const at::Tensor& mask, double coef) {
  const at::Tensor k = kl.detach();
  const at::Tensor m = mask.to(k.scalar_type());
  const at::Tensor per_seq = at::where(m > 0, k, at::zeros_like(k)).mul(m).sum(-1) / m.sum(-1).clamp_min(1.0);
  return {{"actor/reward_kl_penalty", per_seq.mean()},
          {"actor/reward_kl_penalty_coeff", at::scalar_tensor(coef, k.options())}};
}

}  // namespace grpo::core
