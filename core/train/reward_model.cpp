#include "core/train/reward_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/config/config_access.h"
#include "core/model/checkpoint.h"
#include "core/model/families/family.h"
#include "core/model/safetensors_torch.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

RewardModelSettings reward_model_settings(const sdk::ConfigValue& root) {
  RewardModelSettings s;
  const sdk::ConfigView rm(find_config_node(root, {"reward_model"}), "reward_model");
  auto fail = [&](const char* key, const std::string& message) {
    fail_at_key(find_config_node(root, {"reward_model", key}), std::string("reward_model.") + key, message);
  };
  s.path = rm.get_string("path", s.path);
  s.weight = rm.get_double("weight", s.weight);
  if (!std::isfinite(s.weight)) fail("weight", "expected a finite number");
  s.normalize = rm.get_choice("normalize", "none", {"none", "batch"}) == "batch" ? RewardNormalization::kBatch
                                                                                   : RewardNormalization::kNone;
  s.batch_size = rm.get_int("batch_size", s.batch_size);
  if (s.batch_size < 1) fail("batch_size", "expected an integer >= 1, got " + std::to_string(s.batch_size));
  s.max_tokens = rm.get_int("max_tokens", s.max_tokens);
  if (s.max_tokens < 0) fail("max_tokens", "expected an integer >= 0 (0 = the model's max_position_embeddings)");
  s.chat_template = rm.get_string("chat_template", s.chat_template);
  return s;
}

std::vector<ChatMessage> reward_model_prompt(const Example& example) {
  if (!example.messages.empty()) return example.messages;
  return {ChatMessage{"user", example.text, ""}};
}

ModelConfig check_reward_model_config(const RewardModelSettings& settings, const sdk::ConfigValue* node) {
  auto fail = [&](const std::string& message) { fail_at_key(node, "reward_model.path", message); };
  ModelConfig config;
  try {
    config = load_model_config(settings.path + "/config.json");
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (config.head != ModelHead::kSequenceClassification)
    fail(settings.path + "/config.json names " + architecture_name(config.architecture) +
         "; a reward model is a *ForSequenceClassification checkpoint (here: " +
         family_of(config.architecture).sequence_classification + ")");
  if (config.num_labels != 1)
    fail(settings.path + "/config.json: num_labels is " + std::to_string(config.num_labels) +
         " (id2label); a reward model has one label, its score");
  return config;
}

void check_reward_model_weights_finite(const RewardModelSettings& settings, const sdk::ConfigValue* node) {
  try {
    check_checkpoint_finite(settings.path);
  } catch (const std::exception& e) {
    fail_at_key(node, "reward_model.path", e.what());
  }
}

RewardModel::RewardModel(const RewardModelSettings& settings, torch::Dtype dtype, torch::Device device,
                         Precision precision, const sdk::ConfigValue* root)
    : settings_(settings), device_(device), precision_(precision) {
  const sdk::ConfigValue* node = root ? find_config_node(*root, {"reward_model", "path"}) : nullptr;
  const sdk::ConfigValue* template_node = root ? find_config_node(*root, {"reward_model", "chat_template"}) : nullptr;
  const ModelConfig config = check_reward_model_config(settings, node);
  try {
    model_ = load_model(settings.path, dtype, device).model;
    tokenizer_.emplace(Tokenizer::load(settings.path));
  } catch (const std::exception& e) {
    fail_at_key(node, "reward_model.path", e.what());
  }
  model_->eval();
  for (auto& p : model_->parameters()) p.set_requires_grad(false);
  try {
    template_.emplace(ChatTemplate::resolve(settings.chat_template, *tokenizer_));
  } catch (const std::exception& e) {
    fail_at_key(template_node, "reward_model.chat_template", e.what());
  }
  // A reward model scores the text as it was trained to see it: a silent chatml stand-in would
  // give plausible-looking, meaningless scores.
  if (template_->fell_back())
    fail_at_key(template_node, "reward_model.chat_template",
                settings.path + " has no chat template of its own; name the one it was trained with (a built-in "
                "name or a Jinja file)");
  max_tokens_ = settings.max_tokens > 0 ? settings.max_tokens : config.max_position_embeddings;
  pad_id_ = config.pad_token_id ? *config.pad_token_id : 0;
  spdlog::info("reward model: {} ({}, {} layers, chat template {}), weight {}, normalize {}, batches of {}",
               settings.path, family_of(config.architecture).sequence_classification, config.num_hidden_layers, template_->origin(),
               settings.weight, settings.normalize == RewardNormalization::kBatch ? "batch" : "none", settings.batch_size);
}

std::string RewardModel::render(const std::vector<ChatMessage>& prompt, const std::string& completion) const {
  std::vector<ChatMessage> chat = prompt;
  chat.push_back(ChatMessage{"assistant", completion, ""});
  ChatRenderOptions options;
  options.add_generation_prompt = false;
  return template_->render(chat, options);
}

std::vector<double> RewardModel::score(const std::vector<std::vector<ChatMessage>>& prompts,
                                       const std::vector<std::string>& completions) {
  if (prompts.size() != completions.size())
    throw std::invalid_argument("RewardModel::score: " + std::to_string(prompts.size()) + " prompts for " +
                                std::to_string(completions.size()) + " completions");
  std::vector<std::vector<int>> sequences;
  truncated_ = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int> ids = tokenizer_->encode(render(prompts[i], completions[i]));
    if (ids.empty()) ids.push_back(static_cast<int>(pad_id_));  // an empty rendering still gets a (meaningless) score
    if (static_cast<std::int64_t>(ids.size()) > max_tokens_) {
      // Keep the end (the score is read at the last token, and the completion is what is judged)
      // and the first token (BOS, where the template writes one).
      ids.erase(ids.begin() + 1, ids.end() - (max_tokens_ - 1));
      ++truncated_;
    }
    sequences.push_back(std::move(ids));
  }
  std::vector<double> scores(sequences.size(), 0.0);
  torch::NoGradGuard no_grad;
  const ComputePrecisionScope precision(precision_, device_);
  const auto i64 = torch::TensorOptions().dtype(torch::kLong);
  for (std::size_t start = 0; start < sequences.size(); start += static_cast<std::size_t>(settings_.batch_size)) {
    const std::size_t end = std::min(sequences.size(), start + static_cast<std::size_t>(settings_.batch_size));
    std::int64_t width = 0;
    for (std::size_t i = start; i < end; ++i) width = std::max<std::int64_t>(width, static_cast<std::int64_t>(sequences[i].size()));
    const auto rows = static_cast<std::int64_t>(end - start);
    torch::Tensor ids = torch::full({rows, width}, pad_id_, i64);
    torch::Tensor mask = torch::zeros({rows, width}, i64);
    for (std::size_t i = start; i < end; ++i) {
      const auto& seq = sequences[i];
      const auto r = static_cast<std::int64_t>(i - start);
      const auto n = static_cast<std::int64_t>(seq.size());
      ids[r].narrow(0, 0, n).copy_(torch::tensor(std::vector<std::int64_t>(seq.begin(), seq.end()), i64));
      mask[r].narrow(0, 0, n).fill_(1);
    }
    const torch::Tensor out = model_->sequence_scores(ids.to(device_), mask.to(device_)).to(torch::kCPU).to(torch::kFloat64);
    for (std::int64_t r = 0; r < rows; ++r) scores[start + static_cast<std::size_t>(r)] = out[r][0].item<double>();
  }
  return scores;
}

