#include "core/train/trainer_settings.h"

#include <cmath>
#include <string>

#include "core/algo/algorithm_settings.h"
#include "core/config/config_access.h"
#include "core/dist/process_group.h"
#include "core/runtime/policy.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

const char* old_logprobs_name(OldLogprobSource source) {
  switch (source) {
    case OldLogprobSource::kRecompute: return "recompute";
    case OldLogprobSource::kRollout: return "rollout";
    case OldLogprobSource::kAuto: break;
  }
  return "auto";
}

// The sections trainer_settings reads, each a view that may be absent (then every key reads
// as its fallback: the struct's member default).
struct Sections {
  explicit Sections(const sdk::ConfigValue& root)
      : run(find_config_node(root, {"run"}), "run"),
        rollout(find_config_node(root, {"rollout"}), "rollout"),
        algorithm(find_config_node(root, {"algorithm"}), "algorithm"),
        train(find_config_node(root, {"train"}), "train"),
        eval(find_config_node(root, {"eval"}), "eval"),
        checkpoint(find_config_node(root, {"checkpoint"}), "checkpoint"),
        tokenizer(find_config_node(root, {"tokenizer"}), "tokenizer") {}
  sdk::ConfigView run, rollout, algorithm, train, eval, checkpoint, tokenizer;
};

// run.*, train.steps, rollout.* and the algorithm.* keys of the rollout thread.
void read_run_and_rollout(const sdk::ConfigValue& root, const Sections& c, TrainerSettings& s) {
  auto at_least = [&](const char* section, const char* key, std::int64_t v, std::int64_t min) {
    return int_at_least(root, section, key, v, min);
  };
  s.run_dir = c.run.get_string("output_dir", s.run_dir);
  s.seed = static_cast<std::uint64_t>(c.run.get_int("seed", static_cast<std::int64_t>(s.seed)));
  s.resume_from = at_least("run", "resume_from", c.run.get_int("resume_from", s.resume_from), 0);
  s.resume = c.run.get_bool("resume", s.resume) || s.resume_from > 0;
  s.steps = at_least("train", "steps", c.train.get_int("steps", s.steps), 1);

  const sdk::ConfigView& rollout = c.rollout;
  s.num_prompts = at_least("rollout", "num_unique_prompts", rollout.get_int("num_unique_prompts", s.num_prompts), 1);
  s.group_size = at_least("rollout", "num_samples_per_prompt", rollout.get_int("num_samples_per_prompt", s.group_size), 1);
  s.temperature = rollout.get_double("temperature", s.temperature);
  s.top_p = rollout.get_double("top_p", s.top_p);
  s.top_k = rollout.get_int("top_k", s.top_k);
  s.min_p = rollout.get_double("min_p", s.min_p);
  s.max_new_tokens = at_least("rollout", "max_new_tokens", rollout.get_int("max_new_tokens", s.max_new_tokens), 1);
  s.max_prompt_tokens = at_least("rollout", "max_prompt_tokens", rollout.get_int("max_prompt_tokens", s.max_prompt_tokens), 1);
  s.stop_strings = rollout.get_string_list("stop_strings", s.stop_strings);
  s.async_steps = at_least("rollout", "async_steps", rollout.get_int("async_steps", s.async_steps), 0);
  {
    const sdk::ConfigView tools(find_config_node(root, {"rollout", "tools"}), "rollout.tools");
    ToolRolloutSettings& t = s.tools;
    t.parser = *tool_call_format_from_name(tools.get_string("parser", tool_call_format_name(t.parser)));
    t.max_calls = tools.get_int("max_calls", t.max_calls);
    if (t.max_calls < 1 || t.max_calls > 1000) tools.fail("max_calls", "must be in [1, 1000]");
    t.timeout_s = tools.get_double("timeout_s", t.timeout_s);
    if (!(t.timeout_s > 0.0) || !std::isfinite(t.timeout_s)) tools.fail("timeout_s", "must be a number of seconds > 0");
    t.observation = tools.get_string("observation", t.observation);
    if (t.observation != "auto" && t.observation.find("{output}") == std::string::npos)
      tools.fail("observation", "expected auto or a text with {output} in it, got '" + t.observation + "'");
    t.max_observation_tokens = tools.get_int("max_observation_tokens", t.max_observation_tokens);
    if (t.max_observation_tokens < 1) tools.fail("max_observation_tokens", "must be >= 1");
    t.reuse_kv_cache = tools.get_bool("reuse_kv_cache", t.reuse_kv_cache);
    t.resume_as_ready = tools.get_bool("resume_as_ready", t.resume_as_ready);
    const std::int64_t threads = tools.get_int("num_threads", 0);
    if (threads < 0 || threads > 4096) tools.fail("num_threads", "must be in [0, 4096] (0 = 4 x the hardware threads)");
    t.threads = static_cast<std::size_t>(threads);
    const sdk::ConfigView log(find_config_node(root, {"log"}), "log");
    s.samples_every = log.get_int("samples_every", s.samples_every);
    if (s.samples_every < 0) log.fail("samples_every", "must be >= 0 (0 = never)");
    s.samples_per_step = log.get_int("samples_per_step", s.samples_per_step);
    if (s.samples_per_step < 1) log.fail("samples_per_step", "must be >= 1");
  }
  for (const auto& p : sdk::sampling_problems(training_sampling(s), s.group_size))
    fail_at_config_key(root, {"rollout", p.field == "n" ? "num_samples_per_prompt" : p.field.c_str()}, p.message);
  if (s.temperature == 0.0)
    fail_at_config_key(root, {"rollout", "temperature"}, "training rollouts need temperature > 0 (a greedy group has no spread to learn from)");

  const sdk::ConfigView& algorithm = c.algorithm;
  s.filter_zero_std = algorithm.get_bool("filter_zero_std_groups", s.filter_zero_std);
  s.active_sampling = algorithm.get_bool("active_sampling", s.active_sampling);
  s.active_sampling_max_batches =
      at_least("algorithm", "active_sampling_max_batches", algorithm.get_int("active_sampling_max_batches", s.active_sampling_max_batches), 1);
  if (s.active_sampling && !s.filter_zero_std)
    fail_at_config_key(root, {"algorithm", "active_sampling"}, "active sampling refills zero-std groups; it needs algorithm.filter_zero_std_groups: true");
}

