// The rollout stage of the trainer: prompts -> a group of completions each from the rollout
// backend -> verifiers (VerifierPool) -> reward shaping -> zero-std filtering / active
// sampling, on a thread of its own that runs up to rollout.async_steps policy versions ahead
// of the training thread.
//
// Determinism: the prompts of step s come from the PromptSampler in step order, the sampling
// seed of every request is mix_seed(run.seed, s, attempt, slot of the prompt in the global
// batch), and the policy version batch s is generated with is a function of s alone
// (RolloutWorker below). Data-parallel, every rank draws the same prompts and generates its
// share_of them, with the seeds a single process would use.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/data/dataset.h"
#include "core/dist/process_group.h"
#include "core/metrics/metrics_log.h"
#include "core/model/transformer.h"
#include "core/runtime/components.h"
#include "core/tools/tool_rollout.h"
#include "core/train/reward_model.h"
#include "core/train/rewards.h"
#include "core/train/rollout_batch.h"
#include "core/train/trainer_settings.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

class Tokenizer;

// splitmix64 over the inputs, in order: the seeds of sampling requests, a function of (run
// seed, step, attempt, slot) for training and of (run seed, 0xE7A1, slot) for evaluation.
// Stable across runs, builds and platforms (checkpointed runs rely on it).
std::uint64_t mix_seed(std::initializer_list<std::uint64_t> parts);

// This rank's share [begin, end) of n items split over `world` ranks in rank order: balanced,
// the first (n % world) ranks one larger. Prompts of a step and eval prompts are split so.
struct Share {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};
Share share_of(std::size_t n, int rank, int world);

// Tokenized prompts of a split (parallel vectors, one entry per kept row).
struct PromptSet {
  std::vector<Example> examples;
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::string> texts;  // rendered with the chat template (VerifierInput::prompt)
};

// Renders every example with settings.chat_template (resolved against `tokenizer`) and
// tokenizes it; rows whose prompt
// is longer than settings.max_prompt_tokens are dropped (one warning naming `split` and the
// count). A prompt that renders to no tokens is a DataError naming its row.
// `tools` (tool_schemas(): Hugging Face function schemas, or null) go to the chat template.
PromptSet tokenize_prompts(std::vector<Example> examples, const Tokenizer& tokenizer, const TrainerSettings& settings,
                           const char* split, const nlohmann::ordered_json& tools = nullptr);

// A detached copy of every parameter of `model` (Hugging Face names), on the model's device
// and in its dtype (or `dtype`): what the rollout backend's update_weights receives.
// `dtype` set: the copies are made in that dtype (bf16-mixed feeding a bf16 engine casts once
// here, and the engine can alias the snapshot instead of casting a float32 copy again).
sdk::NamedTensors weight_snapshot(CausalLM& model, std::optional<torch::Dtype> dtype = std::nullopt);

// Everything the rollout thread and evaluation share. Not owned: the settings, backend,
// verifiers, pool and communicator must outlive the context. The backend is used by one
// thread at a time: whoever generates or loads weights holds backend_mutex.
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
  // Tools in the loop (the config's `tools`): generation goes through it; null = single-turn.
  ToolRollout* tools = nullptr;
  bool backend_supports_turns = false;  // RuntimeComponents::backend_supports_turns
  // A learned reward model (reward_model.path): scores every sample next to the verifiers; null = none.
  RewardModel* reward_model = nullptr;
  int rank() const { return dist ? dist->rank() : 0; }
  int world_size() const { return dist ? dist->world_size() : 1; }
  // Prompts of a step this rank generates (all of them in one process): the active-sampling
  // target, and the weight of this rank's step metrics.
  std::size_t prompt_share() const { return share_of(static_cast<std::size_t>(settings->num_prompts), rank(), world_size()).size(); }
  std::mutex backend_mutex;            // generation + scoring: one user at a time
  std::int64_t backend_version = -1;   // weights the backend holds (-1: as loaded from model.path)
};

