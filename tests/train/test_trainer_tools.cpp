// grpo-run with tools in the loop, run as a user runs it, on the tool task
// (tests/support/tool_task.h: "A+B=" answered with a `calc` call, the legacy format): the
// trajectories reach samples.jsonl with their turns and calls, the tools/* metrics are logged,
// a killed run resumes bit-identically, and 2 data-parallel ranks train the weights 1 process
// trains.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dist/local_launcher.h"
#include "core/model/safetensors_torch.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"
#include "tests/support/tool_task.h"
#include "tests/train/resume_check.h"

namespace {

using grpo::testing::fresh_test_dir;
using grpo::testing::read_metrics;
using grpo::testing::run_command;
using json = nlohmann::json;

// The task and its warm-started model, made once per test process.
const std::string& tool_task_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(GRPO_TEST_TMP_DIR) + "/tool-task-" + std::to_string(::getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    grpo::testing::write_tool_task(d, 300, 40, 5);
    grpo::testing::make_tool_task_model(d + "/model", 3);
    return d;
  }();
  return dir;
}

// The `calculator` tool plugin as `calc`, the legacy parser, the math verifier; packed updates
// (pack_length 256 holds several trajectories), async rollouts, KL against a reference.
std::string write_config(const std::string& dir, int steps) {
  const std::string& task = tool_task_dir();
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << "run: {seed: 1}\n"
                      << "model: {path: " << task << "/model}\n"
                      << "tokenizer: {chat_template: none}\n"
                      << "plugins: {paths: [" << GRPO_PLUGIN_BUILD_DIR << "]}\n"
                      << "verifiers: [math]\n"
                      << "tools: [{name: calculator, as: calc}]\n"
                      << "data: {train: [" << task << "/train.jsonl], eval: [" << task << "/eval.jsonl]}\n"
                      << "algorithm: {advantage: grpo, policy_loss: ppo_clip, loss_aggregation: token-mean,\n"
                      << "            kl_estimator: k3, kl_coef: 0.05}\n"
                      << "reward: {verification_reward: 1.0, num_threads: 2}\n"
                      << "rollout:\n"
                      << "  num_unique_prompts: 8\n  num_samples_per_prompt: 4\n  max_new_tokens: 64\n"
                      << "  max_prompt_tokens: 16\n  temperature: 1.0\n  async_steps: 1\n"
                      << "  backend: {name: native, max_num_seqs: 32}\n"
                      << "  tools: {parser: legacy, max_calls: 2, timeout_s: 10}\n"
                      << "train: {steps: " << steps << ", learning_rate: 1.0e-3, pack_length: 256, per_device_train_batch_size: 2,\n"
                      << "        num_mini_batches: 2, adam_eps: 1.0e-6}\n"
                      << "eval: {every: 2, max_prompts: 16}\n"
                      << "checkpoint: {save_freq: 2, keep_last: 5}\n"
                      << "log: {samples_every: 2, samples_per_step: 3}\n"
                      << "dist: {timeout_s: 60}\n";
  return path;
}

}  // namespace

// samples.jsonl holds the trajectories as turns (policy / observation) with their calls, and
// metrics.jsonl the tools/* metrics of training and evaluation.
TEST(TrainerTools, TrajectoriesReachSamplesJsonlAndMetrics) {
  const std::string dir = fresh_test_dir("trainer-tools");
  const std::string config = write_config(dir, 2);
  const auto r = run_command(std::string(GRPO_RUN_BINARY) + " --config " + config + " --set run.output_dir=" + dir + "/run 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tools: calc (legacy parser, at most 2 calls per trajectory, 10 s per call; resumed in the backend, KV cache kept)"),
            std::string::npos)
      << r.output;
  std::ifstream in(dir + "/run/samples.jsonl");
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 6u) << "steps 1 and 2, 3 trajectories each";
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_EQ(lines[3]["step"], 2);
  int with_calls = 0;
  for (const json& l : lines) {
    for (const char* key : {"prompt", "ground_truth", "turns", "tool_calls", "reward", "advantage", "correct", "response_tokens",
                            "observation_tokens"})
      EXPECT_TRUE(l.contains(key)) << key << " in " << l.dump();
    std::string joined;
    int observation_tokens_seen = 0;
    for (const json& t : l["turns"]) {
      joined += t["text"].get<std::string>();
      if (t["role"] == "observation") {
        ++observation_tokens_seen;
        EXPECT_EQ(t["text"].get<std::string>().rfind("<output>\n", 0), 0u) << t.dump();
      }
    }
    if (!l["tool_calls"].empty()) {
      ++with_calls;
      EXPECT_EQ(l["tool_calls"][0]["tool"], "calc");
      EXPECT_GT(l["observation_tokens"].get<int>(), 0);
      EXPECT_GT(observation_tokens_seen, 0);
    }
  }
  EXPECT_GT(with_calls, 0) << "the warm-started model calls the tool";
  const auto metrics = read_metrics(dir + "/run");
  bool train_tools = false, eval_tools = false;
  for (const auto& m : metrics) {
    train_tools |= m.contains("tools/calls_per_sample") && m.contains("tools/calc/error_rate") && m.contains("tools/observation_tokens");
    eval_tools |= m.contains("eval/tools/samples_with_calls");
  }
  EXPECT_TRUE(train_tools);
  EXPECT_TRUE(eval_tools);
}