// The policy update's train.* keys with the algorithm settings, the optimizer and the reference model.
void read_update(const sdk::ConfigValue& root, const Sections& c, TrainerSettings& s) {
  auto at_least = [&](const char* section, const char* key, std::int64_t v, std::int64_t min) {
    return int_at_least(root, section, key, v, min);
  };
  const sdk::ConfigView& train = c.train;
  s.algorithm = algorithm_settings(root);
  const AlgorithmSettings& algo = s.algorithm;
  UpdateOptions& u = s.update;
  u.num_epochs = at_least("train", "num_epochs", train.get_int("num_epochs", u.num_epochs), 1);
  u.num_mini_batches = at_least("train", "num_mini_batches", train.get_int("num_mini_batches", u.num_mini_batches), 1);
  if (u.num_mini_batches > s.num_prompts)
    fail_at_config_key(root, {"train", "num_mini_batches"}, "mini-batches hold whole groups: at most rollout.num_unique_prompts = " +
                                                       std::to_string(s.num_prompts) + ", got " + std::to_string(u.num_mini_batches));
  u.rows_per_micro_batch =
      at_least("train", "per_device_train_batch_size", train.get_int("per_device_train_batch_size", u.rows_per_micro_batch), 1);
  u.pack_length = at_least("train", "pack_length", train.get_int("pack_length", u.pack_length), 1);
  if (u.pack_length < s.max_prompt_tokens + s.max_new_tokens)
    fail_at_config_key(root, {"train", "pack_length"},
             std::to_string(u.pack_length) + " cannot hold one sequence of rollout.max_prompt_tokens + rollout.max_new_tokens = " +
                 std::to_string(s.max_prompt_tokens) + " + " + std::to_string(s.max_new_tokens) + " = " +
                 std::to_string(s.max_prompt_tokens + s.max_new_tokens) + " tokens");
  u.temperature = s.temperature;
  u.logprob_chunk_tokens = at_least("train", "logprob_chunk_tokens", train.get_int("logprob_chunk_tokens", u.logprob_chunk_tokens), 1);
  const std::string old = train.get_choice("old_logprobs", old_logprobs_name(u.old_logprobs), {"auto", "recompute", "rollout"});
  u.old_logprobs = old == "recompute" ? OldLogprobSource::kRecompute
                   : old == "rollout" ? OldLogprobSource::kRollout
                                      : OldLogprobSource::kAuto;
  u.aggregation = algo.loss_aggregation;
  u.max_response_len = s.max_new_tokens;
  u.kl = algo.kl;
  u.mismatch = algo.mismatch;
  u.precision = training_precision(root);
  const sdk::ConfigValue* engine_dtype = find_config_node(root, {"rollout", "backend", "dtype"});
  s.bf16_weight_snapshots = u.precision == Precision::kBf16Mixed && engine_dtype && engine_dtype->is_scalar() &&
                            engine_dtype->scalar() == "bfloat16";
  s.optimizer = optimizer_settings(root);
  u.max_grad_norm = s.optimizer.max_grad_norm;
  s.ref_update_freq = at_least("train", "ref_update_freq", train.get_int("ref_update_freq", s.ref_update_freq), 0);
  s.ref_update_alpha = train.get_double("ref_update_alpha", s.ref_update_alpha);
  if (!(s.ref_update_alpha > 0.0 && s.ref_update_alpha <= 1.0))
    fail_at_config_key(root, {"train", "ref_update_alpha"}, "expected a number in (0, 1]");
  s.max_nonfinite_steps = at_least("train", "max_nonfinite_steps", train.get_int("max_nonfinite_steps", s.max_nonfinite_steps), 1);
  s.gradient_checkpointing = train.get_bool("gradient_checkpointing", s.gradient_checkpointing);
  u.router_aux_loss_coef = train.get_double("router_aux_loss_coef", u.router_aux_loss_coef);
  if (!(std::isfinite(u.router_aux_loss_coef) && u.router_aux_loss_coef >= 0))
    fail_at_config_key(root, {"train", "router_aux_loss_coef"}, "expected a finite number >= 0");
  if (u.router_aux_loss_coef > 0 && s.gradient_checkpointing)
    fail_at_config_key(root, {"train", "router_aux_loss_coef"},
                       "the load-balancing loss needs the routers' gradients through the whole model, which activation "
                       "checkpointing (train.gradient_checkpointing) does not keep for it; turn one of them off");
}

