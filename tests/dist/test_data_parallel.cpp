// grpo-run with data parallelism, run as a user would: 2 Gloo ranks (torchrun-style variables
// set by hand, and --nproc 2) against 1 process with the same global batch; a rank killed mid-run
// and named by the survivor; every rank resuming from rank 0's checkpoint; the ranks ending with
// their launcher.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/local_launcher.h"
#include "core/model/safetensors_torch.h"
#include "core/train/train_state.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"
#include "tests/train/resume_check.h"
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
  std::ofstream(path) << grpo::testing::digit_task_config_head(dir, dir + "/model", GRPO_PLUGIN_BUILD_DIR, /*with_eval=*/true)
                      << "algorithm: {advantage: grpo, policy_loss: ppo_clip, loss_aggregation: token-mean,\n"
                      << "            kl_estimator: k3, kl_coef: 0.05}\n"
                      << "reward: {verification_reward: 1.0, num_threads: 1}\n"
                      << "rollout:\n"
                      << "  num_unique_prompts: 8\n  num_samples_per_prompt: 8\n  max_new_tokens: 2\n"
                      << "  max_prompt_tokens: 8\n  temperature: 1.0\n  async_steps: 1\n"
                      << "  backend: {name: native, max_num_seqs: 64}\n"
                      // adam_eps 1e-6: some gradients are zero but for rounding (the k_proj bias:
                      // softmax ignores a shift shared by all keys), and AdamW with eps 1e-8 turns that
                      // noise, which depends on the summation order and the CPU's kernels, into
                      // lr-sized steps (4e-5 apart on an AVX2 EPYC); 1e-6 keeps them negligible.
                      << "train: {steps: 4, learning_rate: 1.0e-3, pack_length: 64, per_device_train_batch_size: 4,\n"
                      << "        num_mini_batches: 2, adam_eps: 1.0e-6}\n"
                      << "eval: {every: 2, max_prompts: 20}\n"
                      // A broken run (mismatched collectives) fails within this, not the 30-minute default.
                      << "dist: {timeout_s: 60}\n";
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
  ASSERT_EQ(nproc.exit_code, 0) << nproc.output;
  EXPECT_LT(max_weight_difference(dir + "/one" + final_step, dir + "/nproc" + final_step), 1e-5);
  expect_same_rollouts(dir + "/one", dir + "/nproc");
  // Rank 0 alone writes the run directory's outputs.
  EXPECT_TRUE(fs::exists(dir + "/nproc/metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir + "/nproc/run.log"));
}

// Activation checkpointing under data parallel: the recomputed layers' gradients reach the
// bucketed all-reduce through the same parameter hooks (reentrant backward), so two ranks with
// it on train the weights of one process with it off.
TEST(DataParallel, ActivationCheckpointingKeepsTheWeightsOfOneProcess) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  auto one = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir + "/one 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(grpo_run() + " --config " + config + " --set run.output_dir=" + dir +
                         "/two --set train.gradient_checkpointing=true --nproc 2 2>&1");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("activation checkpointing: on"), std::string::npos) << two.output;
  const std::string final_step = "/checkpoints/step_000004";
  ASSERT_GT(max_weight_difference(dir + "/one" + final_step, dir + "/model"), 1e-3);
  EXPECT_LT(max_weight_difference(dir + "/one" + final_step, dir + "/two" + final_step), 1e-5);
  expect_same_rollouts(dir + "/one", dir + "/two");
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

// Starts 2 ranks (torchrun-style variables), waits until the step-2 checkpoint exists, sends
// `signal` to rank `victim` and waits for the other rank. Returns "code:C ms:M" (the
// survivor's exit code and how many milliseconds it took to exit after the signal) and its log.
std::string disrupt_a_rank(const std::string& dir, const std::string& args, const std::string& signal, int victim) {
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(grpo::core::dist::pick_free_port());
  const std::string marker = dir + "/run/checkpoints/step_000002/trainer_state.json";
  const std::string victim_pid = victim == 0 ? "$p0" : "$p1", survivor_pid = victim == 0 ? "$p1" : "$p0";
  const std::string survivor_log = dir + "/rank" + std::to_string(1 - victim) + ".log";
  return run_command("(env " + env + " RANK=0 " + grpo_run() + " " + args + " >" + dir + "/rank0.log 2>&1 & p0=$!; env " + env +
                     " RANK=1 " + grpo_run() + " " + args + " >" + dir + "/rank1.log 2>&1 & p1=$!; while [ ! -f " + marker +
                     " ] && kill -0 $p0 2>/dev/null; do sleep 0.05; done; sleep 0.3; kill -" + signal + " " + victim_pid +
                     "; t0=$(date +%s%N); wait " + survivor_pid + "; e=$?; t1=$(date +%s%N); kill -9 " + victim_pid +
                     " 2>/dev/null; wait " + victim_pid + " 2>/dev/null; echo code:$e ms:$(( (t1 - t0) / 1000000 )); cat " +
                     survivor_log + ")")
      .output;
}