// Killed right after the checkpoint of step 2 and resumed: the same metrics and weights as the
// uninterrupted run, with multi-turn samples in every step.
TEST(TrainerTools, KilledRunResumesExactlyWithTools) {
  const std::string dir = fresh_test_dir("trainer-tools");
  // Synchronous rollouts: a resumed async run generates its first batch with the checkpoint's
  // weights, not the older ones the uninterrupted run used (docs/training.md, exact resume).
  const std::string common = "--config " + write_config(dir, 4) + " --set rollout.async_steps=0";
  int code = 0;
  const std::string out = grpo::testing::run_grpo(common + " --set run.output_dir=" + dir + "/full", &code);
  ASSERT_EQ(code, 0) << out;
  double calls = 0;
  for (const auto& m : read_metrics(dir + "/full"))
    if (m.contains("tools/calls_per_sample")) calls += m["tools/calls_per_sample"].get<double>();
  ASSERT_GT(calls, 0.0) << "no tool calls: the check would say nothing about tools";
  grpo::testing::expect_killed_run_resumes_exactly(common, dir + "/full", dir + "/cut", 2, 4, "model.safetensors");
  // samples.jsonl of the resumed run: the lines written after step 2 by the killed process are
  // replaced, not duplicated; every line equals the uninterrupted run's but for the calls' timings.
  auto lines = [](const std::string& path) {
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      json l = json::parse(line);
      for (auto& c : l["tool_calls"]) c.erase("seconds");
      out.push_back(std::move(l));
    }
    return out;
  };
  const auto a = lines(dir + "/full/samples.jsonl"), b = lines(dir + "/cut/samples.jsonl");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "line " << i;
}

// Two Gloo ranks generate their shares of the multi-turn rollouts (the policy masks travel with
// the rewards for the global advantages) and train the weights one process trains.
TEST(TrainerTools, TwoRanksTrainTheSameWeightsAsOneProcessWithTools) {
  const std::string dir = fresh_test_dir("trainer-tools");
  const std::string config = write_config(dir, 2);
  const std::string run = std::string(GRPO_RUN_BINARY) + " --config " + config;
  const auto one = run_command(run + " --set run.output_dir=" + dir + "/one 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = run_command(run + " --set run.output_dir=" + dir + "/two --nproc 2 2>&1");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto a = grpo::core::load_safetensors(dir + "/one/checkpoints/step_000002/model.safetensors");
  const auto b = grpo::core::load_safetensors(dir + "/two/checkpoints/step_000002/model.safetensors");
  const auto base = grpo::core::load_safetensors(tool_task_dir() + "/model/model.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, moved = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
    moved = std::max(moved, (a[i].second - base[i].second).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-4) << "training did not move the weights: the comparison would say nothing";
  EXPECT_LT(worst, 1e-5);
  const auto ma = read_metrics(dir + "/one"), mb = read_metrics(dir + "/two");
  ASSERT_EQ(ma.size(), mb.size());
  for (std::size_t i = 0; i < ma.size(); ++i)
    for (const char* key : {"objective/scores", "tools/calls_per_sample", "eval/tools/calls_per_sample"})
      if (ma[i].contains(key)) EXPECT_NEAR(ma[i][key].get<double>(), mb[i][key].get<double>(), 1e-9) << key << " line " << i;
}
