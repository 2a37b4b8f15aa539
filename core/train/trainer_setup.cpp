#include "core/train/trainer_setup.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/algo/kl_penalty.h"
#include "core/config/config_access.h"
#include "core/config/yaml_loader.h"
#include "core/dist/process_group.h"
#include "core/model/checkpoint.h"
#include "core/train/evaluation.h"
#include "core/train/run_dir.h"
#include "core/train/verifier_pool.h"

namespace grpo::core {

namespace {

// A part training cannot start without: an error, or (--validate-fragment) a line in `missing`.
void require(bool present, const sdk::ConfigValue& config, std::initializer_list<const char*> key, const std::string& message,
             std::vector<std::string>* missing) {
  if (present) return;
  try {
    fail_at_config_key(config, key, message);
  } catch (const sdk::ConfigError& e) {
    if (!missing) throw;
    missing->push_back(e.what());
  }
}

}  // namespace

TrainingComponents training_components(const sdk::ConfigValue& config, const RuntimeComponents& components,
                                       bool has_model, bool has_tokenizer, const TrainingJobSettings& job,
                                       int world_size, std::vector<std::string>* missing) {
  require(has_model, config, {"model", "path"}, "training needs a policy model (set model.path)", missing);
  require(has_tokenizer, config, {"tokenizer", "path"}, "training needs a tokenizer", missing);
  TrainingComponents out;
  out.backend = components.rollout_backend.get();
  out.advantage = components.advantage.get();
  out.policy_loss = components.policy_loss.get();
  out.kl_estimator = components.kl_estimator.get();
  require(out.backend, config, {"rollout", "backend"}, "training needs a rollout backend (e.g. native)", missing);
  require(out.advantage, config, {"algorithm", "advantage"},
          "training needs an advantage estimator (e.g. grpo; or --config configs/algorithms/grpo.yaml)", missing);
  require(out.policy_loss, config, {"algorithm", "policy_loss"}, "training needs a policy loss (e.g. ppo_clip)", missing);
  require(!components.verifiers.empty(), config, {"verifiers"}, "training needs at least one verifier", missing);
  require(!job.data.train.empty(), config, {"data", "train"}, "training needs data: add a JSONL file to data.train", missing);
  const std::int64_t num_prompts = job.trainer.num_prompts;
  if (num_prompts < world_size)
    fail_at_config_key(config, {"rollout", "num_unique_prompts"},
                       "groups are never split across ranks: " + std::to_string(world_size) + " ranks need at least " +
                           std::to_string(world_size) + " prompts per step, got " + std::to_string(num_prompts));
  return out;
}

TrainingPrompts load_training_prompts(const TrainingJobSettings& job, const sdk::ConfigValue& config,
                                      const RuntimeComponents& components, const Tokenizer& tokenizer) {
  const TrainerSettings& s = job.trainer;
  const DataOptions& data = job.data;
  TrainingPrompts out;
  DataLoadReport train_report;
  const nlohmann::ordered_json schemas = tool_schemas(components.tools);
  out.train = tokenize_prompts(load_mixture(data.train, data, s.seed, &train_report), tokenizer, s, "training", schemas);
  if (out.train.examples.empty())
    fail_at_config_key(config, {"data", "train"}, "no training rows left after filtering (prompts longer than rollout.max_prompt_tokens = " +
                                            std::to_string(s.max_prompt_tokens) + " are dropped)");
  out.eval = load_eval_prompts(config, data, tokenizer, s, schemas);
  try {
    check_verifier_labels(out.train.examples, components.verifiers, job.rewards);
    check_verifier_labels(out.eval.examples, components.verifiers, job.rewards);
  } catch (const std::invalid_argument& e) {
    fail_at_config_key(config, {"verifiers"}, e.what());
  }
  spdlog::info("data: {} training rows ({} bad rows skipped), {} eval rows", out.train.examples.size(),
               train_report.bad_rows_skipped, out.eval.examples.size());
  return out;
}

CheckedTrainingJob check_training_job(const sdk::ConfigValue& config, PluginRegistry& registry, int world_size,
                                      bool fragment) {
  CheckedTrainingJob job;
  check_run_output_dir(config);  // first, as a run checks it first (before it creates it)
  job.settings = training_job_settings(config);  // every setting the job reads, once
  job.policy = policy_spec(config);
  job.files = check_policy_files(job.policy);  // errors name model.path, before the backend loads it
  if (job.settings.reward_model.enabled()) {
    const sdk::ConfigValue* reward_model_node = find_config_node(config, {"reward_model", "path"});
    check_reward_model_config(job.settings.reward_model, reward_model_node);
    check_reward_model_weights_finite(job.settings.reward_model, reward_model_node);
  }
  if (job.policy.lora.enabled() && job.settings.trainer.ref_update_freq > 0)
    fail_at_config_key(config, {"train", "ref_update_freq"},
                       "Polyak updates of the reference are not available with LoRA (model.lora): the reference is the "
                       "base model, i.e. the policy with its adapters switched off; set train.ref_update_freq: 0");
  load_configured_plugins(registry, config);
  job.components = create_components(registry, config);
  job.parts = training_components(config, job.components, !job.policy.model_path.empty(), job.files.tokenizer.has_value(), job.settings,
                      world_size, fragment ? &job.missing : nullptr);
  // Always so for training (training_components threw otherwise); a fragment may lack them.
  if (job.files.tokenizer && !job.settings.data.train.empty() && !job.components.verifiers.empty())
    job.prompts = load_training_prompts(job.settings, config, job.components, *job.files.tokenizer);
  return job;
}

CausalLM load_reference_model(const TrainerSettings& s, const PolicySpec& policy_spec) {
  // bf16-mixed: the frozen reference only computes (in bf16), so it is stored in bf16, half the
  // memory; with Polyak updates (train.ref_update_freq) it keeps float32 weights, which small
  // alpha * (policy - reference) steps would otherwise not move.
  torch::Dtype dtype = dtype_from_name(policy_spec.dtype, "model.dtype");
  if (s.update.precision == Precision::kBf16Mixed && s.ref_update_freq == 0) dtype = torch::kBFloat16;
  CausalLM reference{nullptr};
  if (needs_reference_model(s.update.kl)) {
    reference = load_model(policy_spec.model_path, dtype, policy_spec.device).model;
    reference->set_attention_backend(policy_spec.attention);
    reference->eval();
    for (auto& p : reference->parameters()) p.set_requires_grad(false);
    spdlog::info("reference model loaded (algorithm.kl_coef = {}, {})", s.update.kl.kl_coef,
                 dtype == torch::kBFloat16 ? "bfloat16" : "float32");
  }
  return reference;
}

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

}  // namespace grpo::core
