// The bundled advantage estimators (docs/algorithms/advantages.md):
//   grpo                   (r - mean_g) / (std_g + eps), std per group, per batch or none (TRL scale_rewards)
//   dr_grpo                r - mean_g
//   rloo                   (n*r - sum_g) / (n - 1)
//   reinforce_pp_baseline  r - mean_g, broadcast over the response, whitened over the batch's tokens
//   reinforce_pp           discounted return-to-go of the token rewards, whitened over the batch's tokens
//   grpo_passk             only the best sample of a group gets r_max - r_second (optionally / (std_g + eps))
//
// The group statistics follow verl's trainer/ppo/core_algos.py (compute_grpo_outcome_advantage,
// compute_rloo_outcome_advantage, compute_reinforce_plus_plus_baseline_outcome_advantage,
// compute_reinforce_plus_plus_outcome_advantage, compute_grpo_passk_outcome_advantage); where we
// differ (rloo with a group of 1, exact zeros for all-equal groups) the comment says so.
//
// Groups are given by batch.group_ids: arbitrary int64 ids, in any order, of any sizes. The
// per-group arithmetic runs on the CPU in double precision (B scalars: a handful of
// microseconds) and the [B, T] results go back to the response mask's device and dtype.
// Nothing here is differentiable: inputs are detached and the outputs never require grad.
#include <ATen/ATen.h>
#include <torch/utils.h>  // torch::NoGradGuard (ATen no longer spells it at:: in LibTorch 2.x)
#include <grpo/sdk/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using grpo::sdk::AdvantageEstimator;
using grpo::sdk::AdvantageInput;
using grpo::sdk::AdvantageOutput;
using grpo::sdk::ConfigView;
using grpo::sdk::Metric;

// ---------------------------------------------------------------------------------------------
// Input checks and conversions

[[noreturn]] void bad_input(const char* estimator, const std::string& message) {
  throw std::invalid_argument(std::string("advantage '") + estimator + "': " + message);
}

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// The response mask, detached, floating point (the output dtype follows it).
at::Tensor checked_mask(const char* estimator, const AdvantageInput& in) {
  const at::Tensor& m = in.batch.response_mask;
  if (!m.defined()) bad_input(estimator, "batch.response_mask is undefined");
  if (m.dim() != 2) bad_input(estimator, "batch.response_mask must be [B, T], got " + shape_of(m));
  at::Tensor mask = m.detach();
  return mask.is_floating_point() ? mask : mask.to(at::kFloat);
}

// Sequence rewards [B] as doubles on the CPU; they must be finite (one NaN would poison a group).
std::vector<double> checked_rewards(const char* estimator, const at::Tensor& rewards, int64_t B) {
  if (!rewards.defined()) bad_input(estimator, "rewards is undefined");
  if (rewards.dim() != 1 || rewards.size(0) != B)
    bad_input(estimator, "rewards must be [B] = [" + std::to_string(B) + "], got " + shape_of(rewards));
  at::Tensor r = rewards.detach().to(at::kCPU, at::kDouble).contiguous();
  std::vector<double> out(r.data_ptr<double>(), r.data_ptr<double>() + B);
  for (int64_t i = 0; i < B; ++i)
    if (!std::isfinite(out[i])) bad_input(estimator, "rewards[" + std::to_string(i) + "] is not finite");
  return out;
}

// The samples of each group, in batch order; groups in order of first appearance.
struct Groups {
  std::vector<int64_t> ids;                   // the group id of each group
  std::vector<std::vector<int64_t>> members;  // batch indices of each group
};

Groups checked_groups(const char* estimator, const at::Tensor& group_ids, int64_t B) {
  if (!group_ids.defined()) bad_input(estimator, "batch.group_ids is undefined");
  if (group_ids.dim() != 1 || group_ids.size(0) != B)
    bad_input(estimator, "batch.group_ids must be [B] = [" + std::to_string(B) + "], got " + shape_of(group_ids));
  if (group_ids.is_floating_point() || group_ids.is_complex())
    bad_input(estimator, "batch.group_ids must be an integer tensor");
  at::Tensor g = group_ids.detach().to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = g.data_ptr<int64_t>();
  Groups out;
  std::unordered_map<int64_t, size_t> index;
  for (int64_t i = 0; i < B; ++i) {
    auto it = index.find(p[i]);
    if (it == index.end()) {
      it = index.emplace(p[i], out.ids.size()).first;
      out.ids.push_back(p[i]);
      out.members.emplace_back();
    }
    out.members[it->second].push_back(i);
  }
  return out;
}

