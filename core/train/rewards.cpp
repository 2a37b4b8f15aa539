#include "core/train/rewards.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/config/config_access.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

RewardOptions reward_options(const sdk::ConfigValue& root) {
  RewardOptions o;
  const sdk::ConfigView reward(find_config_node(root, {"reward"}), "reward");
  const sdk::ConfigView rollout(find_config_node(root, {"rollout"}), "rollout");
  auto fail = [&](const char* section, const char* key, const std::string& message) {
    fail_at_key(find_config_node(root, {section, key}), std::string(section) + "." + key, message);
  };
  auto finite = [&](const char* key, double v) {
    if (!std::isfinite(v)) fail("reward", key, "expected a finite number, got " + number_text(v));
    return v;
  };

  o.verification_reward = finite("verification_reward", reward.get_double("verification_reward", o.verification_reward));
  o.format_verifier = reward.get_string("format_verifier", o.format_verifier);
  o.format_additive = reward.get_choice("format_mode", o.format_additive ? "additive" : "gate", {"gate", "additive"}) == "additive";
  o.non_stop_penalty = reward.get_bool("non_stop_penalty", o.non_stop_penalty);
  o.non_stop_penalty_value =
      finite("non_stop_penalty_value", reward.get_double("non_stop_penalty_value", o.non_stop_penalty_value));
  o.mask_truncated_completions = reward.get_bool("mask_truncated_completions", o.mask_truncated_completions);

  o.max_new_tokens = rollout.get_int("max_new_tokens", o.max_new_tokens);
  if (o.max_new_tokens < 1)
    fail("rollout", "max_new_tokens", "expected an integer >= 1, got " + std::to_string(o.max_new_tokens));
  o.overlong_buffer = reward.get_int("overlong_buffer", o.overlong_buffer);
  if (o.overlong_buffer < 0 || o.overlong_buffer >= o.max_new_tokens)
    fail("reward", "overlong_buffer",
         "expected an integer in [0, rollout.max_new_tokens) = [0, " + std::to_string(o.max_new_tokens) + "), got " +
             std::to_string(o.overlong_buffer) + " (0 turns overlong shaping off)");
  o.overlong_penalty_factor =
      finite("overlong_penalty_factor", reward.get_double("overlong_penalty_factor", o.overlong_penalty_factor));
  if (o.overlong_penalty_factor < 0)
    fail("reward", "overlong_penalty_factor", "expected a number >= 0, got " + number_text(o.overlong_penalty_factor));

  const std::int64_t threads = reward.get_int("num_threads", static_cast<std::int64_t>(o.num_threads));
  if (threads < 0) fail("reward", "num_threads", "expected an integer >= 0 (0 = hardware threads), got " + std::to_string(threads));
  o.num_threads = static_cast<std::size_t>(threads);
  o.timeout_s = reward.get_double("timeout_s", o.timeout_s);
  if (!(std::isfinite(o.timeout_s) && o.timeout_s > 0))
    fail("reward", "timeout_s", "expected a finite number of seconds > 0, got " + number_text(o.timeout_s));
  return o;
}

void shape_rewards(std::vector<Group>& groups, const RewardOptions& options) {
  const double buffer = static_cast<double>(options.overlong_buffer);
  const double expected = static_cast<double>(options.max_new_tokens - options.overlong_buffer);
  for (Group& g : groups)
    for (Sample& s : g.samples) {
      double reward = s.verifier_reward + s.model_reward;
      if (options.overlong_buffer > 0) {
        // DAPO: linear penalty over the last `buffer` tokens, -factor at the limit.
        const double exceed = static_cast<double>(s.response_ids.size()) - expected;
        reward += std::min(-exceed / buffer * options.overlong_penalty_factor, 0.0);
      }
      if (options.non_stop_penalty && !s.finished) reward = options.non_stop_penalty_value;
      s.reward = reward;
      s.trainable = !(options.mask_truncated_completions && !s.finished);
    }
}

bool is_zero_std_group(const Group& group) {
  for (const Sample& s : group.samples)
    if (s.reward != group.samples.front().reward) return false;
  return true;
}

GroupFilter filter_zero_std_groups(std::vector<Group>& groups) {
  GroupFilter f;
  auto kept_end = std::stable_partition(groups.begin(), groups.end(), [](const Group& g) { return !is_zero_std_group(g); });
  f.kept = static_cast<std::size_t>(kept_end - groups.begin());
  f.dropped = groups.size() - f.kept;
  groups.erase(kept_end, groups.end());
  return f;
}

