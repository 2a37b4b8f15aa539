#include "core/train/advantages.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/algo/kl_penalty.h"
#include "core/dist/process_group.h"

namespace grpo::core {

std::vector<std::vector<float>> reward_token_kl(CausalLM& policy, CausalLM& reference, const sdk::KlEstimator& estimator,
                                                const std::vector<Group>& groups, const UpdateOptions& options,
                                                LoraAdapters* reference_adapters_off) {
  std::vector<std::vector<float>> token_kl;
  const auto old_lp = sample_logprobs(policy, groups, options);
  const auto ref_lp = [&] {
    const AdaptersOff base_model(reference_adapters_off);
    return sample_logprobs(reference, groups, options);
  }();
  // Log-probs are float32 whatever the model's dtype (packing.h); they go to the model's device.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(policy->lm_head_weight().device());
  for (std::size_t i = 0; i < old_lp.size(); ++i) {
    const auto n = static_cast<std::int64_t>(old_lp[i].size());
    at::Tensor o = torch::tensor(old_lp[i], f32).view({1, n});
    at::Tensor r = torch::tensor(ref_lp[i], f32).view({1, n});
    // Read back on the host: the rows are std::vector<float>.
    at::Tensor k = estimator.compute(o, r).to(torch::kCPU, torch::kFloat).contiguous();
    token_kl.emplace_back(k.data_ptr<float>(), k.data_ptr<float>() + n);
  }
  return token_kl;
}

MetricList compute_advantages(const sdk::AdvantageEstimator& estimator, std::vector<Group>& groups,
                              const std::vector<std::vector<float>>* token_kl, double reward_kl_coef,
                              const torch::Device& device) {
  std::int64_t B = 0, T = 1;
  for (const auto& g : groups)
    for (const auto& s : g.samples) {
      ++B;
      T = std::max<std::int64_t>(T, static_cast<std::int64_t>(s.response_ids.size()));
    }
  MetricList metrics;
  if (B == 0) return metrics;
  // Host-built (filled through accessors), then moved to `device` for the estimator.
  const auto host = torch::TensorOptions().device(torch::kCPU);
  at::Tensor mask = torch::zeros({B, T}, host.dtype(torch::kFloat));
  at::Tensor rewards = torch::zeros({B}, host.dtype(torch::kFloat));
  at::Tensor group_ids = torch::zeros({B}, host.dtype(torch::kLong));
  at::Tensor kl = token_kl ? torch::zeros({B, T}, host.dtype(torch::kFloat)) : at::Tensor();
  {
    auto m = mask.accessor<float, 2>();
    auto r = rewards.accessor<float, 1>();
    auto gid = group_ids.accessor<std::int64_t, 1>();
    std::int64_t b = 0;
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      for (const auto& s : groups[gi].samples) {
        // Tool observations are not the policy's: no advantage is estimated over them.
        for (std::size_t t = 0; t < s.response_ids.size(); ++t) m[b][static_cast<std::int64_t>(t)] = s.is_policy_token(t) ? 1.0f : 0.0f;
        r[b] = static_cast<float>(s.reward);
        gid[b] = static_cast<std::int64_t>(gi);
        if (token_kl) {
          const auto& row = (*token_kl)[static_cast<std::size_t>(b)];
          auto k = kl.accessor<float, 2>();
          for (std::size_t t = 0; t < row.size(); ++t) k[b][static_cast<std::int64_t>(t)] = row[t];
        }
        ++b;
      }
  }
  sdk::AdvantageInput in;
  in.batch.response_mask = mask.to(device);
  in.batch.group_ids = group_ids.to(device);
  in.rewards = rewards.to(device);
  if (token_kl) {
    // The sequence reward sits on the last response token (verl's token_level_scores).
    const at::Tensor& mask_d = in.batch.response_mask;
    const at::Tensor kl_d = kl.to(device);
    at::Tensor token_rewards = torch::zeros({B, T}, mask_d.options());
    // The last policy token (with tools, observation tokens may sit between policy tokens).
    const at::Tensor positions = torch::arange(1, T + 1, mask_d.options());
    const at::Tensor last = (mask_d * positions).argmax(1).to(torch::kLong);
    token_rewards.scatter_(1, last.unsqueeze(1), in.rewards.unsqueeze(1));
    in.token_rewards = kl_in_token_rewards(token_rewards, kl_d, mask_d, reward_kl_coef);
    for (auto& m : kl_reward_metrics(kl_d, mask_d, reward_kl_coef))
      metrics.emplace_back(m.name, m.value.item<double>());
  }
  sdk::AdvantageOutput out = estimator.compute(in);
  // Read back on the host: Sample::advantages are std::vector<float>.
  at::Tensor adv = out.advantages.detach().to(torch::kCPU, torch::kFloat).contiguous();
  if (adv.dim() != 2 || adv.size(0) != B || adv.size(1) != T)
    throw std::runtime_error("the advantage estimator returned a tensor of the wrong shape");
  auto a = adv.accessor<float, 2>();
  std::int64_t b = 0;
  for (auto& g : groups)
    for (auto& s : g.samples) {
      s.advantages.assign(s.response_ids.size(), 0.0f);
      for (std::size_t t = 0; t < s.response_ids.size(); ++t) s.advantages[t] = a[b][static_cast<std::int64_t>(t)];
      ++b;
    }
  const at::Tensor valid = adv.masked_select(mask > 0);  // both on the host
  if (valid.numel() > 0) {
    metrics.emplace_back("val/advantages_mean", valid.mean().item<double>());
    metrics.emplace_back("val/advantages_std", valid.numel() > 1 ? valid.std().item<double>() : 0.0);
    metrics.emplace_back("val/advantages_min", valid.min().item<double>());
    metrics.emplace_back("val/advantages_max", valid.max().item<double>());
  }
  for (const auto& m : out.metrics)
    if (m.value.defined() && m.value.numel() == 1) metrics.emplace_back(m.name, m.value.item<double>());
  return metrics;
}

namespace {

// What the estimator reads of `groups` (doubles): groups; per group: samples; per sample:
// reward, response length, policy-mask length (0 or the response length) and its entries,
// then (with token KL) one value per response token.
std::vector<double> advantage_inputs(const std::vector<Group>& groups, const std::vector<std::vector<float>>* token_kl) {
  std::vector<double> mine{static_cast<double>(groups.size())};
  std::size_t b = 0;
  for (const auto& g : groups) {
    mine.push_back(static_cast<double>(g.samples.size()));
    for (const auto& smp : g.samples) {
      mine.push_back(smp.reward);
      mine.push_back(static_cast<double>(smp.response_ids.size()));
      mine.push_back(static_cast<double>(smp.policy_mask.size()));
      mine.insert(mine.end(), smp.policy_mask.begin(), smp.policy_mask.end());
      if (token_kl) {
        const auto& row = (*token_kl)[b];
        mine.insert(mine.end(), row.begin(), row.end());
      }
      ++b;
    }
  }
  return mine;
}

// Appends the groups (rewards and response lengths only: what the estimator reads) and, with
// token KL, their KL rows that rank `rank` sent as advantage_inputs bytes.
void append_remote_groups(const std::string& bytes, std::size_t rank, bool with_token_kl, std::vector<Group>& global,
                          std::vector<std::vector<float>>& global_kl) {
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  std::size_t pos = 0;
  auto next = [&]() {
    if (pos >= v.size()) throw std::runtime_error("rank " + std::to_string(rank) + " sent a truncated reward batch");
    return v[pos++];
  };
  const auto n_groups = static_cast<std::size_t>(next());
  for (std::size_t gi = 0; gi < n_groups; ++gi) {
    Group g;
    const auto n_samples = static_cast<std::size_t>(next());
    for (std::size_t si = 0; si < n_samples; ++si) {
      Sample smp;
      smp.reward = next();
      smp.response_ids.assign(static_cast<std::size_t>(next()), 0);
      smp.policy_mask.resize(static_cast<std::size_t>(next()));
      for (auto& m : smp.policy_mask) m = static_cast<std::uint8_t>(next());
      if (with_token_kl) {
        std::vector<float> row(smp.response_ids.size());
        for (auto& x : row) x = static_cast<float>(next());
        global_kl.push_back(std::move(row));
      }
      g.samples.push_back(std::move(smp));
    }
    global.push_back(std::move(g));
  }
}

}  // namespace

MetricList compute_global_advantages(dist::Communicator& comm, const sdk::AdvantageEstimator& estimator,
                                     std::vector<Group>& groups, const std::vector<std::vector<float>>* token_kl,
                                     double reward_kl_coef, std::int64_t step, std::size_t* first_group,
                                     std::size_t* global_groups, const torch::Device& device) {
  const std::vector<double> mine = advantage_inputs(groups, token_kl);
  const std::string bytes(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double));
  const std::vector<std::string> all = comm.all_gather_bytes(bytes, "rewards for advantages (step " + std::to_string(step) + ")");
  std::vector<Group> global;
  std::vector<std::vector<float>> global_kl;
  *first_group = 0;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (static_cast<int>(r) == comm.rank()) {
      *first_group = global.size();
      for (auto& g : groups) global.push_back(std::move(g));
      if (token_kl) global_kl.insert(global_kl.end(), token_kl->begin(), token_kl->end());
      continue;
    }
    append_remote_groups(all[r], r, token_kl != nullptr, global, global_kl);
  }
  *global_groups = global.size();
  MetricList metrics = compute_advantages(estimator, global, token_kl ? &global_kl : nullptr, reward_kl_coef, device);
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i] = std::move(global[*first_group + i]);
  return metrics;
}

StepAdvantages step_advantages(const sdk::AdvantageEstimator& estimator, std::vector<Group>& groups,
                               const std::vector<std::vector<float>>* token_kl, double reward_kl_coef,
                               dist::Communicator* comm, std::int64_t step, const torch::Device& device) {
  StepAdvantages out;
  out.global_groups = groups.size();
  if (comm)
    out.metrics = compute_global_advantages(*comm, estimator, groups, token_kl, reward_kl_coef, step, &out.first_group,
                                            &out.global_groups, device);
  else if (!groups.empty())
    out.metrics = compute_advantages(estimator, groups, token_kl, reward_kl_coef, device);
  return out;
}

}  // namespace grpo::core