// What every estimator starts from: the checked mask, batch size, rewards and groups.
struct Prepared {
  at::Tensor mask;
  int64_t B;
  std::vector<double> r;
  Groups groups;
};

Prepared prepare(const char* name, const AdvantageInput& in) {
  at::Tensor mask = checked_mask(name, in);
  const int64_t B = mask.size(0);
  std::vector<double> r = checked_rewards(name, in.rewards, B);
  if (in.token_rewards.defined()) {
    // Token rewards (e.g. with the KL penalty in the reward) replace the sequence reward by
    // their sum over the response, as verl does for its outcome estimators
    // (scores = token_level_rewards.sum(-1)).
    if (in.token_rewards.sizes() != mask.sizes())
      bad_input(name, "token_rewards must be [B, T] like the response mask, got " + shape_of(in.token_rewards));
    const at::Tensor summed = (in.token_rewards.detach().to(at::kDouble) * mask.to(at::kDouble)).sum(1);
    r = checked_rewards(name, summed, B);
  }
  Groups groups = checked_groups(name, in.batch.group_ids, B);
  return {std::move(mask), B, std::move(r), std::move(groups)};
}

struct GroupStats {
  int64_t n = 0;
  double sum = 0.0;
  double mean = 0.0;  // verl: 0 for a group of 1
  double std = 1.0;   // verl: 1 for a group of 1
  bool all_equal = false;  // every reward of the group identical (a group of 1 counts)
};

GroupStats stats_of(const std::vector<int64_t>& members, const std::vector<double>& r, bool unbiased) {
  GroupStats s;
  s.n = static_cast<int64_t>(members.size());
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i : members) {
    s.sum += r[i];
    lo = std::min(lo, r[i]);
    hi = std::max(hi, r[i]);
  }
  s.all_equal = (lo == hi);
  if (s.n == 1) return s;  // mean 0, std 1 (verl compute_grpo_outcome_advantage)
  s.mean = s.sum / static_cast<double>(s.n);
  double ss = 0.0;
  for (int64_t i : members) ss += (r[i] - s.mean) * (r[i] - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(unbiased ? s.n - 1 : s.n));
  if (s.all_equal) s.std = 0.0;  // exactly, whatever the rounding of the mean
  return s;
}

// ---------------------------------------------------------------------------------------------
// Outputs and metrics

at::Tensor scalar_like(double v, const at::Tensor& like) {
  return at::scalar_tensor(v, like.options().dtype(at::kFloat));
}

// mean/std/min/max of x over the response tokens (0 when there are none).
void add_token_stats(std::vector<Metric>& metrics, const std::string& prefix, const at::Tensor& x,
                     const at::Tensor& mask) {
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor md = mask.to(at::kDouble);
  const at::Tensor on = md > 0;
  const bool any = on.any().item<bool>();
  const double inf = std::numeric_limits<double>::infinity();
  metrics.push_back({prefix + "/mean", grpo::sdk::masked_mean(xd, md).to(at::kFloat)});
  metrics.push_back({prefix + "/std", at::sqrt(grpo::sdk::masked_var(xd, md)).to(at::kFloat)});
  metrics.push_back({prefix + "/max", any ? xd.masked_fill(~on, -inf).max().to(at::kFloat) : scalar_like(0.0, x)});
  metrics.push_back({prefix + "/min", any ? xd.masked_fill(~on, inf).min().to(at::kFloat) : scalar_like(0.0, x)});
}

