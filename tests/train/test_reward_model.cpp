// The learned reward model (core/train/reward_model.h): what it scores (the pair rendered with
// its own chat template, tokenized with its own tokenizer), batching that does not change a
// score, truncation, normalization, a training run that combines it with a verifier, and its
// configuration errors. The score head itself is checked against the independent reference in
// tests/model/test_model_families.cpp (SequenceClassification).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/train/reward_model.h"
#include "grpo/sdk/config_view.h"
#include "tests/support/error_of.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/test_dir.h"
#include "tests/support/file_damage.h"
#include "tests/train/digit_task_runs.h"

using namespace grpo::core;
using grpo::testing::fresh_test_dir;

namespace {

// A random one-label Qwen2ForSequenceClassification over the demo byte-level tokenizer, with the
// built-in chatml template (the policy of the digit task has none: the two must not be mixed up).
std::string make_reward_model(const std::string& dir, std::uint64_t seed) {
  const Tokenizer tokenizer = Tokenizer::from_json(make_byte_level_tokenizer_json());
  const int eos = *tokenizer.token_to_id("<|endoftext|>");
  ModelConfig c = grpo::testing::tiny_byte_model_config(tokenizer.vocab_size(), eos, 64);
  c.head = ModelHead::kSequenceClassification;
  c.num_labels = 1;
  c.pad_token_id = eos;
  CausalLM model(c);
  model->init_weights(0.2, seed);
  SaveOptions options;
  options.tokenizer = &tokenizer;
  options.chat_templates = std::vector<NamedChatTemplate>{{"default", chat_template_jinja("chatml")}};
  save_model(dir, model, options);
  return dir;
}

RewardModelSettings settings_for(const std::string& path) {
  RewardModelSettings s;
  s.path = path;
  s.batch_size = 3;
  return s;
}

std::vector<ChatMessage> user(const std::string& text) { return {ChatMessage{"user", text, ""}}; }

}  // namespace

TEST(RewardModelScoring, RendersWithItsOwnTemplateAndBatchingDoesNotChangeAScore) {
  const std::string dir = make_reward_model(fresh_test_dir("reward-model") + "/rm", 5);
  RewardModel rm(settings_for(dir), torch::kFloat32, torch::kCPU, Precision::kFp32);
  // chatml, as transformers renders a finished conversation (no generation prompt).
  EXPECT_EQ(rm.render(user("482"), "c"), "<|im_start|>user\n482<|im_end|>\n<|im_start|>assistant\nc<|im_end|>\n");

  const std::vector<std::string> completions = {"c", "a much longer answer", "", "d", "ee", "the answer is c"};
  std::vector<std::vector<ChatMessage>> prompts(completions.size(), user("482"));
  const std::vector<double> batched = rm.score(prompts, completions);  // batches of 3, right-padded

  // Each pair alone, through the model: the score at the last token of its own encoding.
  auto model = load_model(dir).model;
  model->eval();
  torch::NoGradGuard no_grad;
  const Tokenizer tokenizer = Tokenizer::load(dir);
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const std::vector<int> ids = tokenizer.encode(rm.render(prompts[i], completions[i]));
    auto x = torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    const double alone = model->sequence_scores(x, torch::ones_like(x))[0][0].item<double>();
    EXPECT_NEAR(batched[i], alone, 1e-5) << completions[i];
  }
  EXPECT_GT(std::abs(batched[0] - batched[1]), 1e-4) << "a random model should tell these apart";
}

TEST(RewardModelScoring, LongPairsKeepTheirEnd) {
  const std::string dir = make_reward_model(fresh_test_dir("reward-model") + "/rm", 6);
  RewardModelSettings s = settings_for(dir);
  s.max_tokens = 12;
  RewardModel rm(s, torch::kFloat32, torch::kCPU, Precision::kFp32);
  const std::string long_answer = "a long completion that does not fit";
  const double cut = rm.score({user("482")}, {long_answer}).at(0);

  auto model = load_model(dir).model;
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int> ids = Tokenizer::load(dir).encode(rm.render(user("482"), long_answer));
  ASSERT_GT(ids.size(), 12u);
  ids.erase(ids.begin() + 1, ids.end() - 11);  // the first token and the last 11
  auto x = torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  EXPECT_NEAR(cut, model->sequence_scores(x, torch::ones_like(x))[0][0].item<double>(), 1e-5);
}

TEST(RewardModelScoring, GroupsGetTheWeightedStandardizedScore) {
  const std::string dir = make_reward_model(fresh_test_dir("reward-model") + "/rm", 7);
  RewardModelSettings s = settings_for(dir);
  s.weight = 0.5;
  s.normalize = RewardNormalization::kBatch;
  RewardModel rm(s, torch::kFloat32, torch::kCPU, Precision::kFp32);
  std::vector<Group> groups(2);
  groups[0].example.text = "482";
  groups[1].example.messages = user("917");
  for (const char* t : {"c", "h", "xyz"}) groups[0].samples.emplace_back().text = t;
  for (const char* t : {"h", "", "hh"}) groups[1].samples.emplace_back().text = t;
  const MetricList metrics = rm.score_groups(groups);
  std::vector<double> raw;
  for (const Group& g : groups)
    for (const Sample& smp : g.samples) raw.push_back(smp.reward_model_score);
  const double mean = (raw[0] + raw[1] + raw[2] + raw[3] + raw[4] + raw[5]) / 6;
  double var = 0;
  for (double v : raw) var += (v - mean) * (v - mean) / 6;
  std::size_t i = 0;
  for (const Group& g : groups)
    for (const Sample& smp : g.samples) {
      EXPECT_NEAR(smp.model_reward, 0.5 * (raw[i] - mean) / std::sqrt(var), 1e-6);
      ++i;
    }
  // A plain-text prompt is scored as one user message: the same score as the chat form.
  // (1e-5: float32 sums over another batch's padding width)
  EXPECT_NEAR(raw[3], rm.score({user("917")}, {"h"}).at(0), 1e-5);
  EXPECT_NEAR(rm.score({user("482")}, {"c"}).at(0), raw[0], 1e-5);
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(metrics[0].first, "reward/model/score");
  EXPECT_NEAR(metrics[0].second, mean, 1e-9);
}

