// Policy-gradient losses, per token, before aggregation (the runtime aggregates, so that the
// denominators can be global over micro-batches and ranks; it also multiplies every loss by
// the train/inference mismatch weight when mismatch correction is on).
//
//   ppo_clip   max(-A*r, -A*clamp(r, 1-clip_low, 1+clip_high)), dual-clip for A<0, TRL delta
//   cispo      -stopgrad(clamp(r, max=1+clip_high)) * A * logp (optionally two-sided)
//   gspo       the clipped objective on a sequence-level ratio (geometric mean of token ratios)
//   sapo       -sigmoid(tau*(r-1)) * 4/tau * A, tau_pos for A>0, tau_neg otherwise
//   reinforce  -A * logp
//
// r = exp(clamp(logp - old, -20, 20)) as verl's core_algos.py (compute_policy_loss_vanilla,
// _cispo, _sapo). Every loss returns 0 at masked positions (and ignores whatever non-finite
// value the inputs hold there). Formulas, options and metrics: docs/algorithms/policy_losses.md.
#include <ATen/ATen.h>
#include <grpo/sdk/plugin.h>
#include <grpo/sdk/torch/masked.h>
#include <grpo/sdk/torch/policy_loss.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using grpo::sdk::ConfigView;
using grpo::sdk::Metric;
using grpo::sdk::PolicyLoss;
using grpo::sdk::PolicyLossInput;
using grpo::sdk::PolicyLossOutput;

// verl clamps the log-ratio to [-20, 20] before exp (compute_policy_loss_vanilla).
constexpr double kMaxLogRatio = 20.0;
// verl compute_policy_loss_gspo: clamp(max=10.0) of the combined GSPO token log-ratio.
constexpr double kGspoMaxLogRatio = 10.0;

// ---------------------------------------------------------------------------------------
// Option helpers

// clip_low: the lower bound 1 - clip_low must stay >= 0.
double read_clip_low(const ConfigView& cfg, double default_value) {
  return cfg.get_double_in_range("clip_low", default_value, 0.0, 1.0, grpo::sdk::Interval::kClosed,
                                 "(the lower bound is 1 - clip_low)");
}

// True when `key` is written in the config with an explicit null (`key: null` / `key: ~`).
bool explicit_null(const ConfigView& cfg, const std::string& key) {
  const grpo::sdk::ConfigValue* node = cfg.node();
  if (!node || !node->is_map()) return false;
  const grpo::sdk::ConfigValue* v = node->find(key);
  return v && v->is_null();
}

// ---------------------------------------------------------------------------------------
// Tensor helpers

struct Prepared {
  at::Tensor valid;       // [B, T] bool, response tokens
  at::Tensor mask;        // [B, T] float mask, as given
  at::Tensor logp;        // [B, T] logp, 0 at masked positions (gradient flows at valid ones)
  at::Tensor adv;         // [B, T] advantages, 0 at masked positions
  at::Tensor raw_log_ratio;  // [B, T] logp - old, 0 at masked positions
  at::Tensor log_ratio;      // [B, T] clamp(logp - old, -20, 20), 0 at masked positions
};

void check_shape(const at::Tensor& t, const char* name, const at::Tensor& like) {
  if (!t.defined()) throw std::invalid_argument(std::string("policy loss: input ") + name + " is missing");
  if (t.sizes() != like.sizes())
    throw std::invalid_argument(std::string("policy loss: ") + name + " has shape " + c10::str(t.sizes()) +
                                ", expected " + c10::str(like.sizes()) + " (as logp)");
}

Prepared prepare(const PolicyLossInput& in, bool need_old) {
  if (!in.logp.defined() || in.logp.dim() != 2)
    throw std::invalid_argument("policy loss: logp must be a [B, T] tensor");
  Prepared p;
  p.mask = in.batch.response_mask;
  check_shape(p.mask, "batch.response_mask", in.logp);
  at::Tensor adv = in.advantages;
  if (adv.defined() && adv.dim() == 1) adv = adv.unsqueeze(1).expand_as(in.logp);  // per-sequence A
  check_shape(adv, "advantages", in.logp);
  p.valid = p.mask > 0;
  const at::Tensor zero = at::zeros({}, in.logp.options());
  p.logp = at::where(p.valid, in.logp, zero);
  p.adv = at::where(p.valid, adv.to(in.logp.scalar_type()), zero);
  if (need_old || in.old_logp.defined()) {
    check_shape(in.old_logp, "old_logp", in.logp);
    const at::Tensor old = at::where(p.valid, in.old_logp.to(in.logp.scalar_type()), zero);
    p.raw_log_ratio = p.logp - old;
    p.log_ratio = p.raw_log_ratio.clamp(-kMaxLogRatio, kMaxLogRatio);
  }
  return p;
}