// Fraction of groups whose rewards are all equal (a group of 1 counts, as open-instruct's
// np.std of one sample is 0): those groups carry no within-group learning signal.
// open-instruct's real_batch_size_ratio is the sample fraction that survives dropping them.
void add_group_stats(std::vector<Metric>& metrics, const Groups& groups, const std::vector<double>& r,
                     const at::Tensor& like) {
  if (groups.ids.empty()) return;
  int64_t zero = 0;
  for (const auto& m : groups.members) zero += stats_of(m, r, true).all_equal ? 1 : 0;
  metrics.push_back({"zero_std_group_fraction", scalar_like(static_cast<double>(zero) / groups.ids.size(), like)});
}

// Per-sequence advantages [B] broadcast over the response mask: [B, T], zero outside it.
at::Tensor broadcast(const std::vector<double>& per_seq, const at::Tensor& mask) {
  at::Tensor a = at::tensor(per_seq, at::TensorOptions().dtype(at::kDouble)).to(mask.device());
  return (a.unsqueeze(1) * mask.to(at::kDouble)).to(mask.scalar_type());
}

AdvantageOutput finish(at::Tensor advantages, at::Tensor returns, const at::Tensor& mask, const Groups& groups,
                       const std::vector<double>& rewards) {
  AdvantageOutput out;
  out.advantages = std::move(advantages);
  out.returns = std::move(returns);
  add_token_stats(out.metrics, "advantages", out.advantages, mask);
  if (out.returns.defined()) add_token_stats(out.metrics, "returns", out.returns, mask);
  add_group_stats(out.metrics, groups, rewards, mask);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Options

double read_epsilon(const ConfigView& cfg, double def) { return cfg.get_positive_double("epsilon", def); }

// ---------------------------------------------------------------------------------------------
// grpo: (r - mean_g) / (s + eps), s = std_g ("group"), std of the whole batch ("batch", TRL
// scale_rewards="batch"), or no division ("none"). Group of 1: mean 0, std 1 (verl). All-equal
// group: exactly 0.

class Grpo : public AdvantageEstimator {
 public:
  explicit Grpo(const ConfigView& cfg)
      : eps_(read_epsilon(cfg, 1e-6)),
        unbiased_(cfg.get_choice("std", "unbiased", {"unbiased", "population"}) == "unbiased"),
        scale_(cfg.get_choice("scale", "group", {"group", "batch", "none"})) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const auto [mask, B, r, groups] = prepare("grpo", in);

    double batch_std = 1.0;  // a batch of one sample: std 1, as verl's group of 1
    if (scale_ == "batch" && B > 1) {
      double mean = 0.0, ss = 0.0;
      for (double x : r) mean += x;
      mean /= static_cast<double>(B);
      for (double x : r) ss += (x - mean) * (x - mean);
      batch_std = std::sqrt(ss / static_cast<double>(unbiased_ ? B - 1 : B));
    }

    std::vector<double> adv(B, 0.0);
    for (const auto& members : groups.members) {
      const GroupStats s = stats_of(members, r, unbiased_);
      if (s.n > 1 && s.all_equal) continue;  // zero advantage, never 0/0
      const double denom = scale_ == "group" ? s.std + eps_ : scale_ == "batch" ? batch_std + eps_ : 1.0;
      for (int64_t i : members) adv[i] = (r[i] - s.mean) / denom;
    }
    return finish(broadcast(adv, mask), {}, mask, groups, r);
  }

 private:
  double eps_;
  bool unbiased_;
  std::string scale_;
};

// dr_grpo: r - mean_g (verl grpo with norm_adv_by_std_in_grpo=false; group of 1: mean 0).
class DrGrpo : public AdvantageEstimator {
 public:
  explicit DrGrpo(const ConfigView&) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const auto [mask, B, r, groups] = prepare("dr_grpo", in);
    std::vector<double> adv(B, 0.0);
    for (const auto& members : groups.members) {
      const GroupStats s = stats_of(members, r, true);
      if (s.n > 1 && s.all_equal) continue;
      for (int64_t i : members) adv[i] = r[i] - s.mean;
    }
    return finish(broadcast(adv, mask), {}, mask, groups, r);
  }
};

