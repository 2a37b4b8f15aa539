#include "core/train/trainer.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/algo/kl_penalty.h"
#include "core/config/config_access.h"
#include "core/dist/parallelism.h"
#include "core/dist/process_group.h"
#include "core/metrics/run_metrics.h"
#include "core/model/checkpoint.h"
#include "core/optim/optimizer.h"
#include "core/runtime/threads.h"
#include "core/train/advantages.h"
#include "core/train/policy_update.h"
#include "core/train/rollout_worker.h"
#include "core/train/run_dir.h"
#include "core/train/sample_log.h"
#include "core/train/train_state.h"
#include "core/train/trainer_setup.h"
#include "core/train/verifier_pool.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;
using sdk::NamedTensors;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string format_metric(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// Reference = (1 - alpha) reference + alpha policy.
void polyak_update(CausalLM& reference, CausalLM& policy, double alpha) {
  torch::NoGradGuard no_grad;
  auto ref = reference->named_parameters();
  auto pol = policy->named_parameters();
  for (const auto& p : pol) ref[p.key()].mul_(1.0 - alpha).add_(p.value(), alpha);
}

// One training run: set up by prepare(), then run() steps until train.steps. Not copyable;
// the members are declared in set-up order (the rollout worker, created in run(), goes first
// when the run ends: it uses the context, pool and prompts).
class Trainer {
 public:
  Trainer(const TrainingJobSettings& job, const sdk::ConfigValue& config, RuntimeComponents& components, LoadedPolicy& policy,
          const PolicySpec& policy_spec, const TrainingComponents& parts, TrainingPrompts prompts,
          dist::Distributed* distributed)
      : job_(job), s_(job.trainer), config_(config), components_(components), policy_(policy), policy_spec_(policy_spec),
        distributed_(distributed), parts_(parts), prompts_(std::move(prompts)) {}
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Models, optimizer, resume, metrics, rollout context (check_training_job checked the rest
  // and loaded the prompts). False when a resumed run has nothing left to train.
  bool prepare();
  // The steps, then (data-parallel) the end-of-training barrier.
  void run();

 private:
  void resume_or_start();
  // Wall-clock parts of a step (the time/* metrics).
  struct StepTimes {
    Clock::time_point step_t0;
    double waiting_s = 0.0, training_s = 0.0, snapshot_s = 0.0;
  };
  void train_step(RolloutWorker& worker);
  std::int64_t check_staleness(ReadyBatch& batch, MetricList& m);
  void add_step_metrics(const std::vector<Group>& groups, const StepTimes& times, std::int64_t step, MetricList& m);
  UpdateResult update(std::vector<Group>& groups, const StepAdvantages& advantages, std::int64_t staleness,
                      std::int64_t step, MetricList& m);
  void record_update(const UpdateResult& result, std::int64_t step, const PromptSampler::Position& position_after);
  void log_step(std::int64_t step, const MetricList& m, std::size_t global_groups);
  void stop_if_nonfinite();
  MetricList evaluate(std::int64_t step);
  void save(const char* why);
  // The policy's weights for the rollout backend (core/train/rollout_worker.h).
  // With LoRA: only the targeted weights, merged (W + scaling B A) from the frozen base: the
  // engine keeps the rest of the base model it loaded (docs/lora.md, "Rollouts").
  NamedTensors snapshot() {
    const auto dtype = s_.bf16_weight_snapshots ? std::optional<torch::Dtype>(torch::kBFloat16) : std::nullopt;
    const auto whole = parallel_->whole_model();
    return lora_ ? lora_->merged_weights(dtype) : weight_snapshot(model_, dtype);
  }
  double lr() const {
    return s_.optimizer.learning_rate * lr_factor(s_.optimizer, state_.optimizer_steps, total_optimizer_steps_);
  }

  const TrainingJobSettings& job_;
  const TrainerSettings& s_;
  const sdk::ConfigValue& config_;  // error locations and the ranks' configuration check only
  RuntimeComponents& components_;
  LoadedPolicy& policy_;
  const PolicySpec& policy_spec_;
  dist::Distributed* distributed_;  // null: one process; the parallelism's once set up

  TrainingComponents parts_;
  TrainingPrompts prompts_;
  CausalLM model_{nullptr}, reference_{nullptr};
  LoraAdapters* lora_ = nullptr;                  // model.lora: the policy's adapters
  LoraAdapters* reference_adapters_off_ = nullptr;  // LoRA with a KL term: reference_ is model_ with these off
  // The optimizer, the gradient reducer and the shards (core/dist/parallelism.h).
  std::unique_ptr<dist::Parallelism> parallel_;
  std::int64_t total_optimizer_steps_ = 0;
  TrainerState state_;
  CheckpointContents contents_;
  bool resumed_ = false;
  std::optional<RunMetrics> run_metrics_;
  std::optional<SampleLog> sample_log_;  // rank 0: samples.jsonl
  std::optional<PromptSampler> sampler_;
  std::unique_ptr<VerifierPool> pool_;
  std::unique_ptr<ToolRollout> tools_;  // null without `tools`
  std::unique_ptr<RolloutContext> ctx_;
  std::unique_ptr<RewardModel> reward_model_;
  UpdateComponents update_components_;
  std::function<void()> after_optimizer_step_;
};

bool Trainer::prepare() {
  // ---- Everything that can fail is checked before the first step (check_training_job checked
  // the configuration, the components and the data; here: the models, the resume).
  model_ = policy_.model.model;
  lora_ = policy_.lora.get();
  if (lora_ && needs_reference_model(s_.update.kl)) {
    // The base model is the reference: the policy with its adapters switched off, no second copy.
    reference_ = model_;
    reference_adapters_off_ = lora_;
    spdlog::info("reference model: the base weights with the LoRA adapters switched off (algorithm.kl_coef = {})",
                 s_.update.kl.kl_coef);
  } else if (!lora_) {
    reference_ = load_reference_model(s_, policy_spec_);
  }
  model_->train();
  model_->set_gradient_checkpointing(s_.gradient_checkpointing);
  if (s_.gradient_checkpointing) spdlog::info("activation checkpointing: on (each decoder layer is recomputed in backward)");
  parallel_ = std::make_unique<dist::Parallelism>(model_, lora_, s_.optimizer, s_.sharding, distributed_, config_);
  total_optimizer_steps_ = s_.steps * s_.update.num_epochs * s_.update.num_mini_batches;

  resume_or_start();
  if (resumed_ && state_.step >= s_.steps) {
    spdlog::info("resume: {} is at step {} of {}; nothing left to train", checkpoint_path(s_.run_dir, state_.step),
                 state_.step, s_.steps);
    return false;
  }
  state_.async_steps = s_.async_steps;
  if (parallel_->is_main()) write_effective_config(s_.run_dir, config_);  // every check passed, the resume's too
  if (parallel_->is_main()) run_metrics_.emplace(s_.run_dir, resumed_ ? state_.step : -1, s_.steps, "step", default_training_panels());
  if (parallel_->is_main() && s_.samples_every > 0)
    sample_log_.emplace((std::filesystem::path(s_.run_dir) / "samples.jsonl").string(), *policy_.tokenizer,
                        s_.samples_every, s_.samples_per_step, resumed_ ? state_.step : -1);

  sampler_.emplace(prompts_.train.examples.size(), s_.seed, job_.data.shuffle);
  sampler_->set_position(state_.data);
  pool_ = std::make_unique<VerifierPool>(job_.rewards.num_threads, job_.rewards.timeout_s);
  ctx_ = std::make_unique<RolloutContext>(s_, *parts_.backend, components_.verifiers, job_.rewards, *pool_,
                                          parallel_->distributed());
  tools_ = make_tool_rollout(components_.tools, s_.tools, s_.chat_template, *policy_.tokenizer);
  ctx_->tools = tools_.get();
  ctx_->backend_supports_turns = components_.backend_supports_turns;
  if (job_.reward_model.enabled()) {
    // On the policy's device and in its precision; frozen, so bf16-mixed stores it in bfloat16
    // (as the reference model).
    torch::Dtype dtype = dtype_from_name(policy_spec_.dtype, "model.dtype");
    if (policy_spec_.precision == Precision::kBf16Mixed) dtype = torch::kBFloat16;
    reward_model_ = std::make_unique<RewardModel>(job_.reward_model, dtype, policy_spec_.device, policy_spec_.precision, &config_);
    ctx_->reward_model = reward_model_.get();
  }
  if (tools_)
    spdlog::info("tools: {} ({} parser, at most {} calls per trajectory, {} s per call; resumed {})",
                 [&] {
                   std::string names;
                   for (const auto& t : components_.tools) names += (names.empty() ? "" : ", ") + t.call_name;
                   return names;
                 }(),
                 tool_call_format_name(s_.tools.parser), s_.tools.max_calls, s_.tools.timeout_s,
                 s_.tools.reuse_kv_cache && components_.backend_supports_turns ? "in the backend, KV cache kept"
                                                                              : "by recomputing the prefix");

  update_components_.policy_loss = parts_.policy_loss;
  update_components_.kl_estimator = parts_.kl_estimator;
  update_components_.reference = reference_;
  update_components_.reference_adapters_off = reference_adapters_off_;
  if (parallel_->data_parallel()) {
    update_components_.parallelism = parallel_.get();
    spdlog::info("data parallel: rank {} of {}, {} of {} prompts per step, gradients in {} bucket(s) of <= {} MB",
                 parallel_->rank(), parallel_->world_size(), ctx_->prompt_share(), s_.num_prompts,
                 parallel_->gradient_buckets(), distributed_->options().bucket_mb);
  }
  set_learning_rate(parallel_->optimizer(), lr());
  after_optimizer_step_ = [this] {
    ++state_.optimizer_steps;
    set_learning_rate(parallel_->optimizer(), lr());
  };
  return true;
}

// The checkpoint contents and, with run.resume, the newest checkpoint's state; then the ranks'
// agreement (data-parallel).
void Trainer::resume_or_start() {
  state_.seed = s_.seed;
  state_.async_steps = s_.async_steps;
  contents_.policy = &model_;
  contents_.optimizer = &parallel_->optimizer();
  contents_.reference = (reference_ && !lora_ && s_.ref_update_freq > 0) ? &reference_ : nullptr;
  contents_.lora = lora_;
  contents_.lora_base_model = policy_spec_.model_path;
  contents_.tokenizer = &*policy_.tokenizer;
  contents_.chat_templates = policy_.chat_template->sources();  // resolved once, by load_policy
  contents_.generation_config_json = policy_.model.generation_config_json;
  if (parallel_->optimizer_per_rank()) {
    contents_.shard_world = parallel_->world_size();
    contents_.shard_rank = parallel_->rank();
  }
  resumed_ = s_.resume && resume_from_checkpoint(config_, s_.run_dir, s_.seed, s_.resume_from, contents_, state_);
  if (distributed_) check_ranks_agree(*distributed_, config_, resumed_ ? state_.step : 0, model_);
  parallel_->start();
}

void Trainer::run() {
  MetricList pending_eval;
  if (s_.eval_at_start && state_.step == 0 && !prompts_.eval.examples.empty()) pending_eval = evaluate(0);
  if (!pending_eval.empty() && run_metrics_) run_metrics_->write(0, pending_eval);

  spdlog::info("training: steps {}..{}, {} prompts x {} samples per step, async_steps {}", state_.step + 1, s_.steps,
               s_.num_prompts, s_.group_size, s_.async_steps);
  // Threads: synchronous, the trainer and the rollout thread take turns, each with every
  // thread this process has; async, they compute at once and split them (core/runtime/threads.h).
  const int threads = at::get_num_threads();
  int rollout_threads = threads;
  if (s_.async_steps > 0) {
    const auto [trainer_threads, worker_threads] = async_thread_split(threads);
    at::set_num_threads(trainer_threads);
    rollout_threads = worker_threads;
    spdlog::info("threads: trainer {}, rollout {} (rollout.async_steps {} runs them at once; {} in all)", trainer_threads,
                 rollout_threads, s_.async_steps, threads);
  } else {
    spdlog::info("threads: trainer and rollout take turns, {} each (rollout.async_steps 0)", threads);
  }
  RolloutWorker worker(*ctx_, prompts_.train, *sampler_, state_.step, s_.steps, rollout_threads);
  worker.publish(state_.step, std::make_shared<const NamedTensors>(snapshot()));
  while (state_.step < s_.steps) train_step(worker);

  // No rank leaves before rank 0's final checkpoint is written: every exit code says the run is complete.
  parallel_->barrier("end of training");
  if (run_metrics_) {
    run_metrics_->finish();
    spdlog::info("training done: {} steps; metrics in {}", s_.steps, run_metrics_->metrics_path());
  }
}

// One step, stage by stage: next rollout batch -> (KL-in-reward token KL) -> advantages ->
// update -> bookkeeping and Polyak -> weight publish -> metrics and log -> eval -> checkpoint.
void Trainer::train_step(RolloutWorker& worker) {
  StepTimes times;
  times.step_t0 = Clock::now();
  ReadyBatch batch = worker.next();
  times.waiting_s = seconds_since(times.step_t0);
  const std::int64_t step = state_.step + 1;
  MetricList m = std::move(batch.metrics);
  const std::int64_t staleness = check_staleness(batch, m);

  const auto train_t0 = Clock::now();
  std::vector<Group>& groups = batch.groups;
  const bool kl_in_reward = needs_reference_model(s_.update.kl) && s_.update.kl.kl_in_reward;
  std::vector<std::vector<float>> token_kl;
  {
    // The whole policy on every rank, also one without groups: the ranks' counts of passes differ.
    const auto whole = parallel_->whole_model_if(kl_in_reward);
    if (kl_in_reward && !groups.empty())  // kl(old, ref) per token: the penalty the token rewards carry
      token_kl = reward_token_kl(model_, reference_, *parts_.kl_estimator, groups, s_.update, reference_adapters_off_);
  }
  const StepAdvantages advantages =
      step_advantages(*parts_.advantage, groups, kl_in_reward ? &token_kl : nullptr, reward_kl_coef(s_.update.kl),
                      parallel_->communicator(), step, model_->lm_head_weight().device());
  const UpdateResult result = update(groups, advantages, staleness, step, m);
  times.training_s = seconds_since(train_t0);
  if (sample_log_ && sample_log_->due(step)) sample_log_->write(step, groups, batch.dropped_for_log);
  record_update(result, step, batch.position_after);

  const auto sync_t0 = Clock::now();
  worker.publish(step, std::make_shared<const NamedTensors>(snapshot()));
  times.snapshot_s = seconds_since(sync_t0);

  add_step_metrics(groups, times, step, m);
  const bool last = step == s_.steps;
  if (!prompts_.eval.examples.empty() && (last || (s_.eval_every > 0 && step % s_.eval_every == 0)))
    for (auto& kv : evaluate(step)) m.push_back(kv);
  log_step(step, m, advantages.global_groups);

  stop_if_nonfinite();
  if (last || (s_.save_freq > 0 && step % s_.save_freq == 0)) save(last ? "final" : "save_freq");
}

// rollout/staleness of the batch (trainer steps since the weights it was generated with) and
// the stale-batch guard; returns the staleness.
std::int64_t Trainer::check_staleness(ReadyBatch& batch, MetricList& m) {
  const std::int64_t staleness = state_.step - batch.policy_version;
  m.emplace_back("rollout/staleness", static_cast<double>(staleness));
  if (staleness > s_.async_steps) {
    // Cannot happen with the version rule (rollout_worker.h); kept as the guard the docs promise.
    ++state_.stale_batches_dropped;
    batch.groups.clear();
  }
  m.emplace_back("rollout/stale_batches_dropped", static_cast<double>(state_.stale_batches_dropped));
  return staleness;
}

// The step's own metrics after the rollout's and the update's: rate, timings, counters,
// throughput, epoch; data-parallel, then reduced over ranks.
void Trainer::add_step_metrics(const std::vector<Group>& groups, const StepTimes& times, std::int64_t step, MetricList& m) {
  m.emplace_back("lr", lr());
  m.emplace_back("time/training", times.training_s);
  m.emplace_back("time/waiting", times.waiting_s);
  m.emplace_back("time/weight_snapshot", times.snapshot_s);
  m.emplace_back("time/step", seconds_since(times.step_t0));
  m.emplace_back("train/consecutive_nonfinite", static_cast<double>(state_.consecutive_nonfinite));
  parallel_->add_memory_metrics(m);
  double train_tokens = 0;
  for (const auto& g : groups)
    for (const auto& smp : g.samples) train_tokens += static_cast<double>(g.prompt_ids.size() + smp.response_ids.size());
  m.emplace_back("train/tokens_per_second", times.training_s > 0 ? train_tokens / times.training_s : 0.0);
  m.emplace_back("epoch", static_cast<double>(state_.data.epoch) +
                              static_cast<double>(state_.data.offset) / static_cast<double>(prompts_.train.examples.size()));
  // Data parallel: over ranks, weighted by each rank's share of the prompts.
  m = parallel_->reduce_step_metrics(std::move(m), static_cast<double>(ctx_->prompt_share()),
                                     "step metrics (step " + std::to_string(step) + ")");
}

// The policy update of the step's groups (every rank updates data-parallel, also without
// groups of its own); none when the step has no group with reward spread.
UpdateResult Trainer::update(std::vector<Group>& groups, const StepAdvantages& advantages, std::int64_t staleness,
                             std::int64_t step, MetricList& m) {
  UpdateResult result;
  if (advantages.global_groups == 0) {
    spdlog::warn("step {}: no group with reward spread; no update this step", step);
    return result;
  }
  for (auto& kv : advantages.metrics) m.push_back(kv);
  UpdateOptions u = s_.update;
  u.stale = staleness > 0;
  update_components_.first_group = advantages.first_group;
  update_components_.global_groups = advantages.global_groups;
  result = update_policy(model_, parallel_->optimizer(), after_optimizer_step_, groups, update_components_, u);
  for (auto& kv : result.metrics) m.push_back(kv);
  return result;
}

// The trainer state after the step's update, and the reference model's Polyak update.
void Trainer::record_update(const UpdateResult& result, std::int64_t step, const PromptSampler::Position& position_after) {
  if (result.skipped_nonfinite > 0)
    spdlog::warn("step {}: {} optimizer step(s) skipped: non-finite loss or gradient (train.max_nonfinite_steps = {})", step,
                 result.skipped_nonfinite, s_.max_nonfinite_steps);
  state_.step = step;
  state_.data = position_after;
  if (result.skipped_nonfinite > 0 && result.last_step_nonfinite)
    state_.consecutive_nonfinite += result.skipped_nonfinite;
  else if (result.optimizer_steps > 0)
    state_.consecutive_nonfinite = 0;
  if (s_.ref_update_freq > 0 && reference_ && step % s_.ref_update_freq == 0) {
    const auto whole = parallel_->whole_model();
    polyak_update(reference_, model_, s_.ref_update_alpha);
  }
}

// metrics.jsonl / TensorBoard (rank 0), the progress line and the step's log line.
void Trainer::log_step(std::int64_t step, const MetricList& m, std::size_t global_groups) {
  if (run_metrics_) run_metrics_->write(step, m);
  if (run_metrics_) run_metrics_->show_progress(step, {{"reward", format_metric(metric_value(m, "objective/scores"))},
                                       {"correct", format_percent(metric_value(m, "objective/verifiable_correct_rate"))},
                                       {"", format_rate(metric_value(m, "rollout/tokens_per_second")) + " gen tok/s"}});
  spdlog::info("step {}/{} | reward {} | correct {} | loss {} | kl {} | groups {} | {:.2f} s", step, s_.steps,
               format_metric(metric_value(m, "objective/scores")),
               format_metric(metric_value(m, "objective/verifiable_correct_rate")),
               format_metric(metric_value(m, "loss/policy_avg")), format_metric(metric_value(m, "objective/kl")),
               global_groups, metric_value(m, "time/step"));
}

// train.max_nonfinite_steps optimizer steps in a row with a non-finite loss or gradient stop
// the run, after a checkpoint.
void Trainer::stop_if_nonfinite() {
  if (state_.consecutive_nonfinite < s_.max_nonfinite_steps) return;
  save("after non-finite steps");
  throw std::runtime_error("stopping: " + std::to_string(state_.consecutive_nonfinite) +
                           " optimizer steps in a row had a non-finite loss or gradient (train.max_nonfinite_steps = " +
                           std::to_string(s_.max_nonfinite_steps) + "); the last checkpoint is " +
                           checkpoint_path(s_.run_dir, state_.step) + ". Lower train.learning_rate or check the rewards.");
}

MetricList Trainer::evaluate(std::int64_t step) {
  if (prompts_.eval.examples.empty()) return {};
  const NamedTensors weights = snapshot();
  return evaluate_prompts(*ctx_, prompts_.eval, &weights, step, nullptr);
}

void Trainer::save(const char* why) {
  const auto t0 = Clock::now();
  save_training_checkpoint(*parallel_, s_.run_dir, state_, contents_, s_.keep_last);
  if (parallel_->is_main()) spdlog::info("checkpoint {} ({}, {:.2f} s)", checkpoint_path(s_.run_dir, state_.step), why, seconds_since(t0));
}

}  // namespace

void run_training(CheckedTrainingJob& job, const sdk::ConfigValue& config, LoadedPolicy& policy,
                  dist::Distributed* distributed) {
  try {
    Trainer trainer(job.settings, config, job.components, policy, job.policy, job.parts, std::move(job.prompts), distributed);
    if (trainer.prepare()) trainer.run();
  } catch (const dist::PeerLostError&) {
    throw;
  } catch (const std::exception& e) {
    // The other ranks name this one, and why, instead of reporting a lost connection.
    if (distributed) distributed->announce_failure(e.what());
    throw;
  }
}

}  // namespace grpo::core
