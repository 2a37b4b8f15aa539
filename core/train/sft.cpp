#include "core/train/sft.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/data/dataset.h"
#include "core/metrics/run_metrics.h"
#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/config/config_access.h"
#include "core/train/packing.h"
#include "core/train/run_dir.h"
#include "core/train/train_state.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tokenized supervised rows: the rendered prompt, then the completion and the EOS token.
struct SftSet {
  std::vector<std::vector<std::int64_t>> prompts, completions;
  std::int64_t completion_tokens = 0;
};

SftSet tokenize_rows(const std::vector<Example>& rows, const Tokenizer& tokenizer, const SftSettings& s,
                     std::int64_t eos, const char* split) {
  SftSet out;
  std::size_t too_long = 0;
  ChatTemplate chat_template = ChatTemplate::resolve(s.chat_template, tokenizer);
  chat_template.set_variables(nlohmann::ordered_json::parse(s.chat_template_kwargs));
  for (const auto& ex : rows) {
    // prompt + completion + EOS must fit pack_length; a text far over it is not tokenized (encode_within).
    const auto room = static_cast<std::size_t>(s.pack_length - 1);
    const std::optional<std::vector<int>> p = encode_within(tokenizer, render_prompt(ex, chat_template), room);
    if (p && p->empty()) throw DataError(ex.where() + ": the prompt renders to no tokens");
    const std::optional<std::vector<int>> c = p ? encode_within(tokenizer, ex.completion, room - p->size()) : std::nullopt;
    if (!c) {
      ++too_long;
      continue;
    }
    out.prompts.emplace_back(p->begin(), p->end());
    out.completions.emplace_back(c->begin(), c->end());
    out.completions.back().push_back(eos);
    out.completion_tokens += static_cast<std::int64_t>(c->size() + 1);
  }
  if (too_long)
    spdlog::warn("{} data: {} row(s) dropped: prompt + completion longer than train.pack_length = {}", split, too_long,
                 s.pack_length);
  return out;
}

// Sum over the given rows of -log p(completion token) and the number of tokens, as packed
// micro-batches; with `backward`, each micro-batch's sum / `denominator` is backpropagated
// (one global denominator: the gradient is that of the token mean over the whole batch).
struct NllSum {
  double nll = 0.0;
  std::int64_t tokens = 0;
};

NllSum completion_nll(CausalLM& model, const SftSet& set, const std::vector<std::size_t>& rows, const SftSettings& s,
                      bool backward, double denominator) {
  std::vector<std::int64_t> lengths;
  for (std::size_t r : rows) lengths.push_back(static_cast<std::int64_t>(set.prompts[r].size() + set.completions[r].size()));
  const PackingPlan plan = plan_packing(lengths, s.pack_length);
  LogProbOptions lp_options;
  lp_options.chunk_tokens = s.logprob_chunk_tokens;
  // bf16-mixed: bf16 matmuls over float32 masters (core/model/precision.h).
  const ComputePrecisionScope precision(s.precision, model->lm_head_weight().device());
  NllSum out;
  for (const auto& micro : micro_batches(plan, s.rows_per_micro_batch)) {
    std::vector<SequenceTokens> seqs;
    std::int64_t width = 1, tokens = 0;
    for (std::size_t i : micro) {
      const std::size_t r = rows[i];
      seqs.push_back({&set.prompts[r], &set.completions[r]});
      width = std::max<std::int64_t>(width, static_cast<std::int64_t>(set.completions[r].size()));
      tokens += static_cast<std::int64_t>(set.completions[r].size());
    }
    const at::Tensor lp = packed_response_logprobs(model, seqs, width, lp_options).logprobs;  // 0 in the padding
    const at::Tensor nll = -lp.sum();
    if (backward) (nll / denominator).backward();
    out.nll += nll.detach().item<double>();
    out.tokens += tokens;
  }
  return out;
}