ActiveSamplingBatch::ActiveSamplingBatch(std::size_t target_groups) : target_(target_groups) {
  if (target_groups == 0) throw std::invalid_argument("ActiveSamplingBatch: the target number of groups must be >= 1");
}

void ActiveSamplingBatch::add(std::vector<Group> groups) {
  ++batches_added_;
  for (Group& g : groups) {
    if (is_zero_std_group(g))
      ++zero_std_dropped_;
    else
      groups_.push_back(std::move(g));
  }
}

std::vector<Group> ActiveSamplingBatch::take() {
  if (groups_.size() > target_) {
    surplus_dropped_ += groups_.size() - target_;
    groups_.resize(target_);
  }
  std::vector<Group> out = std::move(groups_);
  groups_.clear();
  return out;
}

double pass_at_k(std::int64_t n, std::int64_t c, std::int64_t k) {
  if (k < 1 || k > n)
    throw std::invalid_argument("pass@k needs 1 <= k <= n (samples), got k = " + std::to_string(k) + ", n = " + std::to_string(n));
  if (c < 0 || c > n)
    throw std::invalid_argument("pass@k needs 0 <= c <= n, got c = " + std::to_string(c) + ", n = " + std::to_string(n));
  if (n - c < k) return 1.0;  // every k-subset holds a correct sample
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1..n} (1 - k / i)
  double none_correct = 1.0;
  for (std::int64_t i = n - c + 1; i <= n; ++i) none_correct *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - none_correct;
}

std::vector<std::pair<std::string, double>> reward_metrics(const std::vector<Group>& groups) {
  std::vector<std::pair<std::string, double>> out;
  std::size_t n = 0, correct = 0, finished = 0, masked = 0, errors = 0, timeouts = 0;
  double reward_sum = 0, verifier_reward_sum = 0, length_sum = 0;
  double length_min = 0, length_max = 0;
  struct PerVerifier {
    double score_sum = 0;
    std::size_t correct = 0, count = 0;
  };
  std::map<std::string, PerVerifier> per_verifier;
  for (const Group& g : groups)
    for (const Sample& s : g.samples) {
      const double len = static_cast<double>(s.response_ids.size());
      length_min = n == 0 ? len : std::min(length_min, len);
      length_max = n == 0 ? len : std::max(length_max, len);
      ++n;
      reward_sum += s.reward;
      verifier_reward_sum += s.verifier_reward;
      length_sum += len;
      correct += s.correct ? 1 : 0;
      finished += s.finished ? 1 : 0;
      masked += s.trainable ? 0 : 1;
      for (const VerifierVerdict& v : s.verdicts) {
        PerVerifier& p = per_verifier[v.verifier];
        p.score_sum += v.score;
        p.correct += v.score >= 0.5 ? 1 : 0;
        ++p.count;
        if (v.timed_out)
          ++timeouts;
        else if (v.failed)
          ++errors;
      }
    }
  if (n == 0) return out;
  const double count = static_cast<double>(n);
  const double mean = reward_sum / count;
  double square_sum = 0;
  for (const Group& g : groups)
    for (const Sample& s : g.samples) square_sum += (s.reward - mean) * (s.reward - mean);
  out.emplace_back("objective/scores", mean);
  out.emplace_back("objective/scores_std", std::sqrt(square_sum / count));
  out.emplace_back("objective/verifiable_correct_rate", static_cast<double>(correct) / count);
  out.emplace_back("objective/verifier_reward", verifier_reward_sum / count);
  for (const auto& [name, p] : per_verifier) {
    out.emplace_back("reward/" + name + "/score", p.score_sum / static_cast<double>(p.count));
    out.emplace_back("reward/" + name + "/correct_rate", static_cast<double>(p.correct) / static_cast<double>(p.count));
  }
  out.emplace_back("reward/verifier_errors", static_cast<double>(errors));
  out.emplace_back("reward/verifier_timeouts", static_cast<double>(timeouts));
  out.emplace_back("val/stop_token_rate", static_cast<double>(finished) / count);
  out.emplace_back("val/sequence_lengths", length_sum / count);
  out.emplace_back("val/sequence_lengths_min", length_min);
  out.emplace_back("val/sequence_lengths_max", length_max);
  out.emplace_back("val/num_truncated_masked", static_cast<double>(masked));
  return out;
}

}  // namespace grpo::core