TEST(RewardModelTraining, RunsWithAVerifierAndItsMetricsShowBoth) {
  const std::string dir = fresh_test_dir("reward-model");
  const std::string rm = make_reward_model(dir + "/rm", 8);
  const std::string config = grpo::testing::write_config(dir, dir + "/run");
  int code = 0;
  const std::string out = grpo::testing::run_grpo(
      "--config " + config + " --set train.steps=2 --set eval.every=0 --set rollout.num_unique_prompts=4"
      " --set reward_model.path=" + rm + " --set reward_model.weight=0.5 --set algorithm.filter_zero_std_groups=false",
      &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("reward model: " + rm), std::string::npos) << out;
  const auto metrics = grpo::testing::read_metrics(dir + "/run");
  int steps = 0;
  for (const auto& line : metrics) {
    if (!line.contains("objective/scores")) continue;
    ++steps;
    const double verifier = line.at("objective/verifier_reward").get<double>();
    const double model = line.at("reward/model/reward").get<double>();
    const double score = line.at("reward/model/score").get<double>();
    // No shaping configured: each sample's reward is its verifier reward plus 0.5 x its score.
    EXPECT_NEAR(line.at("objective/scores").get<double>(), verifier + model, 1e-9) << line.dump();
    EXPECT_NEAR(model, 0.5 * score, 1e-9) << line.dump();
    EXPECT_GT(line.at("reward/model/score_std").get<double>(), 0.0) << line.dump();
  }
  EXPECT_EQ(steps, 2) << out;
}

TEST(RewardModelScoring, AModelWithoutAChatTemplateNeedsOneNamed) {
  const std::string dir = fresh_test_dir("reward-model") + "/rm";
  make_reward_model(dir, 9);
  std::filesystem::remove(dir + "/tokenizer_config.json");  // no template of its own
  const std::string message = grpo::testing::error_of<grpo::sdk::ConfigError>(
      [&] { RewardModel(settings_for(dir), torch::kFloat32, torch::kCPU, Precision::kFp32); });
  EXPECT_NE(message.find("reward_model.chat_template"), std::string::npos) << message;
  EXPECT_NE(message.find("has no chat template of its own"), std::string::npos) << message;
  RewardModelSettings named = settings_for(dir);
  named.chat_template = "chatml";
  EXPECT_NO_THROW(RewardModel(named, torch::kFloat32, torch::kCPU, Precision::kFp32));
}

TEST(RewardModelTraining, ARewardModelIsNotAPolicy) {
  const std::string dir = fresh_test_dir("reward-model");
  const std::string rm = make_reward_model(dir + "/rm", 10);
  const std::string config = grpo::testing::write_config(dir, dir + "/run", rm);
  int code = 0;
  const std::string out = grpo::testing::run_grpo("--validate --config " + config, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("model.path: " + rm + "/config.json names a *ForSequenceClassification"), std::string::npos) << out;
}

TEST(RewardModelTraining, ACausalLmIsNotARewardModel) {
  const std::string dir = fresh_test_dir("reward-model");
  const std::string config = grpo::testing::write_config(dir, dir + "/run");
  int code = 0;
  const std::string out = grpo::testing::run_grpo(
      "--config " + config + " --set reward_model.path=" + grpo::testing::task_model(), &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("reward_model.path"), std::string::npos) << out;
  EXPECT_NE(out.find("names Qwen2ForCausalLM; a reward model is a *ForSequenceClassification checkpoint "
                     "(here: Qwen2ForSequenceClassification)"),
            std::string::npos)
      << out;
}

// NaN weights in reward_model.path fail --validate, and training before anything loads, with one
// message naming the key, the file and the tensor.
TEST(RewardModelTraining, NonFiniteWeightsFailValidateAndTrainingNamingFileAndTensor) {
  const std::string dir = fresh_test_dir("reward-model");
  const std::string rm = make_reward_model(dir + "/rm", 11);
  grpo::testing::fill_tensor_with_nan(rm + "/model.safetensors", "score.weight");
  const std::string args = "--config " + grpo::testing::write_config(dir, dir + "/run") + " --set reward_model.path=" + rm;
  int code = 0;
  const std::string validate = grpo::testing::run_grpo("--validate " + args, &code);
  EXPECT_EQ(code, 3) << validate;
  const std::string train = grpo::testing::run_grpo(args, &code);
  EXPECT_EQ(code, 3) << train;
  auto error_line = [](const std::string& out) {
    const auto at = out.find("[error] ");
    return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
  };
  const std::string line = error_line(validate);
  EXPECT_NE(line.find("reward_model.path: "), std::string::npos) << validate;
  EXPECT_NE(line.find(rm + "/model.safetensors"), std::string::npos) << line;
  EXPECT_NE(line.find("'score.weight'"), std::string::npos) << line;
  EXPECT_EQ(error_line(train), line);
}