// Held-out completion loss (mean NLL per token) over every eval row.
double eval_loss(CausalLM& model, const SftSet& eval, const SftSettings& s) {
  torch::NoGradGuard no_grad;
  std::vector<std::size_t> rows(eval.prompts.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  const NllSum sum = completion_nll(model, eval, rows, s, false, 1.0);
  return sum.tokens > 0 ? sum.nll / static_cast<double>(sum.tokens) : 0.0;
}

// config.json's initializer_range (transformers' default 0.02).
double initializer_range(const ModelConfig& config) {
  const auto j = nlohmann::json::parse(config.source_json, nullptr, false);
  if (j.is_object()) {
    auto it = j.find("initializer_range");
    if (it != j.end() && it->is_number() && it->get<double>() > 0) return it->get<double>();
  }
  return 0.02;
}

}  // namespace

SftSettings sft_settings(const sdk::ConfigValue& root) {
  SftSettings s;
  const sdk::ConfigView run(find_config_node(root, {"run"}), "run");
  const sdk::ConfigView sft(find_config_node(root, {"sft"}), "sft");
  const sdk::ConfigView train(find_config_node(root, {"train"}), "train");
  const sdk::ConfigView checkpoint(find_config_node(root, {"checkpoint"}), "checkpoint");
  const sdk::ConfigView tokenizer(find_config_node(root, {"tokenizer"}), "tokenizer");
  auto at_least = [&](const char* section, const char* key, std::int64_t v, std::int64_t min) {
    return int_at_least(root, section, key, v, min);
  };
  s.run_dir = run.get_string("output_dir", s.run_dir);
  s.seed = static_cast<std::uint64_t>(run.get_int("seed", static_cast<std::int64_t>(s.seed)));
  s.resume_from = at_least("run", "resume_from", run.get_int("resume_from", s.resume_from), 0);
  s.resume = run.get_bool("resume", s.resume) || s.resume_from > 0;
  s.steps = at_least("sft", "steps", sft.get_int("steps", s.steps), 1);
  s.batch_size = at_least("sft", "batch_size", sft.get_int("batch_size", s.batch_size), 1);
  s.random_init = sft.get_choice("init", s.random_init ? "random" : "pretrained", {"pretrained", "random"}) == "random";
  s.eval_every = at_least("sft", "eval_every", sft.get_int("eval_every", s.eval_every), 0);
  s.pack_length = at_least("train", "pack_length", train.get_int("pack_length", s.pack_length), 2);
  s.rows_per_micro_batch =
      at_least("train", "per_device_train_batch_size", train.get_int("per_device_train_batch_size", s.rows_per_micro_batch), 1);
  s.logprob_chunk_tokens = at_least("train", "logprob_chunk_tokens", train.get_int("logprob_chunk_tokens", s.logprob_chunk_tokens), 1);
  s.precision = training_precision(root);
  s.gradient_checkpointing = train.get_bool("gradient_checkpointing", s.gradient_checkpointing);
  s.save_freq = at_least("checkpoint", "save_freq", checkpoint.get_int("save_freq", s.save_freq), 0);
  s.keep_last = at_least("checkpoint", "keep_last", checkpoint.get_int("keep_last", s.keep_last), 0);
  s.chat_template = tokenizer.get_string("chat_template", s.chat_template);
  if (const sdk::ConfigValue* kwargs = find_config_node(root, {"tokenizer", "chat_template_kwargs"}))
    s.chat_template_kwargs = config_to_json_text(*kwargs);
  s.optimizer = optimizer_settings(root);
  s.data = data_options(root);
  s.data.require_ground_truth = false;
  s.data.require_completion = true;
  return s;
}