double seconds_of(const std::string& output) {
  const auto pos = output.find("ms:");
  return pos == std::string::npos ? 1e9 : std::stod(output.substr(pos + 3)) / 1000.0;
}

std::string long_run_args(const std::string& config, const std::string& dir, int timeout_s) {
  return "--config " + config + " --set run.output_dir=" + dir + "/run --set train.steps=500 --set checkpoint.save_freq=2" +
         " --set eval.every=0 --set dist.timeout_s=" + std::to_string(timeout_s) + " --set dist.heartbeat_s=0.5";
}

TEST(DataParallel, AKilledRankIsNamedByTheSurvivorAndTheRunResumes) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const int timeout_s = 60;
  const std::string out = disrupt_a_rank(dir, long_run_args(config, dir, timeout_s), "9", 1);
  ASSERT_NE(out.find("code:7 ms:"), std::string::npos) << out;
  EXPECT_NE(out.find("lost rank 1: no heartbeat"), std::string::npos) << out;
  EXPECT_LT(seconds_of(out), timeout_s) << out;  // a dead peer is seen at once, not after the timeout

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

TEST(DataParallel, AFrozenRankIsNamedWithinTheTimeout) {
  // SIGSTOP: the process is alive but answers nothing; only dist.timeout_s can tell.
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const int timeout_s = 10;  // above any gap between two collectives of this run, also on a loaded machine
  const std::string out = disrupt_a_rank(dir, long_run_args(config, dir, timeout_s), "STOP", 1);
  ASSERT_NE(out.find("code:7 ms:"), std::string::npos) << out;
  EXPECT_NE(out.find("lost rank 1: no heartbeat"), std::string::npos) << out;
  EXPECT_NE(out.find("frozen"), std::string::npos) << out;
  // The timeout, then ~3 heartbeats (1.5 s) to tell which rank; generous for a loaded machine.
  EXPECT_LT(seconds_of(out), timeout_s + 10) << out;
}

TEST(DataParallel, LosingRankZeroIsNamedByTheOthers) {
  // Rank 0 also hosts the rendezvous store: the survivor cannot read heartbeats, and says so.
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const std::string out = disrupt_a_rank(dir, long_run_args(config, dir, 60), "9", 0);
  ASSERT_NE(out.find("code:7 ms:"), std::string::npos) << out;
  EXPECT_NE(out.find("lost rank 0: the rendezvous store it hosts at 127.0.0.1:"), std::string::npos) << out;
  EXPECT_LT(seconds_of(out), 60) << out;
}

// The pids of `parent`'s children, from /proc/<pid>/stat ("pid (comm) state ppid ...").
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == parent) children.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return children;
}