at::Tensor frac(const at::Tensor& condition, const Prepared& p) {
  return grpo::sdk::masked_mean(condition.to(p.mask.scalar_type()), p.mask);
}

// approx KL (open-instruct / TRL: 0.5 * (logp - old)^2), verl's ppo_kl (mean of old - logp),
// and the ratio's masked mean and (unbiased) variance.
void ratio_metrics(const at::Tensor& log_ratio, const at::Tensor& ratio, const Prepared& p,
                   std::vector<Metric>* out) {
  const at::Tensor d = log_ratio.detach();
  const at::Tensor r = ratio.detach();
  out->push_back({"policy/approxkl", grpo::sdk::masked_mean(0.5 * d * d, p.mask)});
  out->push_back({"policy/ppo_kl", grpo::sdk::masked_mean(-d, p.mask)});
  out->push_back({"val/ratio", grpo::sdk::masked_mean(r, p.mask)});
  out->push_back({"val/ratio_var", grpo::sdk::masked_var(r, p.mask)});
}

at::Tensor zero_masked(const at::Tensor& loss, const Prepared& p) {
  return at::where(p.valid, loss, at::zeros({}, loss.options()));
}

// The clipped surrogate shared by ppo_clip and gspo:
//   max(-A * min(r, delta), -A * clamp(r, 1 - lo, 1 + hi)), then for A < 0: min(that, -A * c).
// delta <= 0 and c <= 0 mean "off". Reports the clip fractions.
at::Tensor clipped_surrogate(const at::Tensor& ratio, const Prepared& p, double lo, double hi, double c,
                             double delta, std::vector<Metric>* metrics) {
  const at::Tensor& A = p.adv;
  const at::Tensor r1 = delta > 0.0 ? ratio.clamp_max(delta) : ratio;
  const at::Tensor loss1 = -A * r1;
  const at::Tensor loss2 = -A * ratio.clamp(1.0 - lo, 1.0 + hi);
  at::Tensor loss = at::maximum(loss1, loss2);

  const at::Tensor r = ratio.detach();
  const at::Tensor pos = A > 0;
  const at::Tensor neg = A < 0;
  // Tokens whose gradient the clip removes: A > 0 above the range, A < 0 below it.
  const at::Tensor clip_high = pos & (r > 1.0 + hi);
  const at::Tensor clip_low = neg & (r < 1.0 - lo);
  metrics->push_back({"policy/clipfrac_low", frac(clip_low, p)});
  metrics->push_back({"policy/clipfrac_high", frac(clip_high, p)});
  metrics->push_back({"policy/clipfrac", frac(clip_low | clip_high, p)});
  if (delta > 0.0) metrics->push_back({"policy/clipfrac_delta", frac(neg & (r > delta), p)});
  if (c > 0.0) {
    // verl compute_policy_loss_vanilla: clip_pg_losses2 = min(-A * clip_ratio_c, max(...)) for A < 0.
    const at::Tensor loss3 = -A * c;
    const at::Tensor dual_active = neg & (loss.detach() > loss3.detach());
    metrics->push_back({"policy/clipfrac_dual", frac(dual_active, p)});
    loss = at::where(neg, at::minimum(loss, loss3), loss);
  }
  return loss;
}

// ---------------------------------------------------------------------------------------
// ppo_clip (PPO / GRPO / DAPO clip-higher), verl compute_policy_loss_vanilla + TRL delta.

class PpoClip : public PolicyLoss {
 public:
  explicit PpoClip(const ConfigView& cfg) {
    clip_low_ = read_clip_low(cfg, 0.2);
    clip_high_ = cfg.get_non_negative_double("clip_high", 0.2);
    // Dual-clip (Ye et al. 2019, verl clip_ratio_c = 3.0); null or 0 turns it off.
    clip_ratio_c_ = cfg.get_double("clip_ratio_c", 3.0);
    if (explicit_null(cfg, "clip_ratio_c")) clip_ratio_c_ = 0.0;
    if (!std::isfinite(clip_ratio_c_) || clip_ratio_c_ < 0.0 || (clip_ratio_c_ > 0.0 && clip_ratio_c_ <= 1.0))
      cfg.fail("clip_ratio_c", "must be > 1 (verl), or 0 / null to disable dual-clip, got " + std::to_string(clip_ratio_c_));
    // TRL two-sided clipping: ratio = min(ratio, delta) in the unclipped branch; off by default.
    delta_ = cfg.get_double("delta", 0.0);
    if (explicit_null(cfg, "delta")) delta_ = 0.0;
    if (!std::isfinite(delta_) || delta_ < 0.0 || (delta_ > 0.0 && delta_ <= 1.0 + clip_high_))
      cfg.fail("delta", "must be > 1 + clip_high (" + std::to_string(1.0 + clip_high_) +
                            "), or 0 / null to disable, got " + std::to_string(delta_));
  }

