#include "core/train/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/algo/algorithm_settings.h"
#include "core/config/yaml_loader.h"
#include "core/dist/gradient_reducer.h"
#include "core/dist/metric_reduction.h"
#include "core/dist/process_group.h"
#include "core/model/checkpoint.h"
#include "core/metrics/run_metrics.h"
#include "core/train/rollout_batch.h"
#include "core/train/train_state.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/torch/advantage.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;
using sdk::NamedTensors;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// splitmix64 over the inputs: seeds of sampling requests, a function of (run seed, step, slot).
std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (std::uint64_t p : parts) {
    h ^= p + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    std::uint64_t z = (h += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    h = z ^ (z >> 31);
  }
  return h;
}

// This rank's share [begin, end) of n items split over `world` ranks in rank order: balanced,
// the first (n % world) ranks one larger. Prompts of a step and eval prompts are split so.
struct Share {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};
Share share_of(std::size_t n, int rank, int world) {
  const auto r = static_cast<std::size_t>(rank), w = static_cast<std::size_t>(world);
  const std::size_t base = n / w, extra = n % w;
  Share s;
  s.begin = r * base + std::min(r, extra);
  s.end = s.begin + base + (r < extra ? 1 : 0);
  return s;
}

template <class T>
std::shared_ptr<T> component_of(const RuntimeComponents& components, sdk::ComponentKind kind) {
  for (const auto& c : components.others)
    if (c.kind == kind && c.object) return std::static_pointer_cast<T>(c.object);
  return nullptr;
}

// Tokenized prompts of a split, rows whose prompt is too long dropped (counted).
struct PromptSet {
  std::vector<Example> examples;
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::string> texts;
};

PromptSet tokenize_prompts(std::vector<Example> examples, const Tokenizer& tokenizer, const TrainerSettings& s,
                           const char* split) {
  PromptSet out;
  std::size_t too_long = 0;
  for (auto& ex : examples) {
    std::string text = render_prompt(ex, s.chat_template_name);
    std::vector<int> ids = tokenizer.encode(text);
    if (ids.empty()) throw DataError(ex.where() + ": the prompt renders to no tokens");
    if (static_cast<std::int64_t>(ids.size()) > s.max_prompt_tokens) {
      ++too_long;
      continue;
    }
    out.ids.emplace_back(ids.begin(), ids.end());
    out.texts.push_back(std::move(text));
    out.examples.push_back(std::move(ex));
  }
  if (too_long)
    spdlog::warn("{} data: {} row(s) dropped: prompt longer than rollout.max_prompt_tokens = {}", split, too_long,
                 s.max_prompt_tokens);
  return out;
}

NamedTensors weight_snapshot(CausalLM& model) {
  torch::NoGradGuard no_grad;
  NamedTensors out;
  for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

// Everything both the rollout thread and evaluation use.
struct RolloutContext {
  RolloutContext(const TrainerSettings& s, sdk::RolloutBackend& b, const std::vector<VerifierSlot>& v, RewardOptions r,
                 VerifierPool& p, dist::Distributed* d = nullptr)
      : settings(&s), backend(&b), verifiers(&v), rewards(std::move(r)), pool(&p), dist(d) {}
  const TrainerSettings* settings;
  sdk::RolloutBackend* backend;
  const std::vector<VerifierSlot>* verifiers;
  RewardOptions rewards;
  VerifierPool* pool;
  dist::Distributed* dist;  // data-parallel: this rank generates its share of every batch
  int rank() const { return dist ? dist->rank() : 0; }
  int world_size() const { return dist ? dist->world_size() : 1; }
  // Prompts of a step this rank generates (all of them in one process).
  std::size_t prompt_share() const { return share_of(static_cast<std::size_t>(settings->num_prompts), rank(), world_size()).size(); }
  std::mutex backend_mutex;            // generation + scoring: one user at a time
  std::int64_t backend_version = -1;   // weights the backend holds (-1: as loaded from model.path)
};

// Generates n completions for each prompt, scores and shapes them. Caller holds backend_mutex.
std::vector<Group> generate_and_score(RolloutContext& ctx, const PromptSet& prompts, const std::vector<std::size_t>& rows,
                                      std::int64_t n, const sdk::SamplingParams& sampling,
                                      const std::vector<std::uint64_t>& seeds, std::int64_t version, MetricList& metrics) {
  std::vector<sdk::GenerationRequest> requests;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    sdk::GenerationRequest r;
    r.id = std::to_string(i);
    r.prompt_ids = prompts.ids[rows[i]];
    r.n = n;
    r.sampling = sampling;
    r.seed = seeds[i];
    requests.push_back(std::move(r));
  }
  const auto t0 = Clock::now();
  std::vector<sdk::GenerationResult> results = ctx.backend->generate(requests);
  const double generation_s = seconds_since(t0);
  if (results.size() != requests.size())
    throw std::runtime_error("rollout backend returned " + std::to_string(results.size()) + " results for " +
                             std::to_string(requests.size()) + " requests");
  std::vector<Group> groups;
  std::vector<std::string> prompt_texts;
  double response_tokens = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& res = results[i];
    const Example& ex = prompts.examples[rows[i]];
    if (!res.status.ok())
      throw std::runtime_error("generation failed for " + ex.where() + ": " + res.status.message());
    Group g;
    g.example = ex;
    g.prompt_ids = prompts.ids[rows[i]];
    g.policy_version = version;
    for (const auto& gs : res.samples) {
      Sample s;
      s.response_ids = gs.token_ids;
      s.text = gs.text;
      s.rollout_logprobs = gs.logprobs;
      s.finished = gs.finish_reason == sdk::FinishReason::kStop;
      response_tokens += static_cast<double>(gs.token_ids.size());
      g.samples.push_back(std::move(s));
    }
    groups.push_back(std::move(g));
    prompt_texts.push_back(prompts.texts[rows[i]]);
  }
  const auto t1 = Clock::now();
  const ScoringStats stats = ctx.pool->score(groups, prompt_texts, *ctx.verifiers, ctx.rewards);
  shape_rewards(groups, ctx.rewards);
  metrics.emplace_back("time/generation", generation_s);
  metrics.emplace_back("time/reward", seconds_since(t1));
  metrics.emplace_back("rollout/tokens_per_second", generation_s > 0 ? response_tokens / generation_s : 0.0);
  metrics.emplace_back("reward/verifier_calls", static_cast<double>(stats.calls));
  for (const auto& m : ctx.backend->metrics())
    if (m.value.defined() && m.value.numel() == 1) metrics.emplace_back(m.name, m.value.item<double>());
  return groups;
}