TEST(DataParallel, KillingTheLauncherEndsEveryRank) {
  // Issue 21: after SIGKILL of `grpo-run --nproc 2`, both ranks went on training under init.
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  // Orphaned ranks are re-parented to this process rather than to init, so it can reap them.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  std::vector<std::string> args{grpo_run()};
  std::istringstream words(long_run_args(config, dir, 60) + " --nproc 2");
  for (std::string w; words >> w;) args.push_back(w);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir + "/launcher.log";
  const pid_t launcher = fork();
  if (launcher == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ASSERT_GT(launcher, 0);
  // Both ranks are training once rank 0 has saved step 2 (every step needs both).
  const std::string marker = dir + "/run/checkpoints/step_000002";
  const auto start = std::chrono::steady_clock::now();
  while (!fs::exists(marker) && waitpid(launcher, nullptr, WNOHANG) == 0 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(240))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // One scan of /proc can miss a process (see tests/support/processes.h): a few scans.
  std::vector<pid_t> ranks = children_of(launcher);
  for (int i = 0; i < 100 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ranks = children_of(launcher);
  }
  ASSERT_TRUE(fs::exists(marker)) << grpo::testing::run_command("cat " + log).output;
  ASSERT_EQ(ranks.size(), 2u);

  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  waitpid(launcher, nullptr, 0);
  // Every rank must end within 5 s (a bound on behaviour, not a speed claim); a survivor is killed
  // here so the test leaves nothing behind.
  const auto killed_at = std::chrono::steady_clock::now();
  for (pid_t rank : ranks) {
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(rank, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(got, rank) << "rank process " << rank << " still runs 5 s after its launcher was killed";
    if (got == 0) {
      kill(rank, SIGKILL);
      waitpid(rank, &status, 0);
    } else {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "rank " << rank << " ended with status " << status;
    }
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(DataParallel, SlurmAndOpenMpiVariablesStartTheRanks) {
  // What srun and mpirun set, by hand: each launcher's own variables, no RANK / WORLD_SIZE.
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const std::string args = "--config " + config + " --set train.steps=2 --set eval.every=0 --set eval.at_start=false";
  struct Launcher {
    std::string name, rank0, rank1;
  };
  const std::string port = " MASTER_PORT=";
  for (const Launcher& l :
       {Launcher{"slurm", "SLURM_PROCID=0 SLURM_LOCALID=0", "SLURM_PROCID=1 SLURM_LOCALID=1"},
        Launcher{"mpi", "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1"}}) {
    const std::string common = l.name == "slurm"
                                   ? "SLURM_STEP_NUM_TASKS=2 SLURM_STEP_TASKS_PER_NODE=2 SLURM_STEP_NODELIST=localhost SLURM_NTASKS=2"
                                   : "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1";
    const std::string env = "env -u RANK -u WORLD_SIZE " + common + port + std::to_string(grpo::core::dist::pick_free_port()) + " ";
    const std::string run = " " + args + " --set run.output_dir=" + dir + "/" + l.name;
    const auto r = run_command("(" + env + l.rank0 + " " + grpo_run() + run + " >" + dir + "/r0.log 2>&1 & p0=$!; " + env + l.rank1 + " " +
                               grpo_run() + run + " >" + dir + "/r1.log 2>&1 & p1=$!; wait $p0; e0=$?; wait $p1; e1=$?; echo codes:$e0:$e1; cat " +
                               dir + "/r0.log " + dir + "/r1.log)");
    EXPECT_NE(r.output.find("codes:0:0"), std::string::npos) << l.name << "\n" << r.output;
    EXPECT_NE(r.output.find("rank 0 of 2 (local 0 of 2), rendezvous "), std::string::npos) << l.name << "\n" << r.output;
    EXPECT_NE(r.output.find("launcher " + l.name), std::string::npos) << l.name << "\n" << r.output;
    EXPECT_TRUE(fs::exists(dir + "/" + l.name + "/checkpoints/step_000002/model.safetensors")) << l.name;
  }
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

// ---- dist.sharding (core/dist/sharding.h) ---------------------------------------------------

namespace {

struct ShardCase {
  const char* mode;
  int ranks;
  bool checkpointing = false;  // train.gradient_checkpointing in both runs
};

std::string shard_case_name(const ::testing::TestParamInfo<ShardCase>& info) {
  return std::string(info.param.mode) + "_" + std::to_string(info.param.ranks) + "ranks" +
         (info.param.checkpointing ? "_checkpointing" : "");
}

std::string sharded(const ShardCase& c) {
  return " --set dist.sharding=" + std::string(c.mode) + " --nproc " + std::to_string(c.ranks) +
         (c.checkpointing ? " --set train.gradient_checkpointing=true" : "");
}

// Bytes of a saved model's tensors (float32 here: the trainable values of a full fine-tune).
double model_mib(const std::string& dir) {
  double bytes = 0.0;
  for (const auto& [name, t] : grpo::core::load_safetensors(dir + "/model.safetensors"))
    bytes += static_cast<double>(t.numel() * t.element_size());
  return bytes / 1048576.0;
}

class ShardedDataParallel : public ::testing::TestWithParam<ShardCase> {};

// Each mode on 2 and 4 ranks against dist.sharding none on as many ranks: the weights after 5
// steps, and every step's metrics (the ranks' metrics are reduced alike); each rank holds 1/N of
// the AdamW state.
TEST_P(ShardedDataParallel, TrainsTheWeightsAndMetricsOfNone) {
  const ShardCase c = GetParam();
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  // Weight decay on (matrices decay, vectors do not: both parameter groups).
  const std::string common = grpo_run() + " --config " + config + " --set train.steps=5 --set train.weight_decay=0.1";
  auto one = run_command(common + " --set run.output_dir=" + dir + "/one" + sharded({"none", c.ranks, c.checkpointing}) + " 2>&1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto many = run_command(common + " --set run.output_dir=" + dir + "/many" + sharded(c) + " 2>&1");
  ASSERT_EQ(many.exit_code, 0) << many.output;
  EXPECT_NE(many.output.find("dist.sharding " + std::string(c.mode) + ": this rank keeps the AdamW state of"),
            std::string::npos) << many.output;
  const std::string final_step = "/checkpoints/step_000005";
  ASSERT_GT(max_weight_difference(dir + "/one" + final_step, dir + "/model"), 1e-3);
  EXPECT_LT(max_weight_difference(dir + "/one" + final_step, dir + "/many" + final_step), 1e-5);
  expect_same_rollouts(dir + "/one", dir + "/many");
  const auto a = read_metrics(dir + "/one"), b = read_metrics(dir + "/many");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].contains("loss/policy_avg")) continue;  // the evaluation-only line of step 0
    for (const char* key : {"loss/policy_avg", "loss/kl_avg", "objective/kl", "optimizer/grad_norm", "val/ratio",
                            "train/optimizer_steps", "objective/entropy"}) {
      const double x = a[i][key].get<double>(), y = b[i][key].get<double>();
      EXPECT_NEAR(x, y, 1e-5 * (1.0 + std::abs(x))) << key << " line " << i;
    }
    const double whole = a[i]["memory/optimizer_state_mib"].get<double>();
    const double shard = b[i]["memory/optimizer_state_mib"].get<double>();
    EXPECT_GT(whole, 0.0);
    // 1/N of the state, plus at most one padding value per unit and rank.
    EXPECT_LT(shard, whole / c.ranks * 1.01) << "line " << i;
    EXPECT_GT(shard, whole / c.ranks * 0.99) << "line " << i;
    // full: between steps a rank holds 1/N of the parameter values (the metrics average the ranks).
    if (std::string(c.mode) == "full") {
      const double at_rest = b[i]["memory/parameters_at_rest_mib"].get<double>();
      const double model = model_mib(dir + "/many" + final_step);
      EXPECT_LT(at_rest, model / c.ranks * 1.01) << "line " << i;
      EXPECT_GT(at_rest, model / c.ranks * 0.99) << "line " << i;
    } else {
      EXPECT_FALSE(b[i].contains("memory/parameters_at_rest_mib")) << "line " << i;
    }
  }
  if (std::string(c.mode) == "full")
    EXPECT_NE(many.output.find("dist.sharding full: parameters sharded at rest"), std::string::npos) << many.output;
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedDataParallel,
                         // 3 ranks: units that do not divide evenly (padded last chunks)
                         ::testing::Values(ShardCase{"optimizer", 2}, ShardCase{"gradients", 2}, ShardCase{"gradients", 3},
                                           ShardCase{"optimizer", 4}, ShardCase{"gradients", 4}, ShardCase{"full", 2},
                                           ShardCase{"full", 3}, ShardCase{"full", 4}, ShardCase{"full", 2, true}),
                         shard_case_name);

class ShardedResume : public ::testing::TestWithParam<ShardCase> {};

// A data-parallel run killed after a checkpoint and resumed ends where the uninterrupted one
// ended, metric for metric and bit for bit, in every mode (each rank reloads its own optimizer
// shard). Synchronous rollouts: an async run resumes reproducibly but not bit-identically
// (docs/training.md, "Async rollouts").
TEST_P(ShardedResume, IsExact) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const std::string common = "--config " + config + " --set train.steps=4 --set checkpoint.save_freq=2 --set eval.every=0" +
                             " --set rollout.async_steps=0" + sharded(GetParam());
  int code = 0;
  const std::string full = grpo::testing::run_grpo(common + " --set run.output_dir=" + dir + "/full", &code);
  ASSERT_EQ(code, 0) << full;
  const bool sharded_state = std::string(GetParam().mode) != "none";
  for (int r = 0; r < GetParam().ranks; ++r)
    EXPECT_EQ(fs::exists(dir + "/full/checkpoints/step_000004/" + grpo::core::optimizer_shard_file(r, GetParam().ranks)),
              sharded_state) << r;
  EXPECT_EQ(fs::exists(dir + "/full/checkpoints/step_000004/optimizer.pt"), !sharded_state);
  grpo::testing::expect_killed_run_resumes_exactly(common, dir + "/full", dir + "/cut", 2, 4, "model.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedResume,
                         ::testing::Values(ShardCase{"none", 2}, ShardCase{"optimizer", 2}, ShardCase{"gradients", 2},
                                           ShardCase{"full", 2}),
                         shard_case_name);

class ShardedFailure : public ::testing::TestWithParam<const char*> {};

// A killed rank is named by the other in every mode, at once (its heartbeat stops).
TEST_P(ShardedFailure, AKilledRankIsNamed) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const int timeout_s = 60;
  const std::string out = disrupt_a_rank(
      dir, long_run_args(config, dir, timeout_s) + " --set dist.sharding=" + std::string(GetParam()), "9", 1);
  ASSERT_NE(out.find("code:7 ms:"), std::string::npos) << out;
  EXPECT_NE(out.find("lost rank 1: no heartbeat"), std::string::npos) << out;
  EXPECT_LT(seconds_of(out), timeout_s) << out;
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardedFailure, ::testing::Values("optimizer", "gradients", "full"));

// Bad input: sharding one process warns and trains unsharded; a checkpoint whose optimizer
// layout is not this run's (another world size, sharded vs whole) is refused naming
// dist.sharding, before anything is loaded.
TEST(ShardedDataParallel, OneProcessWarnsAndMismatchedShardsAreRefused) {
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  const std::string common = grpo_run() + " --config " + config + " --set train.steps=2 --set eval.every=0 --set run.output_dir=" + dir + "/run";
  auto single = run_command(common + " --set run.output_dir=" + dir + "/single --set dist.sharding=optimizer 2>&1");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  EXPECT_NE(single.output.find("dist.sharding optimizer: one process, nothing to shard"), std::string::npos) << single.output;
  EXPECT_TRUE(fs::exists(dir + "/single/checkpoints/step_000002/optimizer.pt"));
  auto single_full = run_command(common + " --set run.output_dir=" + dir + "/single_full --set dist.sharding=full 2>&1");
  ASSERT_EQ(single_full.exit_code, 0) << single_full.output;
  EXPECT_NE(single_full.output.find("dist.sharding full: one process, nothing to shard"), std::string::npos) << single_full.output;

  auto two = run_command(common + " --set dist.sharding=gradients --nproc 2 2>&1");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::string resume = " --set train.steps=3 --resume";
  auto as_one = run_command(common + resume + " 2>&1");
  EXPECT_NE(as_one.exit_code, 0) << as_one.output;
  EXPECT_NE(as_one.output.find("dist.sharding"), std::string::npos) << as_one.output;
  EXPECT_NE(as_one.output.find("holds an optimizer state sharded over 2 ranks"), std::string::npos) << as_one.output;
  auto as_four = run_command(common + resume + " --set dist.sharding=gradients --nproc 4 2>&1");
  EXPECT_NE(as_four.exit_code, 0) << as_four.output;
  EXPECT_NE(as_four.output.find("holds optimizer shards of 2 ranks; this run has 4"), std::string::npos) << as_four.output;
  auto whole = run_command(common + resume + " --set dist.sharding=none --nproc 2 2>&1");
  EXPECT_NE(whole.exit_code, 0) << whole.output;
  EXPECT_NE(whole.output.find("this run keeps one whole optimizer state"), std::string::npos) << whole.output;
  auto single_resumed_sharded = run_command(grpo_run() + " --config " + config + " --set train.steps=3 --set eval.every=0 --set run.output_dir=" +
                                            dir + "/single --resume --set dist.sharding=optimizer --nproc 2 2>&1");
  EXPECT_NE(single_resumed_sharded.exit_code, 0) << single_resumed_sharded.output;
  EXPECT_NE(single_resumed_sharded.output.find("holds one whole optimizer state (dist.sharding: none)"), std::string::npos)
      << single_resumed_sharded.output;
}

// Bad input: a mode whose collectives the backend cannot serve for the parameters' dtype is a
// configuration error at dist.sharding before the first step, on every rank. Debian's LibTorch
// 1.13 Gloo has no bfloat16 (PyTorch added it to Gloo in 2.x, where this case does not arise).
TEST(ShardedDataParallel, ACollectiveTheBackendCannotServeIsAConfigurationError) {
#if TORCH_VERSION_MAJOR >= 2
  GTEST_SKIP() << "this LibTorch's Gloo has bfloat16";
#endif
  const std::string dir = fresh_test_dir("dist");
  const std::string config = write_config(dir);
  auto out = run_command(grpo_run() + " --config " + config + " --set train.steps=1 --set eval.every=0 --set run.output_dir=" +
                         dir + "/run --set model.dtype=bfloat16 --set dist.sharding=full --nproc 2 2>&1");
  EXPECT_NE(out.exit_code, 0) << out.output;
  // Where it was set (here --set), the key, the collective, the dtype, the device.
  EXPECT_NE(out.output.find("--set #5: dist.sharding: dist.sharding full composes c10d's all-gather of BFloat16 tensors on cpu, and this backend "
                            "cannot serve it"), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("lost rank"), std::string::npos) << out.output;
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints"));
}

}  // namespace