// rloo: r - mean of the other samples = (n*r - sum_g) / (n - 1) (verl compute_rloo_outcome_advantage
// writes it r*n/(n-1) - mean_g*n/(n-1)). Group of 1: 0 — no other sample, no baseline
// (REFERENCE.md; verl instead leaves the raw reward r in place).
class Rloo : public AdvantageEstimator {
 public:
  explicit Rloo(const ConfigView&) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const auto [mask, B, r, groups] = prepare("rloo", in);
    std::vector<double> adv(B, 0.0);
    for (const auto& members : groups.members) {
      const GroupStats s = stats_of(members, r, true);
      if (s.n < 2 || s.all_equal) continue;
      const double n = static_cast<double>(s.n);
      for (int64_t i : members) adv[i] = (n * r[i] - s.sum) / (n - 1.0);
    }
    return finish(broadcast(adv, mask), {}, mask, groups, r);
  }
};

// reinforce_pp_baseline: r - mean_g (group of 1: mean 0), broadcast over the response, then
// (x - mean) / sqrt(var + eps) over every response token of the batch (unbiased var): verl
// compute_reinforce_plus_plus_baseline_outcome_advantage + verl_F.masked_whiten. verl's
// whitening uses a fixed 1e-8 (its `epsilon` argument is unused there): our default.
class ReinforcePpBaseline : public AdvantageEstimator {
 public:
  explicit ReinforcePpBaseline(const ConfigView& cfg) : eps_(read_epsilon(cfg, 1e-8)) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const auto [mask, B, r, groups] = prepare("reinforce_pp_baseline", in);
    std::vector<double> centred(B, 0.0);
    for (const auto& members : groups.members) {
      const GroupStats s = stats_of(members, r, true);
      if (s.n > 1 && s.all_equal) continue;
      for (int64_t i : members) centred[i] = r[i] - s.mean;
    }
    const at::Tensor md = mask.to(at::kDouble);
    const at::Tensor tokens = broadcast(centred, mask).to(at::kDouble);
    const at::Tensor adv = (grpo::sdk::masked_whiten(tokens, md, eps_) * md).to(mask.scalar_type());
    return finish(adv, {}, mask, groups, r);
  }

 private:
  double eps_;
};

// reinforce_pp: G_t = r_t + gamma * G_{t+1} over the response, the running return reset at
// every masked position ("reset after EOS", verl compute_reinforce_plus_plus_outcome_advantage),
// then whitened over every response token of the batch. Token rewards: input.token_rewards
// (the trainer puts the sequence reward at the last response token minus any KL-in-reward
// penalty); when undefined, the sequence reward at each row's last response token.
// Outputs: advantages = whiten(G) * M, returns = G * M.
class ReinforcePp : public AdvantageEstimator {
 public:
  explicit ReinforcePp(const ConfigView& cfg)
      : gamma_(cfg.get_double_in_range("gamma", 1.0, 0.0, 1.0)),
        whiten_(cfg.get_bool("whiten", true)),
        eps_(read_epsilon(cfg, 1e-8)) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const at::Tensor mask = checked_mask("reinforce_pp", in);
    const int64_t B = mask.size(0), T = mask.size(1);
    const at::Tensor mc = mask.to(at::kCPU, at::kDouble).contiguous();
    const double* m = mc.data_ptr<double>();

    at::Tensor tr;
    std::vector<double> seq_rewards;  // for the group metric, when given
    if (in.token_rewards.defined()) {
      if (in.token_rewards.dim() != 2 || in.token_rewards.size(0) != B || in.token_rewards.size(1) != T)
        bad_input("reinforce_pp", "token_rewards must be [B, T] = " + shape_of(mask) + ", got " + shape_of(in.token_rewards));
      tr = in.token_rewards.detach().to(at::kCPU, at::kDouble).contiguous().clone();
      if (!at::isfinite(tr).all().item<bool>()) bad_input("reinforce_pp", "token_rewards contain a non-finite value");
      if (in.rewards.defined()) seq_rewards = checked_rewards("reinforce_pp", in.rewards, B);
    } else {
      seq_rewards = checked_rewards("reinforce_pp", in.rewards, B);
      tr = at::zeros({B, T}, at::TensorOptions().dtype(at::kDouble));
      double* p = tr.data_ptr<double>();
      for (int64_t i = 0; i < B; ++i)
        for (int64_t t = T - 1; t >= 0; --t)
          if (m[i * T + t] > 0.0) {
            p[i * T + t] = seq_rewards[i];
            break;
          }
    }