sdk::SamplingParams training_sampling(const TrainerSettings& s) {
  sdk::SamplingParams p;
  p.temperature = s.temperature;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.min_p = s.min_p;
  p.max_new_tokens = s.max_new_tokens;
  p.stop_strings = s.stop_strings;
  return p;
}

// A batch ready for training, produced by the rollout thread.
struct ReadyBatch {
  std::int64_t step = 0;
  std::int64_t policy_version = 0;
  std::vector<Group> groups;  // zero-std groups already filtered (when configured)
  PromptSampler::Position position_after;
  MetricList metrics;
};

// The rollout thread: batch s is generated with policy version max(start, s - 1 - async_steps)
// (version v = weights after v training steps), so it runs at most async_steps versions
// behind the trainer and the version of every batch is a function of s alone.
class RolloutWorker {
 public:
  RolloutWorker(RolloutContext& ctx, const PromptSet& train, PromptSampler sampler, std::int64_t start_step,
                std::int64_t last_step)
      : ctx_(ctx), train_(train), sampler_(std::move(sampler)), start_step_(start_step), last_step_(last_step) {
    thread_ = std::thread([this] { loop(); });
  }
  ~RolloutWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void publish(std::int64_t version, std::shared_ptr<const NamedTensors> weights) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      snapshots_[version] = std::move(weights);
    }
    cv_.notify_all();
  }

  ReadyBatch next() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (error_) std::rethrow_exception(error_);
    ReadyBatch b = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return b;
  }

 private:
  void loop() {
    try {
      const TrainerSettings& s = *ctx_.settings;
      for (std::int64_t step = start_step_ + 1; step <= last_step_; ++step) {
        const std::int64_t version = std::max(start_step_, step - 1 - s.async_steps);
        std::shared_ptr<const NamedTensors> weights;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || snapshots_.count(version); });
          if (stop_) return;
          weights = snapshots_.at(version);
          snapshots_.erase(snapshots_.begin(), snapshots_.lower_bound(version));
        }
        ReadyBatch batch = produce(step, version, *weights);
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(batch));
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  ReadyBatch produce(std::int64_t step, std::int64_t version, const NamedTensors& weights) {
    const TrainerSettings& s = *ctx_.settings;
    ReadyBatch batch;
    batch.step = step;
    batch.policy_version = version;
    std::lock_guard<std::mutex> backend_lock(ctx_.backend_mutex);
    double sync_s = 0.0;
    if (ctx_.backend_version != version) {
      const auto t0 = Clock::now();
      ctx_.backend->update_weights(weights);
      ctx_.backend_version = version;
      sync_s = seconds_since(t0);
    }
    const sdk::SamplingParams sampling = training_sampling(s);
    ActiveSamplingBatch active(ctx_.prompt_share());
    std::vector<Group> all_groups;  // for the reward metrics: everything generated this step
    MetricList gen_metrics;
    double generation_s = 0, reward_s = 0;
    std::int64_t attempts = 0;
    std::vector<Group> kept;
    std::size_t zero_std_dropped = 0;
    for (;;) {
      // Every rank draws the same prompts (same sampler, same seed) and generates its share;
      // the sampling seeds are those of the prompts' slots in the global batch, so the
      // completions are the ones a single process would sample.
      const std::vector<std::size_t> drawn = sampler_.next(static_cast<std::size_t>(s.num_prompts));
      const Share share = share_of(drawn.size(), ctx_.rank(), ctx_.world_size());
      std::vector<std::size_t> rows;
      std::vector<std::uint64_t> seeds;
      for (std::size_t i = share.begin; i < share.end; ++i) {
        rows.push_back(drawn[i]);
        seeds.push_back(mix_seed({s.seed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(attempts), i}));
      }
      MetricList m;
      std::vector<Group> groups;
      // With active sampling a rank that already has its share skips generation, but keeps
      // drawing so that every rank's sampler stays at the same position.
      if (!(s.active_sampling && active.full()))
        groups = generate_and_score(ctx_, train_, rows, s.group_size, sampling, seeds, version, m);
      generation_s += metric_value(m, "time/generation");
      reward_s += metric_value(m, "time/reward");
      if (attempts == 0) gen_metrics = m;
      ++attempts;
      all_groups.insert(all_groups.end(), groups.begin(), groups.end());
      if (!s.active_sampling) {
        if (s.filter_zero_std) zero_std_dropped = filter_zero_std_groups(groups).dropped;
        kept = std::move(groups);
        break;
      }
      active.add(std::move(groups));
      bool done = active.full();
      if (ctx_.dist)  // the ranks stop together: when every rank has its share
        done = ctx_.dist->rollout().all_reduce_max(done ? 0.0 : 1.0, "active sampling (step " + std::to_string(step) + ")") == 0.0;
      if (done || attempts >= s.active_sampling_max_batches) {
        const bool full = active.full();
        kept = active.take();
        if (!full)
          spdlog::warn("step {}: active sampling found {} of {} groups with reward spread in {} batches "
                       "(algorithm.active_sampling_max_batches); training on those",
                       step, kept.size(), s.num_prompts, attempts);
        zero_std_dropped = active.zero_std_dropped();
        break;
      }
    }
    batch.position_after = sampler_.position();
    batch.metrics = reward_metrics(all_groups);
    for (const auto& kv : gen_metrics)
      if (kv.first != "time/generation" && kv.first != "time/reward") batch.metrics.push_back(kv);
    batch.metrics.emplace_back("time/generation", generation_s);
    batch.metrics.emplace_back("time/reward", reward_s);
    batch.metrics.emplace_back("time/weight_sync", sync_s);
    batch.metrics.emplace_back("rollout/generation_batches", static_cast<double>(attempts));
    batch.metrics.emplace_back("other/zero_std_groups_dropped", static_cast<double>(zero_std_dropped));
    const double generated = static_cast<double>(all_groups.size());
    batch.metrics.emplace_back("other/real_batch_size_ratio",
                               generated > 0 ? static_cast<double>(kept.size()) / generated : 0.0);
    batch.groups = std::move(kept);
    return batch;
  }

  RolloutContext& ctx_;
  const PromptSet& train_;
  PromptSampler sampler_;
  std::int64_t start_step_, last_step_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::int64_t, std::shared_ptr<const NamedTensors>> snapshots_;
  std::deque<ReadyBatch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
};

