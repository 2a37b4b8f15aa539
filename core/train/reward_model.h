// A learned reward model next to the verifiers: a Hugging Face *ForSequenceClassification
// checkpoint with one label (the score head read at the last real token; CausalLMImpl::
// sequence_scores) scores every completion of a step. Each (prompt, completion) pair is
// rendered with the reward model's own chat template (the prompt's messages plus the completion
// as the assistant's turn; a plain-text prompt becomes one user message), tokenized with its own
// tokenizer, and scored in batches on the trainer's device and precision. The score, optionally
// standardized over the step's samples, times `reward_model.weight` is each sample's
// Sample::model_reward, which shape_rewards adds to the verifiers' reward. As TRL's
// GRPOTrainer and OpenRLHF combine reward models with rule-based rewards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics/metrics_log.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/train/rollout_batch.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

enum class RewardNormalization { kNone, kBatch };

struct RewardModelSettings {
  std::string path;                  // reward_model.path; "" = no reward model
  double weight = 1.0;               // reward_model.weight
  RewardNormalization normalize = RewardNormalization::kNone;  // reward_model.normalize
  std::int64_t batch_size = 8;       // reward_model.batch_size
  std::int64_t max_tokens = 0;       // reward_model.max_tokens; 0 = the model's max_position_embeddings
  std::string chat_template = "auto";  // reward_model.chat_template

  bool enabled() const { return !path.empty(); }
};

// reward_model.* of a validated configuration. Throws sdk::ConfigError naming the key for a
// non-finite weight or a batch size < 1.
RewardModelSettings reward_model_settings(const sdk::ConfigValue& root);

// Reads settings.path/config.json and checks that it is a one-label *ForSequenceClassification
// of a supported family: the check grpo-run makes before any weights load. Throws
// sdk::ConfigError at reward_model.path (`node`, may be null) naming the file and the problem.
ModelConfig check_reward_model_config(const RewardModelSettings& settings, const sdk::ConfigValue* node);

// A NaN or an infinity in reward_model.path's weights, found before anything loads (the raw scan
// model.path gets: check_checkpoint_finite); a ConfigError naming reward_model.path, the file and
// the tensor. --validate and training run it (check_training_job).
void check_reward_model_weights_finite(const RewardModelSettings& settings, const sdk::ConfigValue* node);

class RewardModel {
 public:
  // Loads the checkpoint at settings.path (config.json must name a *ForSequenceClassification
  // with one label; tokenizer.json and a chat template beside it, or reward_model.chat_template)
  // in `dtype` on `device`; scoring runs under `precision` (bf16-mixed: bfloat16 matmuls).
  // Throws sdk::ConfigError at reward_model.path or reward_model.chat_template of `root` (the
  // configuration, for error locations; may be null) naming the file and the problem.
  RewardModel(const RewardModelSettings& settings, torch::Dtype dtype, torch::Device device, Precision precision,
              const sdk::ConfigValue* root = nullptr);

  // The raw score of each (messages, completion) pair, in order.
  std::vector<double> score(const std::vector<std::vector<ChatMessage>>& prompts, const std::vector<std::string>& completions);
  // The chat text a pair is scored as (for the sample log and for tests).
  std::string render(const std::vector<ChatMessage>& prompt, const std::string& completion) const;

  // Scores every sample of `groups` and sets Sample::model_reward = weight * (normalized) score.
  // Returns reward/model/score (mean raw score), reward/model/score_std, reward/model/score/min,
  // reward/model/score/max, reward/model/reward (mean model_reward) and
  // reward/model/truncated_rate (share of pairs cut to max_tokens). normalize: batch standardizes
  // over the samples of this call (one generation batch of this rank).
  MetricList score_groups(std::vector<Group>& groups);

  const RewardModelSettings& settings() const { return settings_; }
  const ModelConfig& config() const { return model_->config(); }

 private:
  RewardModelSettings settings_;
  CausalLM model_{nullptr};
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;
  torch::Device device_;
  Precision precision_;
  std::int64_t max_tokens_;
  std::int64_t pad_id_;
  std::int64_t truncated_ = 0;  // pairs cut in the last score()
};

// The messages a group's prompt is scored with: the example's chat, or its plain text as one
// user message.
std::vector<ChatMessage> reward_model_prompt(const Example& example);

}  // namespace grpo::core