namespace {

struct SftData {
  SftSet train, eval;
};

// The checks of the policy, then data.train (which must leave a row) and data.eval, tokenized.
SftData load_sft_data(const SftSettings& s, const sdk::ConfigValue& config, const LoadedPolicy& policy) {
  if (!policy.model.model) fail_at_config_key(config, {"model", "path"}, "grpo-sft needs a model (set model.path)");
  if (!policy.tokenizer) fail_at_config_key(config, {"tokenizer", "path"}, "grpo-sft needs a tokenizer");
  const auto& eos_ids = policy.model.config.eos_token_ids;
  if (eos_ids.empty())
    fail_at_config_key(config, {"model", "path"}, "the model's config.json has no eos_token_id: completions must end with one");

  const DataOptions& data = s.data;
  if (data.train.empty()) fail_at_config_key(config, {"data", "train"}, "grpo-sft needs data: add a JSONL file to data.train");
  SftData out;
  DataLoadReport report;
  out.train = tokenize_rows(load_mixture(data.train, data, s.seed, &report), *policy.tokenizer, s, eos_ids.front(), "training");
  if (out.train.prompts.empty())
    fail_at_config_key(config, {"data", "train"}, "no training rows left: every prompt + completion is longer than train.pack_length = " +
                                            std::to_string(s.pack_length));
  if (!data.eval.empty())
    out.eval = tokenize_rows(load_mixture(data.eval, data, s.seed), *policy.tokenizer, s, eos_ids.front(), "eval");
  spdlog::info("sft data: {} training rows ({} completion tokens, {} bad rows skipped), {} eval rows", out.train.prompts.size(),
               out.train.completion_tokens, report.bad_rows_skipped, out.eval.prompts.size());
  return out;
}

// One supervised step on `rows`: the token-mean NLL's gradient, clipping, the optimizer step
// (skipped when non-finite; *skipped counts those). Returns the step's metrics up to the epoch;
// time/step counts from t0.
MetricList sft_step(CausalLM& model, torch::optim::Optimizer& optimizer, const SftSettings& s, const SftSet& train,
                    const std::vector<std::size_t>& rows, std::int64_t step, Clock::time_point t0, TrainerState& state,
                    std::int64_t* skipped) {
  auto lr_at = [&](std::int64_t optimizer_step) {
    return s.optimizer.learning_rate * lr_factor(s.optimizer, optimizer_step, s.steps);
  };
  std::int64_t tokens = 0, all_tokens = 0;
  for (std::size_t r : rows) {
    tokens += static_cast<std::int64_t>(train.completions[r].size());
    all_tokens += static_cast<std::int64_t>(train.prompts[r].size() + train.completions[r].size());
  }
  set_learning_rate(optimizer, lr_at(state.optimizer_steps));
  const NllSum sum = completion_nll(model, train, rows, s, true, static_cast<double>(tokens));
  const double loss = sum.nll / static_cast<double>(tokens);
  const double norm = clip_grad_norm(optimizer, s.optimizer.max_grad_norm);
  const bool finite = std::isfinite(loss) && std::isfinite(norm);
  if (finite) {
    optimizer.step();
    ++state.optimizer_steps;
  } else {
    ++*skipped;
    spdlog::warn("sft step {}: non-finite loss or gradient; optimizer step skipped", step);
  }
  optimizer.zero_grad();
  const double seconds = seconds_since(t0);
  return {{"train/loss", loss},
          {"optimizer/grad_norm", norm},
          {"lr", lr_at(state.optimizer_steps - (finite ? 1 : 0))},
          {"train/completion_tokens", static_cast<double>(tokens)},
          {"train/tokens_per_second", seconds > 0 ? static_cast<double>(all_tokens) / seconds : 0.0},
          {"train/skipped_nonfinite", static_cast<double>(*skipped)},
          {"time/step", seconds}};
}

}  // namespace