// Per-token advantages of every sample (Sample::advantages) from the configured estimator.
// With KL in the reward, token_kl[b] (the per-token kl_coef-weighted penalty source) enters
// the token rewards first.
MetricList compute_advantages(const sdk::AdvantageEstimator& estimator, std::vector<Group>& groups,
                              const std::vector<std::vector<float>>* token_kl, double reward_kl_coef) {
  std::int64_t B = 0, T = 1;
  for (const auto& g : groups)
    for (const auto& s : g.samples) {
      ++B;
      T = std::max<std::int64_t>(T, static_cast<std::int64_t>(s.response_ids.size()));
    }
  MetricList metrics;
  if (B == 0) return metrics;
  at::Tensor mask = torch::zeros({B, T}, torch::kFloat);
  at::Tensor rewards = torch::zeros({B}, torch::kFloat);
  at::Tensor group_ids = torch::zeros({B}, torch::kLong);
  at::Tensor kl = token_kl ? torch::zeros({B, T}, torch::kFloat) : at::Tensor();
  {
    auto m = mask.accessor<float, 2>();
    auto r = rewards.accessor<float, 1>();
    auto gid = group_ids.accessor<std::int64_t, 1>();
    std::int64_t b = 0;
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      for (const auto& s : groups[gi].samples) {
        for (std::size_t t = 0; t < s.response_ids.size(); ++t) m[b][static_cast<std::int64_t>(t)] = 1.0f;
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
  in.batch.response_mask = mask;
  in.batch.group_ids = group_ids;
  in.rewards = rewards;
  if (token_kl) {
    // The sequence reward sits on the last response token (verl's token_level_scores).
    at::Tensor token_rewards = torch::zeros({B, T}, torch::kFloat);
    const at::Tensor last = (mask.sum(1) - 1).clamp_min(0).to(torch::kLong);
    token_rewards.scatter_(1, last.unsqueeze(1), rewards.unsqueeze(1));
    in.token_rewards = kl_in_token_rewards(token_rewards, kl, mask, reward_kl_coef);
    for (auto& m : kl_reward_metrics(kl, mask, reward_kl_coef))
      metrics.emplace_back(m.name, m.value.item<double>());
  }
  sdk::AdvantageOutput out = estimator.compute(in);
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
  const at::Tensor valid = adv.masked_select(mask > 0);
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

// Data-parallel advantages: every rank sends what the estimator reads of its groups (rewards,
// response lengths, per-token KL) to all, each rank runs the estimator on the GLOBAL batch (rank
// order = the order one process would hold), so estimators with batch-wide statistics
// (REINFORCE++'s whitening) see what one process would, and keeps its own groups' advantages.
// Returns the estimator's metrics; *first_group / *global_groups place this rank's groups.
MetricList compute_global_advantages(dist::Communicator& comm, const sdk::AdvantageEstimator& estimator,
                                     std::vector<Group>& groups, const std::vector<std::vector<float>>* token_kl,
                                     double reward_kl_coef, std::int64_t step, std::size_t* first_group,
                                     std::size_t* global_groups) {
  // Layout (doubles): groups; per group: samples; per sample: reward, response length, then
  // (with token KL) one value per response token.
  std::vector<double> mine{static_cast<double>(groups.size())};
  std::size_t b = 0;
  for (const auto& g : groups) {
    mine.push_back(static_cast<double>(g.samples.size()));
    for (const auto& smp : g.samples) {
      mine.push_back(smp.reward);
      mine.push_back(static_cast<double>(smp.response_ids.size()));
      if (token_kl) {
        const auto& row = (*token_kl)[b];
        mine.insert(mine.end(), row.begin(), row.end());
      }
      ++b;
    }
  }
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
    std::vector<double> v(all[r].size() / sizeof(double));
    std::memcpy(v.data(), all[r].data(), v.size() * sizeof(double));
    std::size_t pos = 0;
    auto next = [&]() {
      if (pos >= v.size()) throw std::runtime_error("rank " + std::to_string(r) + " sent a truncated reward batch");
      return v[pos++];
    };
    const auto n_groups = static_cast<std::size_t>(next());
    for (std::size_t gi = 0; gi < n_groups; ++gi) {
      Group g;  // what the estimator reads: rewards and response lengths
      const auto n_samples = static_cast<std::size_t>(next());
      for (std::size_t si = 0; si < n_samples; ++si) {
        Sample smp;
        smp.reward = next();
        smp.response_ids.assign(static_cast<std::size_t>(next()), 0);
        if (token_kl) {
          std::vector<float> row(smp.response_ids.size());
          for (auto& x : row) x = static_cast<float>(next());
          global_kl.push_back(std::move(row));
        }
        g.samples.push_back(std::move(smp));
      }
      global.push_back(std::move(g));
    }
  }
  *global_groups = global.size();
  MetricList metrics = compute_advantages(estimator, global, token_kl ? &global_kl : nullptr, reward_kl_coef);
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i] = std::move(global[*first_group + i]);
  return metrics;
}

// Reference = (1 - alpha) reference + alpha policy.
void polyak_update(CausalLM& reference, CausalLM& policy, double alpha) {
  torch::NoGradGuard no_grad;
  auto ref = reference->named_parameters();
  auto pol = policy->named_parameters();
  for (const auto& p : pol) ref[p.key()].mul_(1.0 - alpha).add_(p.value(), alpha);
}

std::string format_metric(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// One evaluation of `eval` (eval.* settings: the same seeds every time, greedy by default),
// with `weights` loaded into the backend first when given. `groups_out` (may be null) receives
// the scored samples. Data-parallel (ctx.dist): every rank evaluates its share of the prompts
// (with the seeds of their global index) and the metrics are reduced over ranks.
MetricList evaluate_prompts(RolloutContext& ctx, const PromptSet& eval, const NamedTensors* weights, std::int64_t step,
                            std::vector<Group>* groups_out) {
  const TrainerSettings& s = *ctx.settings;
  MetricList out;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(ctx.backend_mutex);
  if (weights) {
    ctx.backend->update_weights(*weights);
    ctx.backend_version = -2;  // the trainer's current weights, not a published version
  }
  sdk::SamplingParams sampling = training_sampling(s);
  sampling.temperature = s.eval_temperature;
  sampling.top_p = s.eval_temperature > 0 ? s.top_p : 1.0;
  const Share share = share_of(eval.examples.size(), ctx.rank(), ctx.world_size());
  std::vector<std::size_t> rows;
  std::vector<std::uint64_t> seeds;
  for (std::size_t i = share.begin; i < share.end; ++i) {
    rows.push_back(i);
    seeds.push_back(mix_seed({s.seed, 0xE7A1ULL, i}));  // the same samples at every evaluation
  }
  std::vector<Group> groups;
  if (!rows.empty()) {
    MetricList gen;
    groups = generate_and_score(ctx, eval, rows, s.eval_num_samples, sampling, seeds, step, gen);
    for (const auto& [name, value] : reward_metrics(groups)) {
      std::string n = name;
      for (const char* prefix : {"objective/", "val/"})
        if (n.rfind(prefix, 0) == 0) n = n.substr(std::string(prefix).size());
      out.emplace_back("eval/" + n, value);
    }
    double pass = 0;
    for (const auto& g : groups) {
      std::int64_t c = 0;
      for (const auto& smp : g.samples) c += smp.correct ? 1 : 0;
      pass += pass_at_k(static_cast<std::int64_t>(g.samples.size()), c, s.eval_pass_k);
    }
    out.emplace_back("eval/pass_at_" + std::to_string(s.eval_pass_k), pass / static_cast<double>(groups.size()));
    out.emplace_back("eval/prompts", static_cast<double>(groups.size()));
  }
  lock.unlock();
  out.emplace_back("time/eval", seconds_since(t0));
  if (ctx.dist)  // prompt-weighted means over ranks; eval/prompts adds up
    out = dist::reduce_metrics(ctx.dist->train(), out, static_cast<double>(rows.size()), "eval metrics (step " + std::to_string(step) + ")");
  spdlog::info("eval at step {}: correct rate {:.4f}, mean score {:.4f}, pass@{} {:.4f} ({} prompts)", step,
               metric_value(out, "eval/verifiable_correct_rate"), metric_value(out, "eval/scores"), s.eval_pass_k,
               metric_value(out, "eval/pass_at_" + std::to_string(s.eval_pass_k)), metric_value(out, "eval/prompts"));
  if (groups_out) *groups_out = std::move(groups);
  return out;
}

// The eval split: loaded, tokenized, cut to eval.max_prompts; empty without data.eval.
PromptSet load_eval_prompts(const sdk::ConfigValue& config, const DataOptions& data, const Tokenizer& tokenizer,
                            const TrainerSettings& s) {
  PromptSet eval;
  if (data.eval.empty()) return eval;
  eval = tokenize_prompts(load_mixture(data.eval, data, s.seed), tokenizer, s, "eval");
  if (eval.examples.empty()) fail_at_config_key(config, {"data", "eval"}, "no eval rows left after filtering");
  if (s.eval_max_prompts > 0 && static_cast<std::int64_t>(eval.examples.size()) > s.eval_max_prompts) {
    eval.examples.resize(static_cast<std::size_t>(s.eval_max_prompts));
    eval.ids.resize(static_cast<std::size_t>(s.eval_max_prompts));
    eval.texts.resize(static_cast<std::size_t>(s.eval_max_prompts));
  }
  return eval;
}

}  // namespace

TrainerSettings trainer_settings(const sdk::ConfigValue& root) {
  TrainerSettings s;
  const sdk::ConfigView run(find_config_node(root, {"run"}), "run");
  const sdk::ConfigView rollout(find_config_node(root, {"rollout"}), "rollout");
  const sdk::ConfigView algorithm(find_config_node(root, {"algorithm"}), "algorithm");
  const sdk::ConfigView train(find_config_node(root, {"train"}), "train");
  const sdk::ConfigView eval(find_config_node(root, {"eval"}), "eval");
  const sdk::ConfigView checkpoint(find_config_node(root, {"checkpoint"}), "checkpoint");
  const sdk::ConfigView tokenizer(find_config_node(root, {"tokenizer"}), "tokenizer");

  auto at_least = [&](const char* section, const char* key, std::int64_t v, std::int64_t min) {
    return int_at_least(root, section, key, v, min);
  };
  s.run_dir = run.get_string("output_dir", "runs/grpo");
  s.seed = static_cast<std::uint64_t>(run.get_int("seed", 1));
  s.resume = run.get_bool("resume", false);
  s.steps = at_least("train", "steps", train.get_int("steps", s.steps), 1);

  s.num_prompts = at_least("rollout", "num_unique_prompts", rollout.get_int("num_unique_prompts", s.num_prompts), 1);
  s.group_size = at_least("rollout", "num_samples_per_prompt", rollout.get_int("num_samples_per_prompt", s.group_size), 1);
  s.temperature = rollout.get_double("temperature", s.temperature);
  s.top_p = rollout.get_double("top_p", s.top_p);
  s.top_k = rollout.get_int("top_k", s.top_k);
  s.min_p = rollout.get_double("min_p", s.min_p);
  s.max_new_tokens = at_least("rollout", "max_new_tokens", rollout.get_int("max_new_tokens", s.max_new_tokens), 1);
  s.max_prompt_tokens = at_least("rollout", "max_prompt_tokens", rollout.get_int("max_prompt_tokens", s.max_prompt_tokens), 1);
  s.stop_strings = rollout.get_string_list("stop_strings", {});
  s.async_steps = at_least("rollout", "async_steps", rollout.get_int("async_steps", s.async_steps), 0);
  for (const auto& p : sdk::sampling_problems(training_sampling(s), s.group_size))
    fail_at_config_key(root, {"rollout", p.field == "n" ? "num_samples_per_prompt" : p.field.c_str()}, p.message);
  if (s.temperature == 0.0)
    fail_at_config_key(root, {"rollout", "temperature"}, "training rollouts need temperature > 0 (a greedy group has no spread to learn from)");

  s.filter_zero_std = algorithm.get_bool("filter_zero_std_groups", true);
  s.active_sampling = algorithm.get_bool("active_sampling", false);
  s.active_sampling_max_batches =
      at_least("algorithm", "active_sampling_max_batches", algorithm.get_int("active_sampling_max_batches", 4), 1);
  if (s.active_sampling && !s.filter_zero_std)
    fail_at_config_key(root, {"algorithm", "active_sampling"}, "active sampling refills zero-std groups; it needs algorithm.filter_zero_std_groups: true");

  const AlgorithmSettings algo = algorithm_settings(root);
  UpdateOptions& u = s.update;
  u.num_epochs = at_least("train", "num_epochs", train.get_int("num_epochs", 1), 1);
  u.num_mini_batches = at_least("train", "num_mini_batches", train.get_int("num_mini_batches", 1), 1);
  if (u.num_mini_batches > s.num_prompts)
    fail_at_config_key(root, {"train", "num_mini_batches"}, "mini-batches hold whole groups: at most rollout.num_unique_prompts = " +
                                                       std::to_string(s.num_prompts) + ", got " + std::to_string(u.num_mini_batches));
  u.rows_per_micro_batch = at_least("train", "per_device_train_batch_size", train.get_int("per_device_train_batch_size", 1), 1);
  u.pack_length = at_least("train", "pack_length", train.get_int("pack_length", 2048), 1);
  if (u.pack_length < s.max_prompt_tokens + s.max_new_tokens)
    fail_at_config_key(root, {"train", "pack_length"},
             std::to_string(u.pack_length) + " cannot hold one sequence of rollout.max_prompt_tokens + rollout.max_new_tokens = " +
                 std::to_string(s.max_prompt_tokens) + " + " + std::to_string(s.max_new_tokens) + " = " +
                 std::to_string(s.max_prompt_tokens + s.max_new_tokens) + " tokens");
  u.temperature = s.temperature;
  u.logprob_chunk_tokens = at_least("train", "logprob_chunk_tokens", train.get_int("logprob_chunk_tokens", 1024), 1);
  const std::string old = train.get_choice("old_logprobs", "auto", {"auto", "recompute", "rollout"});
  u.old_logprobs = old == "recompute" ? OldLogprobSource::kRecompute
                   : old == "rollout" ? OldLogprobSource::kRollout
                                      : OldLogprobSource::kAuto;
  u.aggregation = algo.loss_aggregation;
  u.max_response_len = s.max_new_tokens;
  u.kl = algo.kl;
  u.mismatch = algo.mismatch;
  s.optimizer = optimizer_settings(root);
  u.max_grad_norm = s.optimizer.max_grad_norm;
  s.ref_update_freq = at_least("train", "ref_update_freq", train.get_int("ref_update_freq", 0), 0);
  s.ref_update_alpha = train.get_double("ref_update_alpha", 0.6);
  if (!(s.ref_update_alpha > 0.0 && s.ref_update_alpha <= 1.0))
    fail_at_config_key(root, {"train", "ref_update_alpha"}, "expected a number in (0, 1]");
  s.max_nonfinite_steps = at_least("train", "max_nonfinite_steps", train.get_int("max_nonfinite_steps", 3), 1);

  s.eval_every = at_least("eval", "every", eval.get_int("every", 0), 0);
  s.eval_at_start = eval.get_bool("at_start", true);
  s.eval_num_samples = at_least("eval", "num_samples", eval.get_int("num_samples", 1), 1);
  s.eval_pass_k = at_least("eval", "pass_k", eval.get_int("pass_k", 1), 1);
  if (s.eval_pass_k > s.eval_num_samples)
    fail_at_config_key(root, {"eval", "pass_k"}, "pass@" + std::to_string(s.eval_pass_k) + " needs eval.num_samples >= " +
                                           std::to_string(s.eval_pass_k) + ", got " + std::to_string(s.eval_num_samples));
  s.eval_temperature = eval.get_double("temperature", 0.0);
  if (!std::isfinite(s.eval_temperature) || s.eval_temperature < 0)
    fail_at_config_key(root, {"eval", "temperature"}, "expected a finite number >= 0 (0 = greedy)");
  s.eval_max_prompts = at_least("eval", "max_prompts", eval.get_int("max_prompts", 0), 0);

  s.save_freq = at_least("checkpoint", "save_freq", checkpoint.get_int("save_freq", 0), 0);
  s.keep_last = at_least("checkpoint", "keep_last", checkpoint.get_int("keep_last", 2), 0);
  s.chat_template_name = tokenizer.get_string("chat_template_name", "chatml");
  return s;
}

namespace {

// Data-parallel start: every rank must run the same configuration and resume from the same
// checkpoint (a run directory that is not shared shows here), and starts from rank 0's weights.
void check_ranks_agree(dist::Distributed& d, const sdk::ConfigValue& config, std::int64_t resumed_step, CausalLM& model) {
  dist::Communicator& comm = d.train();
  const std::vector<std::string> configs = comm.all_gather_bytes(to_yaml(config), "configuration check");
  for (std::size_t r = 1; r < configs.size(); ++r)
    if (configs[r] != configs[0]) {
      std::istringstream a(configs[0]), b(configs[r]);
      std::string la, lb;
      int line = 0;
      while (true) {
        ++line;
        const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
        if (!ga && !gb) break;
        if (la != lb || ga != gb) break;
      }
      throw std::runtime_error("rank " + std::to_string(r) + " runs a different configuration than rank 0: line " +
                               std::to_string(line) + " of the effective configuration is '" + lb + "' there and '" + la +
                               "' on rank 0. Launch every rank with the same --config and --set options.");
    }
  const std::vector<std::string> steps = comm.all_gather_bytes(std::to_string(resumed_step), "resume check");
  for (std::size_t r = 1; r < steps.size(); ++r)
    if (steps[r] != steps[0])
      throw std::runtime_error("rank " + std::to_string(r) + " resumes from step " + steps[r] + " but rank 0 from step " +
                               steps[0] + ": run.output_dir must be one folder every rank sees (a shared filesystem)");
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> params;
  for (auto& p : model->parameters()) params.push_back(p.detach());
  comm.broadcast(params, 0, "initial weights from rank 0");
}

void train(const sdk::ConfigValue& config, RuntimeComponents& components, LoadedPolicy& policy,
           const PolicySpec& policy_spec, dist::Distributed* distributed);

}  // namespace

void run_training(const sdk::ConfigValue& config, RuntimeComponents& components, LoadedPolicy& policy,
                  const PolicySpec& policy_spec, dist::Distributed* distributed) {
  try {
    train(config, components, policy, policy_spec, distributed);
  } catch (const dist::PeerLostError&) {
    throw;
  } catch (const std::exception& e) {
    // The other ranks name this one, and why, instead of reporting a lost connection.
    if (distributed) distributed->announce_failure(e.what());
    throw;
  }
}

namespace {

void train(const sdk::ConfigValue& config, RuntimeComponents& components, LoadedPolicy& policy,
           const PolicySpec& policy_spec, dist::Distributed* distributed) {
  const TrainerSettings s = trainer_settings(config);

  // ---- Everything that can fail is checked before the first step.
  if (!policy.model.model) fail_at_config_key(config, {"model", "path"}, "training needs a policy model (set model.path)");
  if (!policy.tokenizer) fail_at_config_key(config, {"tokenizer", "path"}, "training needs a tokenizer");
  const auto backend = component_of<sdk::RolloutBackend>(components, sdk::ComponentKind::kRolloutBackend);
  const auto advantage = component_of<sdk::AdvantageEstimator>(components, sdk::ComponentKind::kAdvantage);
  const auto loss = component_of<sdk::PolicyLoss>(components, sdk::ComponentKind::kPolicyLoss);
  const auto kl_estimator = component_of<sdk::KlEstimator>(components, sdk::ComponentKind::kKlEstimator);
  if (!backend) fail_at_config_key(config, {"rollout", "backend"}, "training needs a rollout backend (e.g. native)");
  if (!advantage)
    fail_at_config_key(config, {"algorithm", "advantage"}, "training needs an advantage estimator (e.g. grpo; or --config configs/algorithms/grpo.yaml)");
  if (!loss) fail_at_config_key(config, {"algorithm", "policy_loss"}, "training needs a policy loss (e.g. ppo_clip)");
  if (components.verifiers.empty()) fail_at_config_key(config, {"verifiers"}, "training needs at least one verifier");
  if (distributed && s.num_prompts < distributed->world_size())
    fail_at_config_key(config, {"rollout", "num_unique_prompts"},
                       "groups are never split across ranks: " + std::to_string(distributed->world_size()) +
                           " ranks need at least " + std::to_string(distributed->world_size()) + " prompts per step, got " +
                           std::to_string(s.num_prompts));

  const DataOptions data = data_options(config);
  if (data.train.empty()) fail_at_config_key(config, {"data", "train"}, "training needs data: add a JSONL file to data.train");
  RewardOptions reward_opts = reward_options(config);
  DataLoadReport train_report;
  PromptSet train = tokenize_prompts(load_mixture(data.train, data, s.seed, &train_report), *policy.tokenizer, s, "training");
  if (train.examples.empty())
    fail_at_config_key(config, {"data", "train"}, "no training rows left after filtering (prompts longer than rollout.max_prompt_tokens = " +
                                            std::to_string(s.max_prompt_tokens) + " are dropped)");
  const PromptSet eval = load_eval_prompts(config, data, *policy.tokenizer, s);
  try {
    check_verifier_labels(train.examples, components.verifiers, reward_opts);
    check_verifier_labels(eval.examples, components.verifiers, reward_opts);
  } catch (const std::invalid_argument& e) {
    fail_at_config_key(config, {"verifiers"}, e.what());
  }
  spdlog::info("data: {} training rows ({} bad rows skipped), {} eval rows", train.examples.size(),
               train_report.bad_rows_skipped, eval.examples.size());

  CausalLM model = policy.model.model;
  const torch::Dtype dtype = dtype_from_name(policy_spec.dtype, "model.dtype");
  CausalLM reference{nullptr};
  if (needs_reference_model(s.update.kl)) {
    reference = load_model(policy_spec.model_path, dtype).model;
    reference->eval();
    for (auto& p : reference->parameters()) p.set_requires_grad(false);
    spdlog::info("reference model loaded (algorithm.kl_coef = {})", s.update.kl.kl_coef);
  }
  model->train();
  auto optimizer = make_adamw(*model, s.optimizer);
  const std::int64_t total_optimizer_steps = s.steps * s.update.num_epochs * s.update.num_mini_batches;

  // ---- Resume.
  TrainerState state;
  state.seed = s.seed;
  state.async_steps = s.async_steps;
  CheckpointContents contents;
  contents.policy = &model;
  contents.optimizer = optimizer.get();
  contents.reference = (reference && s.ref_update_freq > 0) ? &reference : nullptr;
  contents.tokenizer = &*policy.tokenizer;
  contents.chat_template_name = s.chat_template_name;
  contents.generation_config_json = policy.model.generation_config_json;
  const bool resumed = s.resume && resume_from_latest_checkpoint(config, s.run_dir, s.seed, contents, state);
  const bool main_rank = !distributed || distributed->is_main();  // writes checkpoints, metrics and the log
  if (distributed) check_ranks_agree(*distributed, config, resumed ? state.step : 0, model);
  if (resumed && state.step >= s.steps) {
    spdlog::info("resume: {} is at step {} of {}; nothing left to train", checkpoint_path(s.run_dir, state.step),
                 state.step, s.steps);
    return;
  }
  state.async_steps = s.async_steps;
  std::optional<RunMetrics> run_metrics;
  if (main_rank) run_metrics.emplace(s.run_dir, resumed ? state.step : -1, s.steps, "step", default_training_panels());

  PromptSampler sampler(train.examples.size(), s.seed, data.shuffle);
  sampler.set_position(state.data);
  VerifierPool pool(reward_opts.num_threads, reward_opts.timeout_s);
  RolloutContext ctx(s, *backend, components.verifiers, reward_opts, pool, distributed);

  auto evaluate = [&](std::int64_t step) -> MetricList {
    if (eval.examples.empty()) return {};
    const NamedTensors weights = weight_snapshot(model);
    return evaluate_prompts(ctx, eval, &weights, step, nullptr);
  };

  auto save = [&](const char* why) {
    if (!main_rank) return;  // every rank holds the same weights and state
    const auto t0 = Clock::now();
    save_checkpoint(s.run_dir, state, contents, s.keep_last);
    spdlog::info("checkpoint {} ({}, {:.2f} s)", checkpoint_path(s.run_dir, state.step), why, seconds_since(t0));
  };

  UpdateComponents update_components;
  update_components.policy_loss = loss.get();
  update_components.kl_estimator = kl_estimator.get();
  update_components.reference = reference;
  std::unique_ptr<dist::GradientReducer> reducer;
  DataParallelUpdate data_parallel;
  if (distributed) {
    std::vector<at::Tensor> trainable;
    for (const auto& p : model->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    reducer = std::make_unique<dist::GradientReducer>(
        trainable, distributed->train(), static_cast<std::int64_t>(distributed->options().bucket_mb * 1024 * 1024));
    data_parallel.comm = &distributed->train();
    data_parallel.reducer = reducer.get();
    update_components.data_parallel = &data_parallel;
    spdlog::info("data parallel: rank {} of {}, {} of {} prompts per step, gradients in {} bucket(s) of <= {} MB",
                 distributed->rank(), distributed->world_size(), ctx.prompt_share(), s.num_prompts, reducer->num_buckets(), distributed->options().bucket_mb);
  }
  set_learning_rate(*optimizer, s.optimizer.learning_rate * lr_factor(s.optimizer, state.optimizer_steps, total_optimizer_steps));
  auto after_optimizer_step = [&] {
    ++state.optimizer_steps;
    set_learning_rate(*optimizer, s.optimizer.learning_rate * lr_factor(s.optimizer, state.optimizer_steps, total_optimizer_steps));
  };

  MetricList pending_eval;
  if (s.eval_at_start && state.step == 0 && !eval.examples.empty()) pending_eval = evaluate(0);
  if (!pending_eval.empty() && run_metrics) run_metrics->write(0, pending_eval);

  spdlog::info("training: steps {}..{}, {} prompts x {} samples per step, async_steps {}", state.step + 1, s.steps,
               s.num_prompts, s.group_size, s.async_steps);
  RolloutWorker worker(ctx, train, sampler, state.step, s.steps);
  worker.publish(state.step, std::make_shared<const NamedTensors>(weight_snapshot(model)));

  while (state.step < s.steps) {
    const auto step_t0 = Clock::now();
    ReadyBatch batch = worker.next();
    const double waiting_s = seconds_since(step_t0);
    const std::int64_t step = state.step + 1;
    MetricList m = std::move(batch.metrics);
    const std::int64_t staleness = state.step - batch.policy_version;
    m.emplace_back("rollout/staleness", static_cast<double>(staleness));
    if (staleness > s.async_steps) {
      // Cannot happen with the version rule above; kept as the guard the docs promise.
      ++state.stale_batches_dropped;
      batch.groups.clear();
    }
    m.emplace_back("rollout/stale_batches_dropped", static_cast<double>(state.stale_batches_dropped));

    const auto train_t0 = Clock::now();
    std::vector<Group>& groups = batch.groups;
    UpdateResult result;
    std::vector<std::vector<float>> token_kl;
    const bool kl_in_reward = needs_reference_model(s.update.kl) && s.update.kl.kl_in_reward;
    if (kl_in_reward && !groups.empty()) {
      // kl(old, ref) per token, no gradient: the penalty the token rewards carry.
      const auto old_lp = sample_logprobs(model, groups, s.update);
      const auto ref_lp = sample_logprobs(reference, groups, s.update);
      for (std::size_t i = 0; i < old_lp.size(); ++i) {
        const auto n = static_cast<std::int64_t>(old_lp[i].size());
        at::Tensor o = torch::tensor(old_lp[i]).view({1, n});
        at::Tensor r = torch::tensor(ref_lp[i]).view({1, n});
        at::Tensor k = kl_estimator->compute(o, r).to(torch::kFloat).contiguous();
        token_kl.emplace_back(k.data_ptr<float>(), k.data_ptr<float>() + n);
      }
    }
    // Data-parallel: the advantages of the global batch; every rank updates, also without groups.
    std::size_t first_group = 0, global_groups = groups.size();
    MetricList advantage_metrics;
    if (distributed)
      advantage_metrics = compute_global_advantages(distributed->train(), *advantage, groups, kl_in_reward ? &token_kl : nullptr,
                                                    reward_kl_coef(s.update.kl), step, &first_group, &global_groups);
    else if (!groups.empty())
      advantage_metrics = compute_advantages(*advantage, groups, kl_in_reward ? &token_kl : nullptr, reward_kl_coef(s.update.kl));
    if (global_groups > 0) {
      for (auto& kv : advantage_metrics) m.push_back(kv);
      UpdateOptions u = s.update;
      u.stale = staleness > 0;
      data_parallel.first_group = first_group;
      data_parallel.global_groups = global_groups;
      result = update_policy(model, *optimizer, after_optimizer_step, groups, update_components, u);
      for (auto& kv : result.metrics) m.push_back(kv);
    } else {
      spdlog::warn("step {}: no group with reward spread; no update this step", step);
    }
    const double training_s = seconds_since(train_t0);

    if (result.skipped_nonfinite > 0)
      spdlog::warn("step {}: {} optimizer step(s) skipped: non-finite loss or gradient (train.max_nonfinite_steps = {})", step,
                   result.skipped_nonfinite, s.max_nonfinite_steps);
    state.step = step;
    state.data = batch.position_after;
    if (result.skipped_nonfinite > 0 && result.last_step_nonfinite)
      state.consecutive_nonfinite += result.skipped_nonfinite;
    else if (result.optimizer_steps > 0)
      state.consecutive_nonfinite = 0;
    if (s.ref_update_freq > 0 && reference && step % s.ref_update_freq == 0) polyak_update(reference, model, s.ref_update_alpha);

    const auto sync_t0 = Clock::now();
    worker.publish(step, std::make_shared<const NamedTensors>(weight_snapshot(model)));
    const double snapshot_s = seconds_since(sync_t0);

    m.emplace_back("lr", s.optimizer.learning_rate * lr_factor(s.optimizer, state.optimizer_steps, total_optimizer_steps));
    m.emplace_back("time/training", training_s);
    m.emplace_back("time/waiting", waiting_s);
    m.emplace_back("time/weight_snapshot", snapshot_s);
    m.emplace_back("time/step", seconds_since(step_t0));
    m.emplace_back("train/consecutive_nonfinite", static_cast<double>(state.consecutive_nonfinite));
    double train_tokens = 0;
    for (const auto& g : groups)
      for (const auto& smp : g.samples) train_tokens += static_cast<double>(g.prompt_ids.size() + smp.response_ids.size());
    m.emplace_back("train/tokens_per_second", training_s > 0 ? train_tokens / training_s : 0.0);
    m.emplace_back("epoch", static_cast<double>(state.data.epoch) +
                                static_cast<double>(state.data.offset) / static_cast<double>(train.examples.size()));

    if (distributed) {
      // Over ranks (core/dist/metric_reduction.h), weighted by each rank's share of the prompts.
      m.emplace_back("time/collectives", distributed->train().take_blocked_seconds());
      m = dist::reduce_metrics(distributed->train(), m, static_cast<double>(ctx.prompt_share()),
                               "step metrics (step " + std::to_string(step) + ")");
    }
    const bool last = step == s.steps;
    if (!eval.examples.empty() && (last || (s.eval_every > 0 && step % s.eval_every == 0)))
      for (auto& kv : evaluate(step)) m.push_back(kv);
    if (run_metrics) run_metrics->write(step, m);
    if (run_metrics) run_metrics->show_progress(step, {{"reward", format_metric(metric_value(m, "objective/scores"))},
                                     {"correct", format_percent(metric_value(m, "objective/verifiable_correct_rate"))},
                                     {"", format_rate(metric_value(m, "rollout/tokens_per_second")) + " gen tok/s"}});
    spdlog::info("step {}/{} | reward {} | correct {} | loss {} | kl {} | groups {} | {:.2f} s", step, s.steps,
                 format_metric(metric_value(m, "objective/scores")),
                 format_metric(metric_value(m, "objective/verifiable_correct_rate")),
                 format_metric(metric_value(m, "loss/policy_avg")), format_metric(metric_value(m, "objective/kl")),
                 global_groups, metric_value(m, "time/step"));

    if (state.consecutive_nonfinite >= s.max_nonfinite_steps) {
      save("after non-finite steps");
      throw std::runtime_error("stopping: " + std::to_string(state.consecutive_nonfinite) +
                               " optimizer steps in a row had a non-finite loss or gradient (train.max_nonfinite_steps = " +
                               std::to_string(s.max_nonfinite_steps) + "); the last checkpoint is " +
                               checkpoint_path(s.run_dir, state.step) + ". Lower train.learning_rate or check the rewards.");
    }
    if (last || (s.save_freq > 0 && step % s.save_freq == 0)) save(last ? "final" : "save_freq");
  }
  // No rank leaves before rank 0's final checkpoint is written: every exit code says the run is complete.
  if (distributed) distributed->train().barrier("end of training");
  if (run_metrics) {
    run_metrics->finish();
    spdlog::info("training done: {} steps; metrics in {}", s.steps, run_metrics->metrics_path());
  }
}

}  // namespace

EvaluationResult run_evaluation(const sdk::ConfigValue& config, RuntimeComponents& components, const Tokenizer& tokenizer) {
  const TrainerSettings s = trainer_settings(config);
  const auto backend = component_of<sdk::RolloutBackend>(components, sdk::ComponentKind::kRolloutBackend);
  if (!backend) fail_at_config_key(config, {"rollout", "backend"}, "evaluation needs a rollout backend (e.g. native)");
  if (components.verifiers.empty()) fail_at_config_key(config, {"verifiers"}, "evaluation needs at least one verifier");
  const DataOptions data = data_options(config);
  const RewardOptions reward_opts = reward_options(config);
  const PromptSet eval = load_eval_prompts(config, data, tokenizer, s);
  if (eval.examples.empty()) fail_at_config_key(config, {"data", "eval"}, "evaluation needs data: add a JSONL file to data.eval");
  try {
    check_verifier_labels(eval.examples, components.verifiers, reward_opts);
  } catch (const std::invalid_argument& e) {
    fail_at_config_key(config, {"verifiers"}, e.what());
  }
  VerifierPool pool(reward_opts.num_threads, reward_opts.timeout_s);
  RolloutContext ctx(s, *backend, components.verifiers, reward_opts, pool);
  EvaluationResult result;
  std::vector<Group> groups;
  result.metrics = evaluate_prompts(ctx, eval, nullptr, 0, &groups);
  for (std::size_t i = 0; i < groups.size(); ++i)
    for (const auto& smp : groups[i].samples)
      result.samples.push_back({groups[i].example.where(), eval.texts[i], smp.text, smp.reward, smp.correct});
  return result;
}

}  // namespace grpo::core
