#include "core/train/rollout_worker.h"

#include <ATen/Parallel.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>

#include "core/tokenizer/tokenizer.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

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

Share share_of(std::size_t n, int rank, int world) {
  const auto r = static_cast<std::size_t>(rank), w = static_cast<std::size_t>(world);
  const std::size_t base = n / w, extra = n % w;
  Share s;
  s.begin = r * base + std::min(r, extra);
  s.end = s.begin + base + (r < extra ? 1 : 0);
  return s;
}

PromptSet tokenize_prompts(std::vector<Example> examples, const Tokenizer& tokenizer, const TrainerSettings& s,
                           const char* split, const nlohmann::ordered_json& tools) {
  PromptSet out;
  std::size_t too_long = 0;
  ChatTemplate chat_template = ChatTemplate::resolve(s.chat_template, tokenizer);
  chat_template.set_variables(nlohmann::ordered_json::parse(s.chat_template_kwargs));
  for (auto& ex : examples) {
    ChatRenderOptions render;
    if (tools.is_array() && !tools.empty()) render.tools = tools;
    std::string text = render_prompt(ex, chat_template, render);
    // A prompt far over the limit is not tokenized (encode_within).
    const std::optional<std::vector<int>> ids = encode_within(tokenizer, text, static_cast<std::size_t>(s.max_prompt_tokens));
    if (!ids) {
      ++too_long;
      continue;
    }
    if (ids->empty()) throw DataError(ex.where() + ": the prompt renders to no tokens");
    out.ids.emplace_back(ids->begin(), ids->end());
    out.texts.push_back(std::move(text));
    out.examples.push_back(std::move(ex));
  }
  if (too_long)
    spdlog::warn("{} data: {} row(s) dropped: prompt longer than rollout.max_prompt_tokens = {}", split, too_long,
                 s.max_prompt_tokens);
  return out;
}

sdk::NamedTensors weight_snapshot(CausalLM& model, std::optional<torch::Dtype> dtype) {
  torch::NoGradGuard no_grad;
  sdk::NamedTensors out;
  for (const auto& p : model->named_parameters()) {
    const at::Tensor w = p.value().detach();
    out.emplace_back(p.key(), dtype && *dtype != w.scalar_type() ? w.to(*dtype) : w.clone());  // same device: never via the host
  }
  return out;
}

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
  std::vector<Group> groups;
  std::vector<std::string> prompt_texts;
  double response_tokens = 0;
  auto start_group = [&](std::size_t i) {
    Group g;
    g.example = prompts.examples[rows[i]];
    g.prompt_ids = prompts.ids[rows[i]];
    g.policy_version = version;
    prompt_texts.push_back(prompts.texts[rows[i]]);
    return g;
  };
  if (ctx.tools) {
    std::vector<std::string> metadata;
    for (sdk::GenerationRequest& r : requests) {
      for (const std::string& stop : ctx.tools->stop_strings())
        if (std::find(r.sampling.stop_strings.begin(), r.sampling.stop_strings.end(), stop) == r.sampling.stop_strings.end())
          r.sampling.stop_strings.push_back(stop);
    }
    for (std::size_t i = 0; i < rows.size(); ++i) metadata.push_back(prompts.examples[rows[i]].metadata);
    std::vector<ToolRolloutResult> results = ctx.tools->generate(*ctx.backend, ctx.backend_supports_turns, requests, metadata);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!results[i].status.is_ok())
        throw std::runtime_error("generation failed for " + prompts.examples[rows[i]].where() + ": " + results[i].status.message());
      Group g = start_group(i);
      for (Trajectory& t : results[i].samples) {
        Sample s;
        s.response_ids = std::move(t.token_ids);
        s.text = std::move(t.text);
        s.rollout_logprobs = std::move(t.logprobs);
        if (t.observation_tokens > 0) s.policy_mask = std::move(t.policy_mask);
        s.tool_calls = std::move(t.calls);
        s.finished = t.finish_reason == sdk::FinishReason::kStop;
        response_tokens += static_cast<double>(s.response_ids.size());
        g.samples.push_back(std::move(s));
      }
      groups.push_back(std::move(g));
    }
  } else {
    std::vector<sdk::GenerationResult> results = ctx.backend->generate(requests);
    if (results.size() != requests.size())
      throw std::runtime_error("rollout backend returned " + std::to_string(results.size()) + " results for " +
                               std::to_string(requests.size()) + " requests");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& res = results[i];
      if (!res.status.is_ok())  // (Status::ok() is the static "ok" factory, not a test)
        throw std::runtime_error("generation failed for " + prompts.examples[rows[i]].where() + ": " + res.status.message());
      Group g = start_group(i);
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
    }
  }
  const double generation_s = seconds_since(t0);
  const auto t1 = Clock::now();
  const ScoringStats stats = ctx.pool->score(groups, prompt_texts, *ctx.verifiers, ctx.rewards);
  MetricList model_metrics;
  if (ctx.reward_model) model_metrics = ctx.reward_model->score_groups(groups);
  shape_rewards(groups, ctx.rewards);
  metrics.emplace_back("time/generation", generation_s);
  metrics.emplace_back("time/reward", seconds_since(t1));
  metrics.emplace_back("rollout/tokens_per_second", generation_s > 0 ? response_tokens / generation_s : 0.0);
  metrics.emplace_back("reward/verifier_calls", static_cast<double>(stats.calls));
  for (auto& m : model_metrics) metrics.push_back(std::move(m));
  for (const auto& m : ctx.backend->metrics())
    if (m.value.defined() && m.value.numel() == 1) metrics.emplace_back(m.name, m.value.item<double>());
  if (ctx.tools)
    for (auto& m : tool_metrics(groups)) metrics.push_back(std::move(m));
  return groups;
}