  PolicyLossOutput compute(const PolicyLossInput& in) const override {
    const Prepared p = prepare(in, /*need_old=*/true);
    const at::Tensor ratio = p.log_ratio.exp();
    PolicyLossOutput out;
    at::Tensor loss = clipped_surrogate(ratio, p, clip_low_, clip_high_, clip_ratio_c_, delta_, &out.metrics);
    ratio_metrics(p.log_ratio, ratio, p, &out.metrics);
    out.per_token_loss = zero_masked(loss, p);
    return out;
  }

 private:
  double clip_low_, clip_high_, clip_ratio_c_, delta_;
};

// ---------------------------------------------------------------------------------------
// cispo: -stopgrad(clamp(r, max=1+clip_high)) * A * logp. open-instruct and TRL clip only the
// upper side; verl compute_policy_loss_cispo clamps both (two_sided: true here).

class Cispo : public PolicyLoss {
 public:
  explicit Cispo(const ConfigView& cfg) {
    // TRL recommends epsilon_high = 5.0 for CISPO (ScaleRL).
    clip_high_ = cfg.get_non_negative_double("clip_high", 5.0);
    two_sided_ = cfg.get_bool("two_sided", false);
    if (!two_sided_ && cfg.has("clip_low")) cfg.fail("clip_low", "only applies with two_sided: true");
    clip_low_ = two_sided_ ? read_clip_low(cfg, 0.2) : 1.0;  // 1.0: lower bound 0, never active
  }

  PolicyLossOutput compute(const PolicyLossInput& in) const override {
    const Prepared p = prepare(in, /*need_old=*/true);
    const at::Tensor ratio = p.log_ratio.exp();
    const at::Tensor w = ratio.clamp(1.0 - clip_low_, 1.0 + clip_high_).detach();  // stop-gradient IS weight
    PolicyLossOutput out;
    const at::Tensor r = ratio.detach();
    const at::Tensor high = r > 1.0 + clip_high_;
    const at::Tensor low = two_sided_ ? (r < 1.0 - clip_low_) : at::zeros_like(high);
    out.metrics.push_back({"policy/clipfrac_low", frac(low, p)});
    out.metrics.push_back({"policy/clipfrac_high", frac(high, p)});
    out.metrics.push_back({"policy/clipfrac", frac(low | high, p)});
    out.metrics.push_back({"policy/is_weight", grpo::sdk::masked_mean(w, p.mask)});
    ratio_metrics(p.log_ratio, ratio, p, &out.metrics);
    out.per_token_loss = zero_masked(-w * p.adv * p.logp, p);
    return out;
  }

 private:
  double clip_low_, clip_high_;
  bool two_sided_;
};

// ---------------------------------------------------------------------------------------
// gspo: sequence-level ratio s_i = exp(sum_t((logp - old) * M) / |y_i|), token log-ratio
// logp - stopgrad(logp) + stopgrad(log s_i) (verl compute_policy_loss_gspo), clipped objective.

class Gspo : public PolicyLoss {
 public:
  explicit Gspo(const ConfigView& cfg) {
    // GSPO paper / verl examples/gspo_trainer: clip_ratio_low 3e-4, clip_ratio_high 4e-4.
    clip_low_ = read_clip_low(cfg, 3e-4);
    clip_high_ = cfg.get_non_negative_double("clip_high", 4e-4);
  }

