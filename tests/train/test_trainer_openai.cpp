// Training with `rollout.backend: openai` against grpo-serve on loopback (docs/serving.md): the
// digit task learns as with the in-process engine, and every step's weights reach the server
// through the shared folder and /update_weights_from_disk.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/metrics_jsonl.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_dir.h"
#include "tests/train/digit_task_runs.h"

namespace {

using grpo::testing::fresh_test_dir;
using grpo::testing::read_metrics;
using grpo::testing::run_grpo;
using grpo::testing::ServeProcess;
using grpo::testing::task_model;
using grpo::testing::write_config;

// The digit-task config of TrainerLearns with the openai backend in place of the native one.
std::string openai_config(const std::string& dir, const std::string& run_dir, const ServeProcess& server) {
  const std::string path = write_config(dir, run_dir);
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::string yaml = text.str();
  const std::string native = "  backend: {name: native, max_num_seqs: 128}\n";
  const auto at = yaml.find(native);
  EXPECT_NE(at, std::string::npos) << yaml;
  yaml.replace(at, native.size(),
               "  backend: {name: openai, url: \"" + server.url() + "\", weight_sync_dir: " + dir + "/served-weights}\n");
  std::ofstream(path) << yaml;
  return path;
}

TEST(TrainerLearns, OpenAIBackendAgainstGrpoServeLearnsTheDigitTask) {
  const std::string dir = fresh_test_dir("trainer-openai");
  const std::string run_dir = dir + "/run";
  // The trainer's log-probs use the sampling temperature: the server's must too (--logprobs-mode scaled).
  ServeProcess server(GRPO_SERVE_BINARY, task_model(), dir, {"--logprobs-mode", "scaled", "--max-num-seqs", "128"});
  int code = 0;
  const std::string out = run_grpo("--config " + openai_config(dir, run_dir, server) +
                                       " --set rollout.num_unique_prompts=32 --set rollout.num_samples_per_prompt=16"
                                       " --set train.num_mini_batches=4",
                                   &code);
  ASSERT_EQ(code, 0) << out << "\nserver log:\n" << server.log();
  const auto metrics = read_metrics(run_dir);
  ASSERT_FALSE(metrics.empty());
  const double before = metrics.front().at("eval/verifiable_correct_rate").get<double>();
  const double after = metrics.back().at("eval/verifiable_correct_rate").get<double>();
  ASSERT_EQ(metrics.back().at("step"), 30);
  // TrainerLearns.EvalCorrectRateRisesOnTheDigitTask's bounds: at chance before, +40 points.
  EXPECT_LT(before, 0.2) << out;
  EXPECT_GT(after - before, 0.4) << "before " << before << ", after " << after << "\n" << out;

  // The server loaded the trainer's weights once per step at least (30 steps; evaluations add
  // their own syncs), and serves the last ones from the shared folder.
  httplib::Client client(server.url());
  const auto health = client.Get("/health");
  ASSERT_TRUE(health) << server.log();
  const auto h = nlohmann::json::parse(health->body);
  EXPECT_GE(h.at("weights_version").get<int>(), 30) << h.dump();
  EXPECT_EQ(h.at("weights_path").get<std::string>(), std::filesystem::absolute(dir + "/served-weights").string()) << h.dump();
  for (const auto& m : metrics)
    if (m.contains("rollout/weight_syncs") && m.at("step").get<int>() > 0) {
      EXPECT_GE(m.at("rollout/weight_syncs").get<double>(), m.at("step").get<double>()) << m.dump();
    }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