MetricList tool_metrics(const std::vector<Group>& groups) {
  struct Counts {
    double calls = 0, errors = 0, timeouts = 0, malformed = 0, seconds = 0;
  };
  Counts all;
  std::map<std::string, Counts> per_tool;
  double samples = 0, with_calls = 0, observation_tokens = 0;
  for (const Group& g : groups)
    for (const Sample& s : g.samples) {
      ++samples;
      with_calls += s.tool_calls.empty() ? 0 : 1;
      for (const ToolCallRecord& c : s.tool_calls) {
        observation_tokens += static_cast<double>(c.observation_tokens);
        for (Counts* k : {&all, c.malformed ? nullptr : &per_tool[c.tool]}) {
          if (!k) continue;
          k->calls += 1;
          k->errors += c.is_error ? 1 : 0;
          k->timeouts += c.timed_out ? 1 : 0;
          k->malformed += c.malformed ? 1 : 0;
          k->seconds += c.seconds;
        }
      }
    }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  MetricList out;
  out.emplace_back("tools/calls_per_sample", ratio(all.calls, samples));
  out.emplace_back("tools/samples_with_calls", ratio(with_calls, samples));
  out.emplace_back("tools/error_rate", ratio(all.errors, all.calls));
  out.emplace_back("tools/timeout_rate", ratio(all.timeouts, all.calls));
  out.emplace_back("tools/malformed_rate", ratio(all.malformed, all.calls));
  out.emplace_back("tools/call_time_s", all.seconds);
  out.emplace_back("tools/observation_tokens", ratio(observation_tokens, samples));
  for (const auto& [name, k] : per_tool) {
    out.emplace_back("tools/" + name + "/calls_per_sample", ratio(k.calls, samples));
    out.emplace_back("tools/" + name + "/error_rate", ratio(k.errors, k.calls));
    out.emplace_back("tools/" + name + "/timeout_rate", ratio(k.timeouts, k.calls));
    out.emplace_back("tools/" + name + "/call_time_s", k.seconds);
  }
  return out;
}

// ------------------------------------------------------------------------------ RolloutWorker

RolloutWorker::RolloutWorker(RolloutContext& ctx, const PromptSet& train, PromptSampler sampler, std::int64_t start_step,
                             std::int64_t last_step, int compute_threads)
    : ctx_(ctx), train_(train), sampler_(std::move(sampler)), start_step_(start_step), last_step_(last_step) {
  thread_ = std::thread([this, compute_threads] {
    if (compute_threads > 0) at::set_num_threads(compute_threads);  // per thread (OpenMP's nthreads ICV)
    loop();
  });
}

RolloutWorker::~RolloutWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RolloutWorker::publish(std::int64_t version, std::shared_ptr<const sdk::NamedTensors> weights) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snapshots_[version] = std::move(weights);
  }
  cv_.notify_all();
}

ReadyBatch RolloutWorker::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (error_) std::rethrow_exception(error_);
  ReadyBatch b = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return b;
}

void RolloutWorker::loop() {
  try {
    const TrainerSettings& s = *ctx_.settings;
    for (std::int64_t step = start_step_ + 1; step <= last_step_; ++step) {
      const std::int64_t version = std::max(start_step_, step - 1 - s.async_steps);
      std::shared_ptr<const sdk::NamedTensors> weights;
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

ReadyBatch RolloutWorker::produce(std::int64_t step, std::int64_t version, const sdk::NamedTensors& weights) {
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
  // Groups that did not make it into the batch (all rewards equal), for samples.jsonl.
  if (kept.size() < all_groups.size())
    for (const Group& g : all_groups) {
      if (static_cast<std::int64_t>(batch.dropped_for_log.size()) >= s.samples_per_step) break;
      const bool spread = std::any_of(g.samples.begin(), g.samples.end(),
                                      [&](const Sample& x) { return x.reward != g.samples.front().reward; });
      if (!spread) batch.dropped_for_log.push_back(g);
    }
  batch.groups = std::move(kept);
  return batch;
}

}  // namespace grpo::core