// eval.*, checkpoint.* and the chat template.
void read_eval_and_checkpoint(const sdk::ConfigValue& root, const Sections& c, TrainerSettings& s) {
  auto at_least = [&](const char* section, const char* key, std::int64_t v, std::int64_t min) {
    return int_at_least(root, section, key, v, min);
  };
  const sdk::ConfigView& eval = c.eval;
  s.eval_every = at_least("eval", "every", eval.get_int("every", s.eval_every), 0);
  s.eval_at_start = eval.get_bool("at_start", s.eval_at_start);
  s.eval_num_samples = at_least("eval", "num_samples", eval.get_int("num_samples", s.eval_num_samples), 1);
  s.eval_pass_k = at_least("eval", "pass_k", eval.get_int("pass_k", s.eval_pass_k), 1);
  if (s.eval_pass_k > s.eval_num_samples)
    fail_at_config_key(root, {"eval", "pass_k"}, "pass@" + std::to_string(s.eval_pass_k) + " needs eval.num_samples >= " +
                                           std::to_string(s.eval_pass_k) + ", got " + std::to_string(s.eval_num_samples));
  s.eval_temperature = eval.get_double("temperature", s.eval_temperature);
  if (!std::isfinite(s.eval_temperature) || s.eval_temperature < 0)
    fail_at_config_key(root, {"eval", "temperature"}, "expected a finite number >= 0 (0 = greedy)");
  s.eval_max_prompts = at_least("eval", "max_prompts", eval.get_int("max_prompts", s.eval_max_prompts), 0);

  s.save_freq = at_least("checkpoint", "save_freq", c.checkpoint.get_int("save_freq", s.save_freq), 0);
  s.keep_last = at_least("checkpoint", "keep_last", c.checkpoint.get_int("keep_last", s.keep_last), 0);
  s.chat_template = c.tokenizer.get_string("chat_template", s.chat_template);
  if (const sdk::ConfigValue* kwargs = find_config_node(root, {"tokenizer", "chat_template_kwargs"}))
    s.chat_template_kwargs = config_to_json_text(*kwargs);
}

}  // namespace

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

TrainerSettings trainer_settings(const sdk::ConfigValue& root) {
  TrainerSettings s;
  const Sections sections(root);
  read_run_and_rollout(root, sections, s);
  read_update(root, sections, s);
  read_eval_and_checkpoint(root, sections, s);
  s.sharding = *dist::parse_sharding(dist::dist_options(root).sharding);  // dist_options checked the name
  return s;
}

TrainingJobSettings training_job_settings(const sdk::ConfigValue& root) {
  TrainingJobSettings job;
  job.trainer = trainer_settings(root);
  job.data = data_options(root);
  job.rewards = reward_options(root);
  job.reward_model = reward_model_settings(root);
  return job;
}

}  // namespace grpo::core