    at::Tensor ret = at::zeros({B, T}, at::TensorOptions().dtype(at::kDouble));
    const double* r = tr.data_ptr<double>();
    double* g = ret.data_ptr<double>();
    for (int64_t i = 0; i < B; ++i) {
      double running = 0.0;
      for (int64_t t = T - 1; t >= 0; --t) {
        running = r[i * T + t] + gamma_ * running;
        g[i * T + t] = running;
        running *= m[i * T + t];  // reset outside the response (verl)
      }
    }
    ret = ret * mc;
    const at::Tensor adv = whiten_ ? grpo::sdk::masked_whiten(ret, mc, eps_) * mc : ret;

    Groups groups;
    if (!seq_rewards.empty() && in.batch.group_ids.defined())
      groups = checked_groups("reinforce_pp", in.batch.group_ids, B);
    const auto back = [&](const at::Tensor& x) { return x.to(mask.device(), mask.scalar_type()); };
    return finish(back(adv), back(ret), mask, groups, seq_rewards);
  }

 private:
  double gamma_;
  bool whiten_;
  double eps_;
};

// grpo_passk (verl compute_grpo_passk_outcome_advantage, arXiv 2503.19595): in each group only
// the best sample gets r_max - r_second_max, divided by (std_g + eps) when `normalize` (verl
// norm_adv_by_std_in_grpo; unbiased std as torch.std); every other sample gets 0. Ties for the
// maximum: the first in batch order gets r_max - r_second = 0. A group of 1 is an error, as in
// verl (pass@k needs at least 2 samples).
class GrpoPassk : public AdvantageEstimator {
 public:
  explicit GrpoPassk(const ConfigView& cfg) : normalize_(cfg.get_bool("normalize", true)), eps_(read_epsilon(cfg, 1e-6)) {}

  AdvantageOutput compute(const AdvantageInput& in) const override {
    torch::NoGradGuard no_grad;
    const auto [mask, B, r, groups] = prepare("grpo_passk", in);
    std::vector<double> adv(B, 0.0);
    for (size_t g = 0; g < groups.ids.size(); ++g) {
      const auto& members = groups.members[g];
      if (members.size() < 2)
        bad_input("grpo_passk", "group " + std::to_string(groups.ids[g]) +
                                    " has 1 sample; pass@k advantages need at least 2 samples per group");
      const GroupStats s = stats_of(members, r, true);
      if (s.all_equal) continue;
      int64_t best = members[0];
      for (int64_t i : members)
        if (r[i] > r[best]) best = i;
      double second = -std::numeric_limits<double>::infinity();
      for (int64_t i : members)
        if (i != best) second = std::max(second, r[i]);
      double a = r[best] - second;
      if (normalize_) a /= s.std + eps_;
      adv[best] = a;
    }
    return finish(broadcast(adv, mask), {}, mask, groups, r);
  }

 private:
  bool normalize_;
  double eps_;
};

}  // namespace

GRPO_PLUGIN("advantages", "0.1.0", "advantage estimators: grpo, dr_grpo, rloo, reinforce_pp_baseline, reinforce_pp, grpo_passk") {
  registrar.add_advantage<Grpo>("grpo", "GRPO group z-score (r - mean_g) / (std_g + eps); scale group|batch|none");
  registrar.add_advantage<DrGrpo>("dr_grpo", "Dr.GRPO group-centred r - mean_g, no std");
  registrar.add_advantage<Rloo>("rloo", "RLOO leave-one-out (n*r - sum_g) / (n - 1)");
  registrar.add_advantage<ReinforcePpBaseline>("reinforce_pp_baseline",
                                               "REINFORCE++-baseline: r - mean_g, whitened over the batch");
  registrar.add_advantage<ReinforcePp>("reinforce_pp",
                                       "REINFORCE++: discounted token returns (gamma), whitened over the batch");
  registrar.add_advantage<GrpoPassk>("grpo_passk", "pass@k: the best sample of a group gets r_max - r_second");
}
