// Evaluation: the eval split (data.eval) generated with the eval.* settings and scored by the
// verifiers, as the trainer does at eval.every / the last step (and eval.at_start) and as
// grpo-eval does for a saved model.
//
// The same samples at every evaluation: the request seeds depend on run.seed and the prompt's
// index in the eval split only (greedy by default, eval.temperature 0). Data-parallel, every
// rank evaluates its share_of the prompts and the metrics are reduced over ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/metrics/metrics_log.h"
#include "core/runtime/components.h"
#include "core/train/rollout_worker.h"
#include "core/train/trainer_settings.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

class Tokenizer;

// The eval split: loaded (data.eval, settings.seed), tokenized (tokenize_prompts), cut to
// eval.max_prompts; empty without data.eval. `config` is only the place errors point at: a
// split with no row left is a ConfigError naming data.eval.
PromptSet load_eval_prompts(const sdk::ConfigValue& config, const DataOptions& data, const Tokenizer& tokenizer,
                            const TrainerSettings& settings, const nlohmann::ordered_json& tools = nullptr);

// One evaluation of `eval` at `step`, with `weights` loaded into the backend first when given
// (ctx.backend_version becomes -2: the trainer's current weights, not a published version).
// Holds ctx.backend_mutex while generating. Metrics, in order: eval/<reward metric> (the
// reward_metrics names without their objective/ or val/ prefix), eval/pass_at_K, eval/prompts,
// time/eval; one log line. `groups_out` (may be null) receives this rank's scored groups, in
// prompt order. With ctx.tools, eval/tools/* (tool_metrics) follow eval/prompts.
MetricList evaluate_prompts(RolloutContext& ctx, const PromptSet& eval, const sdk::NamedTensors* weights, std::int64_t step,
                            std::vector<Group>* groups_out);

// What one evaluation found: the eval/* metrics (as in metrics.jsonl) and every sample.
struct EvalSample {
  std::string where;  // "data/eval.jsonl:12"
  std::string prompt, completion;
  double reward = 0.0;
  bool correct = false;
};
struct EvaluationResult {
  MetricList metrics;
  std::vector<EvalSample> samples;
};

// Evaluates the rollout backend's model (as loaded from model.path, with `weights` loaded
// into it first when given: a LoRA policy's merged weights) on data.eval with the
// eval.* settings, exactly as the trainer's evaluations do (grpo-eval). `settings` is
// training_job_settings(config); `config` is only the place errors point at (a missing
// backend, verifier or eval split: sdk::ConfigError). Bad rows are DataError.
EvaluationResult run_evaluation(const TrainingJobSettings& settings, const sdk::ConfigValue& config,
                                RuntimeComponents& components, const Tokenizer& tokenizer,
                                const sdk::NamedTensors* weights = nullptr);

}  // namespace grpo::core
