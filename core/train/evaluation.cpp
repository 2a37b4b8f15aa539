#include "core/train/evaluation.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <stdexcept>

#include "core/config/config_access.h"
#include "core/dist/metric_reduction.h"
#include "core/dist/process_group.h"
#include "core/train/rewards.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// eval/<name> metrics of scored groups: reward metrics without their objective/ or val/
// prefix, then pass@k and the prompt count.
void add_eval_metrics(const std::vector<Group>& groups, std::int64_t pass_k, MetricList& out) {
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
    pass += pass_at_k(static_cast<std::int64_t>(g.samples.size()), c, pass_k);
  }
  out.emplace_back("eval/pass_at_" + std::to_string(pass_k), pass / static_cast<double>(groups.size()));
  out.emplace_back("eval/prompts", static_cast<double>(groups.size()));
}

}  // namespace

MetricList evaluate_prompts(RolloutContext& ctx, const PromptSet& eval, const sdk::NamedTensors* weights, std::int64_t step,
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
    add_eval_metrics(groups, s.eval_pass_k, out);
  }
  if (ctx.tools)
    for (const auto& [name, value] : tool_metrics(groups)) out.emplace_back("eval/" + name, value);
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

PromptSet load_eval_prompts(const sdk::ConfigValue& config, const DataOptions& data, const Tokenizer& tokenizer,
                            const TrainerSettings& s, const nlohmann::ordered_json& tools) {
  PromptSet eval;
  if (data.eval.empty()) return eval;
  eval = tokenize_prompts(load_mixture(data.eval, data, s.seed), tokenizer, s, "eval", tools);
  if (eval.examples.empty()) fail_at_config_key(config, {"data", "eval"}, "no eval rows left after filtering");
  if (s.eval_max_prompts > 0 && static_cast<std::int64_t>(eval.examples.size()) > s.eval_max_prompts) {
    eval.examples.resize(static_cast<std::size_t>(s.eval_max_prompts));
    eval.ids.resize(static_cast<std::size_t>(s.eval_max_prompts));
    eval.texts.resize(static_cast<std::size_t>(s.eval_max_prompts));
  }
  return eval;
}

EvaluationResult run_evaluation(const TrainingJobSettings& job, const sdk::ConfigValue& config,
                                RuntimeComponents& components, const Tokenizer& tokenizer, const sdk::NamedTensors* weights) {
  const TrainerSettings& s = job.trainer;
  if (!components.rollout_backend)
    fail_at_config_key(config, {"rollout", "backend"}, "evaluation needs a rollout backend (e.g. native)");
  if (components.verifiers.empty()) fail_at_config_key(config, {"verifiers"}, "evaluation needs at least one verifier");
  const nlohmann::ordered_json schemas = tool_schemas(components.tools);
  const PromptSet eval = load_eval_prompts(config, job.data, tokenizer, s, schemas);
  if (eval.examples.empty()) fail_at_config_key(config, {"data", "eval"}, "evaluation needs data: add a JSONL file to data.eval");
  try {
    check_verifier_labels(eval.examples, components.verifiers, job.rewards);
  } catch (const std::invalid_argument& e) {
    fail_at_config_key(config, {"verifiers"}, e.what());
  }
  VerifierPool pool(job.rewards.num_threads, job.rewards.timeout_s);
  RolloutContext ctx(s, *components.rollout_backend, components.verifiers, job.rewards, pool);
  std::unique_ptr<ToolRollout> tools = make_tool_rollout(components.tools, s.tools, s.chat_template, tokenizer);
  ctx.tools = tools.get();
  ctx.backend_supports_turns = components.backend_supports_turns;
  EvaluationResult result;
  std::vector<Group> groups;
  result.metrics = evaluate_prompts(ctx, eval, weights, 0, &groups);
  for (std::size_t i = 0; i < groups.size(); ++i)
    for (const auto& smp : groups[i].samples)
      result.samples.push_back({groups[i].example.where(), eval.texts[i], smp.text, smp.reward, smp.correct});
  return result;
}

}  // namespace grpo::core