  PolicyLossOutput compute(const PolicyLossInput& in) const override {
    const Prepared p = prepare(in, /*need_old=*/true);
    const at::Tensor m = p.mask.to(p.logp.scalar_type());
    const at::Tensor len = m.sum(1).clamp_min(1.0);                          // |y|, 1 for an empty row
    // log s = sum_t((logp - old) * M) / |y| (clamped to [-20, 20] only to stay finite); then,
    // as verl's compute_policy_loss_gspo, the combined token log-ratio is clamped at max 10:
    // GSPO has no dual clip, so with A < 0 and a large s the unclipped branch would otherwise
    // give gradients up to |A| e^20; above the clamp the token's gradient is 0.
    const at::Tensor seq_log_ratio = ((p.raw_log_ratio * m).sum(1) / len).clamp(-kMaxLogRatio, kMaxLogRatio);
    const at::Tensor tok_log_ratio =
        (p.logp - p.logp.detach() + seq_log_ratio.detach().unsqueeze(1)).clamp_max(kGspoMaxLogRatio);
    const at::Tensor ratio = tok_log_ratio.exp();  // value s_i on every token, d ratio / d logp = s_i
    PolicyLossOutput out;
    at::Tensor loss = clipped_surrogate(ratio, p, clip_low_, clip_high_, /*c=*/0.0, /*delta=*/0.0, &out.metrics);
    // approxkl / ppo_kl over the token log-ratios; val/ratio over the sequence ratio per token.
    ratio_metrics(p.log_ratio, ratio, p, &out.metrics);
    out.per_token_loss = zero_masked(loss, p);
    return out;
  }

 private:
  double clip_low_, clip_high_;
};

// ---------------------------------------------------------------------------------------
// sapo: soft gate instead of a hard clip (verl compute_policy_loss_sapo):
//   -sigmoid(tau * (r - 1)) * 4 / tau * A, tau = tau_pos where A > 0, tau_neg otherwise.

class Sapo : public PolicyLoss {
 public:
  explicit Sapo(const ConfigView& cfg) {
    tau_pos_ = cfg.get_positive_double("tau_pos", 1.0);
    tau_neg_ = cfg.get_positive_double("tau_neg", 1.05);
  }

  PolicyLossOutput compute(const PolicyLossInput& in) const override {
    const Prepared p = prepare(in, /*need_old=*/true);
    const at::Tensor ratio = p.log_ratio.exp();
    const at::Tensor tau = at::where(p.adv > 0, at::full({}, tau_pos_, ratio.options()),
                                     at::full({}, tau_neg_, ratio.options()));
    const at::Tensor gate = at::sigmoid(tau * (ratio - 1.0)) * (4.0 / tau);
    PolicyLossOutput out;
    ratio_metrics(p.log_ratio, ratio, p, &out.metrics);
    // d loss / d logp = -A * 4 * sig * (1 - sig) * r: the effective PG weight (1 at r = 1).
    const at::Tensor sig = at::sigmoid(tau * (ratio.detach() - 1.0));
    out.metrics.push_back({"policy/sapo_grad_weight",
                           grpo::sdk::masked_mean(4.0 * sig * (1.0 - sig) * ratio.detach(), p.mask)});
    out.per_token_loss = zero_masked(-gate * p.adv, p);
    return out;
  }

 private:
  double tau_pos_, tau_neg_;
};

// ---------------------------------------------------------------------------------------
// reinforce: -A * logp. The truncated IS weight w of bypass mode is the runtime's mismatch
// correction, which multiplies every policy loss; it is not applied here.

class Reinforce : public PolicyLoss {
 public:
  explicit Reinforce(const ConfigView&) {}

  PolicyLossOutput compute(const PolicyLossInput& in) const override {
    const Prepared p = prepare(in, /*need_old=*/false);
    PolicyLossOutput out;
    if (p.log_ratio.defined()) ratio_metrics(p.log_ratio, p.log_ratio.exp(), p, &out.metrics);
    out.per_token_loss = zero_masked(-p.adv * p.logp, p);
    return out;
  }
};

}  // namespace

GRPO_PLUGIN("policy_losses", "1.0.0", "Policy-gradient losses: ppo_clip, cispo, gspo, sapo, reinforce") {
  registrar.add_policy_loss<PpoClip>(
      "ppo_clip", "PPO/GRPO/DAPO clipped surrogate (clip_low/clip_high, dual-clip clip_ratio_c, TRL delta)");
  registrar.add_policy_loss<Cispo>("cispo", "CISPO: -stopgrad(clamp(ratio, max=1+clip_high)) * A * logp");
  registrar.add_policy_loss<Gspo>("gspo", "GSPO: clipped objective on the sequence-level (geometric-mean) ratio");
  registrar.add_policy_loss<Sapo>("sapo", "SAPO: soft sigmoid gate -sigmoid(tau*(ratio-1))*4/tau*A");
  registrar.add_policy_loss<Reinforce>("reinforce", "REINFORCE: -A * logp (IS weight applied by the runtime)");
}
