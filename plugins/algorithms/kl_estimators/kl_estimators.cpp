// The KL estimators of Schulman's "Approximating KL divergence", as the anchors use them to
// penalise the distance between the trained policy and the reference policy, per token.
//
//   d  = clamp(logp - ref_logp, -log_ratio_clamp, log_ratio_clamp)   (open-instruct: +-40)
//   k1 = d
//   k2 = d^2 / 2
//   k3 = clamp(exp(e) - 1 - e, -value_clamp, value_clamp),  e = clamp(-d, -exp_clamp, exp_clamp)
//        (= exp(-d) - 1 + d; verl's low_var_kl clamps e to [-20, 20] and the value to [-10, 10])
//   k4 = ratio * d, ratio = exp(logp - stopgrad(logp))
//        open-instruct's estimate_kl uses ratio = exp(new - old), the policy ratio against the
//        rollout policy (NOT exp(d)). This interface sees logp and ref_logp only, so the ratio is
//        taken on-policy (old == logp): its value is 1 and its gradient is ratio. Value and
//        gradient equal open-instruct's exactly on the first pass over a batch (new == old).
//
// Options (every estimator): log_ratio_clamp (default 40; .inf disables). k3 only: exp_clamp
// (20) and value_clamp (10), .inf disables either. See docs/algorithms/kl_and_aggregation.md.
#include <ATen/ATen.h>
#include <grpo/sdk/torch.h>

#include <cmath>
#include <limits>
#include <string>

namespace {

// A clamp: > 0, .inf to disable it.
double positive_option(const grpo::sdk::ConfigView& cfg, const std::string& key, double def) {
  return cfg.get_double_in_range(key, def, 0.0, std::numeric_limits<double>::infinity(), grpo::sdk::Interval::kLeftOpen,
                                 "(.inf disables the clamp)");
}

at::Tensor symmetric_clamp(const at::Tensor& x, double bound) {
  return std::isinf(bound) ? x : at::clamp(x, -bound, bound);
}

class ClampedLogRatio : public grpo::sdk::KlEstimator {
 public:
  explicit ClampedLogRatio(const grpo::sdk::ConfigView& cfg)
      : log_ratio_clamp_(positive_option(cfg, "log_ratio_clamp", 40.0)) {}

 protected:
  at::Tensor log_ratio(const at::Tensor& logp, const at::Tensor& ref_logp) const {
    return symmetric_clamp(logp - ref_logp, log_ratio_clamp_);
  }

 private:
  double log_ratio_clamp_;
};

class K1 : public ClampedLogRatio {
 public:
  using ClampedLogRatio::ClampedLogRatio;
  at::Tensor compute(const at::Tensor& logp, const at::Tensor& ref_logp) const override {
    return log_ratio(logp, ref_logp);
  }
};

class K2 : public ClampedLogRatio {
 public:
  using ClampedLogRatio::ClampedLogRatio;
  at::Tensor compute(const at::Tensor& logp, const at::Tensor& ref_logp) const override {
    const at::Tensor d = log_ratio(logp, ref_logp);
    return 0.5 * d * d;
  }
};

class K3 : public ClampedLogRatio {
 public:
  explicit K3(const grpo::sdk::ConfigView& cfg)
      : ClampedLogRatio(cfg),
        exp_clamp_(positive_option(cfg, "exp_clamp", 20.0)),
        value_clamp_(positive_option(cfg, "value_clamp", 10.0)) {}
  at::Tensor compute(const at::Tensor& logp, const at::Tensor& ref_logp) const override {
    // e = ref - logp (verl's "kl" variable), clamped before the exponential.
    const at::Tensor e = symmetric_clamp(-log_ratio(logp, ref_logp), exp_clamp_);
    return symmetric_clamp(at::expm1(e) - e, value_clamp_);
  }

 private:
  double exp_clamp_;
  double value_clamp_;
};

class K4 : public ClampedLogRatio {
 public:
  using ClampedLogRatio::ClampedLogRatio;
  at::Tensor compute(const at::Tensor& logp, const at::Tensor& ref_logp) const override {
    const at::Tensor ratio = at::exp(logp - logp.detach());
    return ratio * log_ratio(logp, ref_logp);
  }
};

}  // namespace

GRPO_PLUGIN("kl_estimators", "1.0.0", "KL estimators k1, k2, k3 (low-variance) and k4 between policy and reference") {
  registrar.add_kl_estimator<K1>("k1", "d = logp - ref (clamped to +-log_ratio_clamp)");
  registrar.add_kl_estimator<K2>("k2", "d^2 / 2");
  registrar.add_kl_estimator<K3>("k3", "low-variance exp(-d) - 1 + d, verl's clamps (exp input +-20, value +-10)");
  registrar.add_kl_estimator<K4>("k4", "ratio * d (open-instruct), ratio = exp(logp - stopgrad(logp))");
}