// Generates n completions for each prompt prompts[rows[i]] (request seed seeds[i]), scores
// them on ctx.pool and shapes the rewards; one Group per row, in row order, stamped with
// `version`. Appends time/generation, time/reward, rollout/tokens_per_second,
// reward/verifier_calls and the backend's scalar metrics to `metrics`; with ctx.tools the
// samples are multi-turn trajectories (Sample::policy_mask, tool_calls) and the tools/* metrics
// (tool_metrics) are appended too. The caller holds
// ctx.backend_mutex. A failed request is a std::runtime_error naming its row.
std::vector<Group> generate_and_score(RolloutContext& ctx, const PromptSet& prompts, const std::vector<std::size_t>& rows,
                                      std::int64_t n, const sdk::SamplingParams& sampling,
                                      const std::vector<std::uint64_t>& seeds, std::int64_t version, MetricList& metrics);

// The tools/* metrics of one tool rollout: calls_per_sample, samples_with_calls (the tool-call
// rate), error_rate, timeout_rate, malformed_rate (per call), call_time_s (time in tools, summed
// over calls), observation_tokens (per sample), and per tool tools/<name>/calls_per_sample,
// error_rate, timeout_rate, call_time_s.
MetricList tool_metrics(const std::vector<Group>& groups);

// A batch ready for training, produced by the rollout thread.
struct ReadyBatch {
  std::int64_t step = 0;
  std::int64_t policy_version = 0;
  std::vector<Group> groups;  // this rank's groups; zero-std groups already filtered (when configured)
  PromptSampler::Position position_after;
  MetricList metrics;         // reward metrics of everything generated, then the rollout's own
  // Up to log.samples_per_step generated groups that are not in `groups` (zero-std groups
  // filtered out), for samples.jsonl when the kept groups are fewer than that.
  std::vector<Group> dropped_for_log;
};

// The rollout thread: batch s (start_step < s <= last_step) is generated with policy version
// max(start_step, s - 1 - async_steps) (version v = weights after v training steps), so it
// runs at most async_steps versions behind the trainer and the version of every batch is a
// function of s alone.
//
// Threading: the constructor starts the thread; publish() and next() are called from the
// training thread. The worker waits until the snapshot of the version it needs is published,
// and drops older snapshots once it holds a newer one. An exception on the rollout thread is
// rethrown by the next next(). The destructor stops the thread and joins it (a batch being
// generated is finished first). Lifetimes: `ctx` and `train` must outlive the worker.
class RolloutWorker {
 public:
  // `compute_threads` > 0: the rollout thread's LibTorch intra-op threads (its share of the
  // cores when it runs beside the trainer); 0 keeps the count it inherits.
  RolloutWorker(RolloutContext& ctx, const PromptSet& train, PromptSampler sampler, std::int64_t start_step,
                std::int64_t last_step, int compute_threads = 0);
  ~RolloutWorker();
  RolloutWorker(const RolloutWorker&) = delete;
  RolloutWorker& operator=(const RolloutWorker&) = delete;

  // Makes the weights after `version` training steps available to the rollout thread.
  void publish(std::int64_t version, std::shared_ptr<const sdk::NamedTensors> weights);
  // The next batch in step order; blocks until it is ready.
  ReadyBatch next();

 private:
  void loop();
  ReadyBatch produce(std::int64_t step, std::int64_t version, const sdk::NamedTensors& weights);

  RolloutContext& ctx_;
  const PromptSet& train_;
  PromptSampler sampler_;  // used by the rollout thread only
  std::int64_t start_step_, last_step_;
  std::mutex mutex_;       // guards everything below
  std::condition_variable cv_;
  std::map<std::int64_t, std::shared_ptr<const sdk::NamedTensors>> snapshots_;
  std::deque<ReadyBatch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;     // last: started once every member above is constructed
};

}  // namespace grpo::core
