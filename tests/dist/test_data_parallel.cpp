// grpo-run with data parallelism, run as a user would: 2 Gloo ranks (torchrun-style variables
// set by hand, and --nproc 2) against 1 process with the same global batch; a rank killed mid-run
// and named by the survivor; every rank resuming from rank 0's checkpoint.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/dist/local_launcher.h"
#include "core/model/safetensors_torch.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"
#include "tests/train/trainer_fixtures.h"

namespace {

namespace fs = std::filesystem;
using grpo::testing::fresh_test_dir;
using grpo::testing::read_metrics;
using grpo::testing::run_command;

// The digit task of the trainer tests (tests/train/trainer_fixtures.h) and its warm-started model.
std::string write_config(const std::string& dir) {
  grpo::testing::write_digit_task(dir, 200, 40, 7);
  grpo::testing::make_digit_task_model(dir + "/model", 3);
  const std::string path = dir + "/run.yaml";
  // 8 prompts x 8 samples, 2 mini-batches over the global batch, KL against a reference model,
  // zero-std groups filtered (the ranks keep different numbers of groups), async rollouts.
  std::ofstream(path) << "run: {seed: 1}\n"
                      << "model: {path: " << dir << "/model}\n"
                      << "tokenizer: {chat_template_name: none}\n"
                      << "plugins: {paths: [" << GRPO_PLUGIN_BUILD_DIR << "]}\n"
                      << "verifiers: [exact_match]\n"
                      << "data: {train: [" << dir << "/train.jsonl], eval: [" << dir << "/eval.jsonl]}\n"
                      << "algorithm: {advantage: grpo, policy_loss: ppo_clip, loss_aggregation: token-mean,\n"
                      << "            kl_estimator: k3, kl_coef: 0.05}\n"
                      << "reward: {verification_reward: 1.0, num_threads: 1}\n"
                      << "rollout:\n"
                      << "  num_unique_prompts: 8\n  num_samples_per_prompt: 8\n  max_new_tokens: 2\n"
                      << "  max_prompt_tokens: 8\n  temperature: 1.0\n  async_steps: 1\n"
                      << "  backend: {name: native, max_num_seqs: 64}\n"
                      << "train: {steps: 4, learning_rate: 1.0e-3, pack_length: 64, per_device_train_batch_size: 4,\n"
                      << "        num_mini_batches: 2}\n"
                      << "eval: {every: 2, max_prompts: 20}\n";
  return path;
}

std::string grpo_run() { return GRPO_RUN_BINARY; }

// Two ranks started by hand with the variables torchrun sets; returns "codes:E0:E1" + logs.
grpo::testing::CommandResult run_two_ranks_by_hand(const std::string& args, const std::string& dir) {
  const std::string env = "WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(grpo::core::dist::pick_free_port());
  return run_command("(env " + env + " RANK=0 LOCAL_RANK=0 " + grpo_run() + " " + args + " >" + dir + "/rank0.log 2>&1 & p0=$!; env " +
                     env + " RANK=1 LOCAL_RANK=1 " + grpo_run() + " " + args + " >" + dir + "/rank1.log 2>&1 & p1=$!; wait $p0; e0=$?; wait $p1; e1=$?; echo codes:$e0:$e1; cat " +
                     dir + "/rank0.log " + dir + "/rank1.log)");
}

double max_weight_difference(const std::string& a_dir, const std::string& b_dir) {
  const auto a = grpo::core::load_safetensors(a_dir + "/model.safetensors");
  const auto b = grpo::core::load_safetensors(b_dir + "/model.safetensors");
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, (a[i].second - b[i].second).abs().max().item<double>());
  }
  return worst;
}

void expect_same_rollouts(const std::string& one, const std::string& two) {
  // The same prompts and completions (groups are not split; sampling seeds follow the global
  // slot): the step's rewards agree; evaluations over the ranks' shares agree.
  const auto a = read_metrics(one), b = read_metrics(two);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"objective/scores", "eval/verifiable_correct_rate", "eval/prompts", "other/real_batch_size_ratio"})
      if (a[i].contains(key)) {
        ASSERT_TRUE(b[i].contains(key)) << key << " line " << i;
        EXPECT_NEAR(a[i][key].get<double>(), b[i][key].get<double>(), 1e-9) << key << " line " << i;
      }
}