MetricList RewardModel::score_groups(std::vector<Group>& groups) {
  std::vector<std::vector<ChatMessage>> prompts;
  std::vector<std::string> completions;
  for (const Group& g : groups) {
    const std::vector<ChatMessage> prompt = reward_model_prompt(g.example);
    for (const Sample& s : g.samples) {
      prompts.push_back(prompt);
      completions.push_back(s.text);
    }
  }
  if (completions.empty()) return {};
  const std::vector<double> scores = score(prompts, completions);
  const double n = static_cast<double>(scores.size());
  double mean = 0, sq = 0;
  for (double v : scores) mean += v;
  mean /= n;
  for (double v : scores) sq += (v - mean) * (v - mean);
  const double spread = std::sqrt(sq / n);
  double reward_sum = 0;
  std::size_t i = 0;
  for (Group& g : groups)
    for (Sample& s : g.samples) {
      const double raw = scores[i++];
      // Standardized over the samples this rank scored in this call (1e-8 keeps an all-equal
      // batch at 0 instead of dividing by zero).
      const double v = settings_.normalize == RewardNormalization::kBatch ? (raw - mean) / (spread + 1e-8) : raw;
      s.reward_model_score = raw;
      s.model_reward = settings_.weight * v;
      reward_sum += s.model_reward;
    }
  return {{"reward/model/score", mean},
          {"reward/model/score_std", spread},
          {"reward/model/score/min", *std::min_element(scores.begin(), scores.end())},  // (ranks: min, max)
          {"reward/model/score/max", *std::max_element(scores.begin(), scores.end())},
          {"reward/model/reward", reward_sum / n},
          {"reward/model/truncated_rate", static_cast<double>(truncated_) / n}};
}

}  // namespace grpo::core