void run_sft(const SftSettings& s, const sdk::ConfigValue& config, LoadedPolicy& policy, const PolicySpec& policy_spec) {
  const SftData data = load_sft_data(s, config, policy);
  const SftSet& train = data.train;
  const SftSet& eval = data.eval;

  CausalLM model = policy.model.model;
  if (s.random_init) {
    const double std = initializer_range(policy.model.config);
    model->init_weights(std, s.seed);
    spdlog::info("sft.init: random weights (normal, std {} = config.json initializer_range), seed {}", std, s.seed);
  }
  // LoRA: adapters over the frozen base. Random base weights exist nowhere else, so they are
  // written once to RUN_DIR/base_model, which the adapters' base_model_name_or_path names.
  std::string lora_base = policy_spec.model_path;
  if (policy_spec.lora.enabled()) {
    if (s.random_init) {
      lora_base = (std::filesystem::path(s.run_dir) / "base_model").string();
      if (!std::filesystem::exists(std::filesystem::path(lora_base) / "config.json")) {
        SaveOptions base_options;
        base_options.tokenizer = &*policy.tokenizer;
        base_options.chat_templates = policy.chat_template->sources();
        base_options.generation_config_json = policy.model.generation_config_json;
        save_model(lora_base, model, base_options);
      }
      spdlog::warn("LoRA on random weights (sft.init: random): the frozen random base is {}; the adapters' checkpoints name it",
                   lora_base);
    }
    if (!policy.lora) attach_lora(policy_spec, policy);
  }
  model->train();
  model->set_gradient_checkpointing(s.gradient_checkpointing);
  if (s.gradient_checkpointing) spdlog::info("activation checkpointing: on (each decoder layer is recomputed in backward)");
  auto optimizer = policy.lora ? make_adamw(policy.lora->parameters(), s.optimizer) : make_adamw(*model, s.optimizer);

  TrainerState state;
  state.seed = s.seed;
  CheckpointContents contents;
  contents.policy = &model;
  contents.optimizer = optimizer.get();
  contents.tokenizer = &*policy.tokenizer;
  contents.chat_templates = policy.chat_template->sources();  // resolved once, by load_policy
  contents.generation_config_json = policy.model.generation_config_json;
  contents.lora = policy.lora.get();
  contents.lora_base_model = lora_base;
  const bool resumed = s.resume && resume_from_checkpoint(config, s.run_dir, s.seed, s.resume_from, contents, state);
  if (resumed && state.step >= s.steps) {
    spdlog::info("resume: {} is at step {} of {}; nothing left to train", checkpoint_path(s.run_dir, state.step),
                 state.step, s.steps);
    return;
  }
  write_effective_config(s.run_dir, config);  // every check passed, the resume's too
  RunMetrics run_metrics(s.run_dir, resumed ? state.step : -1, s.steps, "sft step", sft_plot_panels());
  PromptSampler sampler(train.prompts.size(), s.seed, s.data.shuffle);
  sampler.set_position(state.data);
  auto save = [&](const char* why) {
    const auto t0 = Clock::now();
    save_checkpoint(s.run_dir, state, contents, s.keep_last);
    spdlog::info("checkpoint {} ({}, {:.2f} s)", checkpoint_path(s.run_dir, state.step), why, seconds_since(t0));
  };

  if (!eval.prompts.empty() && state.step == 0) run_metrics.write(0, {{"eval/loss", eval_loss(model, eval, s)}});
  spdlog::info("sft: steps {}..{}, {} sequences per step, lr {}", state.step + 1, s.steps, s.batch_size,
               s.optimizer.learning_rate);
  std::int64_t skipped = 0;
  while (state.step < s.steps) {
    const auto t0 = Clock::now();
    const std::int64_t step = state.step + 1;
    const std::vector<std::size_t> rows = sampler.next(static_cast<std::size_t>(s.batch_size));
    MetricList m = sft_step(model, *optimizer, s, train, rows, step, t0, state, &skipped);
    state.step = step;
    state.data = sampler.position();
    m.emplace_back("epoch", static_cast<double>(state.data.epoch) +
                                static_cast<double>(state.data.offset) / static_cast<double>(train.prompts.size()));
    const bool last = step == s.steps;
    if (!eval.prompts.empty() && (last || (s.eval_every > 0 && step % s.eval_every == 0))) {
      const double el = eval_loss(model, eval, s);
      m.emplace_back("eval/loss", el);
      spdlog::info("sft eval at step {}: held-out completion loss {:.4f}", step, el);
    }
    run_metrics.write(step, m);
    // Every step is in metrics.jsonl and on the progress line; the log gets every 25th.
    const double loss = metric_value(m, "train/loss");
    spdlog::log(step % 25 == 0 || last ? spdlog::level::info : spdlog::level::debug,
                "sft step {}/{} | loss {:.4f} | grad norm {:.3f} | {:.0f} tok/s", step, s.steps, loss,
                metric_value(m, "optimizer/grad_norm"), metric_value(m, "train/tokens_per_second"));
    char loss_text[32];
    std::snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    run_metrics.show_progress(step, {{"loss", loss_text}, {"", format_rate(metric_value(m, "train/tokens_per_second")) + " tok/s"}});
    if (last || (s.save_freq > 0 && step % s.save_freq == 0)) save(last ? "final" : "save_freq");
  }
  run_metrics.finish();
  spdlog::info("sft done: {} steps; the model is {}", s.steps, checkpoint_path(s.run_dir, state.step));
}

}  // namespace grpo::core