TEST(DataParallel, TwoGlooRanksTrainTheSameWeightsAsOneProcess) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  int code = 0;
  auto one = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir + "/one 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string final_step = "/checkpoints/step_000004";
  const double moved = max_weight_difference(dir + "/one" + final_step, dir + "/model");
  ASSERT_GT(moved, 1e-3) << "training did not move the weights: the comparison would say nothing";

  // torchrun-style variables set by hand.
  const auto by_hand = run_two_ranks_by_hand("--config " + config + " --set run.output_dir=" + dir + "/by_hand", dir);
  ASSERT_NE(by_hand.output.find("codes:0:0"), std::string::npos) << by_hand.output;
  EXPECT_NE(by_hand.output.find("rank 0 of 2 (local 0 of 2), rendezvous 127.0.0.1:"), std::string::npos) << by_hand.output;
  EXPECT_NE(by_hand.output.find("launcher torchrun"), std::string::npos) << by_hand.output;
  EXPECT_LT(max_weight_difference(dir + "/one" + final_step, dir + "/by_hand" + final_step), 1e-5);
  expect_same_rollouts(dir + "/one", dir + "/by_hand");

  // grpo-run --nproc 2.
  auto nproc = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir + "/nproc --nproc 2 2>&1");
  code = nproc.exit_code;
  ASSERT_EQ(code, 0) << nproc.output;
  EXPECT_LT(max_weight_difference(dir + "/one" + final_step, dir + "/nproc" + final_step), 1e-5);
  expect_same_rollouts(dir + "/one", dir + "/nproc");
  // Rank 0 alone writes the run directory's outputs.
  EXPECT_TRUE(fs::exists(dir + "/nproc/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir + "/nproc/run.log"));
}

TEST(DataParallel, BatchWideAdvantageStatisticsAreGlobal) {
  // REINFORCE++ whitens advantages over the whole batch and puts the KL into the token rewards:
  // both need the other ranks' samples.
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const std::string algo = " --config " + std::string(GRPO_SOURCE_DIR) + "/configs/algorithms/reinforce_pp.yaml --set train.steps=3";
  auto one = run_command(grpo_run() + " --config " + config + algo + " --set run.output_dir=" + dir + "/one 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(grpo_run() + " --config " + config + algo + " --set run.output_dir=" + dir + "/two --nproc 2 2>&1");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const double moved = max_weight_difference(dir + "/one/checkpoints/step_000003", dir + "/model");
  ASSERT_GT(moved, 1e-4);
  EXPECT_LT(max_weight_difference(dir + "/one/checkpoints/step_000003", dir + "/two/checkpoints/step_000003"), 1e-5);
  const auto a = read_metrics(dir + "/one"), b = read_metrics(dir + "/two");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 1; i < a.size(); ++i)
    EXPECT_NEAR(a[i]["val/advantages_std"].get<double>(), b[i]["val/advantages_std"].get<double>(), 1e-6) << "step " << i;
}

TEST(DataParallel, AKilledRankIsNamedByTheSurvivorAndTheRunResumes) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const double timeout_s = 60;
  const std::string args = "--config " + config + " --set run.output_dir=" + dir + "/run --set train.steps=500" +
                           " --set checkpoint.save_freq=2 --set eval.every=0 --set dist.timeout_s=" + std::to_string(int(timeout_s));
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(grpo::core::dist::pick_free_port());
  const std::string marker = dir + "/run/checkpoints/step_000002/trainer_state.json";
  // Rank 1 is SIGKILLed mid-run (once the step-2 checkpoint exists); rank 0's exit code, the
  // seconds it took to exit after the kill, and its log.
  const auto r = run_command("(env " + env + " RANK=0 " + grpo_run() + " " + args + " >" + dir + "/rank0.log 2>&1 & p0=$!; env " + env +
                             " RANK=1 " + grpo_run() + " " + args + " >" + dir + "/rank1.log 2>&1 & p1=$!; while [ ! -f " + marker +
                             " ] && kill -0 $p0 2>/dev/null; do sleep 0.05; done; sleep 0.3; kill -9 $p1; t0=$(date +%s); wait $p0; "
                             "e0=$?; echo code:$e0 seconds:$(( $(date +%s) - t0 )); cat " + dir + "/rank0.log)");
  ASSERT_NE(r.output.find("code:7 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lost rank 1"), std::string::npos) << r.output;
  const auto pos = r.output.find("seconds:");
  ASSERT_NE(pos, std::string::npos);
  EXPECT_LT(std::stod(r.output.substr(pos + 8)), timeout_s) << r.output;

  // The last complete checkpoint is usable: both ranks resume from it and finish 2 more steps.
  int latest = 0;
  for (const auto& e : fs::directory_iterator(dir + "/run/checkpoints"))
    if (fs::exists(e.path() / "trainer_state.json")) latest = std::max(latest, std::stoi(e.path().filename().string().substr(5)));
  ASSERT_GE(latest, 2);
  const auto resumed = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir +
                                   "/run --set eval.every=0 --set train.steps=" + std::to_string(latest + 2) + " --resume --nproc 2 2>&1");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  char name[32];
  std::snprintf(name, sizeof name, "step_%06d", latest + 2);
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/" + name + "/model.safetensors"));
}

TEST(DataParallel, TooFewPromptsForTheRanksIsAConfigurationError) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const auto r = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir +
                             "/run --set rollout.num_unique_prompts=1 --set train.num_mini_batches=1 --nproc 2 2>&1");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("rollout.num_unique_prompts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 ranks need at least 2 prompts"), std::string::npos) << r.output;
}

}  // namespace
