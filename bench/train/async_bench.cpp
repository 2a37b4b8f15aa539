// Sync vs async rollouts on one config: grpo-run's training job on the digit task
// (tests/train/trainer_fixtures.h) with rollout.async_steps 0 and 1, side by side in one run.
// Generation is made as long as training (ignore_eos, fixed response length) so that the
// overlap has something to hide. Prints the mean step time of each (first steps excluded:
// warm-up, and async's first batch has nothing to overlap with), the ratio, and the largest
// staleness the async run logged (must be <= async_steps).
//
//   build/bin/grpo_bench_train_async [steps=12]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>  // getpid (LibTorch 2.x headers no longer bring it)

#include "apps/grpo-run/grpo_run.h"
#include "tests/train/trainer_fixtures.h"

namespace {

namespace fs = std::filesystem;

struct RunFigures {
  double step_s = 0, generation_s = 0, training_s = 0, waiting_s = 0, max_staleness = 0;
  int steps = 0;
};

RunFigures run(const std::string& dir, const std::string& config, int async_steps, int steps) {
  const std::string run_dir = dir + "/async" + std::to_string(async_steps);
  fs::remove_all(run_dir);
  std::vector<std::string> args = {"grpo-run", "--config", config, "--set", "rollout.async_steps=" + std::to_string(async_steps),
                                   "--set", "run.output_dir=" + run_dir, "--set", "train.steps=" + std::to_string(steps),
                                   "--log-level", "warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (grpo::cli::grpo_run_main(static_cast<int>(argv.size()), argv.data()) != 0) {
    std::fprintf(stderr, "grpo-run failed (async_steps %d); see %s/run.log\n", async_steps, run_dir.c_str());
    std::exit(1);
  }
  RunFigures f;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("time/step")) continue;  // the step-0 eval line
    f.max_staleness = std::max(f.max_staleness, j.value("rollout/staleness", 0.0));
    if (j.at("step").get<int>() <= 2) continue;
    f.step_s += j.at("time/step").get<double>();
    f.generation_s += j.value("time/generation", 0.0);
    f.training_s += j.value("time/training", 0.0);
    f.waiting_s += j.value("time/waiting", 0.0);
    ++f.steps;
  }
  if (f.steps > 0) {
    f.step_s /= f.steps;
    f.generation_s /= f.steps;
    f.training_s /= f.steps;
    f.waiting_s /= f.steps;
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(4, std::atoi(argv[1])) : 12;
  const std::string dir = (fs::temp_directory_path() / ("grpo-bench-async-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  grpo::testing::write_digit_task(dir, 400, 20, 7);
  grpo::testing::make_digit_task_model(dir + "/model", 3, 20);
  const std::string config = dir + "/bench.yaml";
  std::ofstream(config) << grpo::testing::digit_task_config_head(dir, dir + "/model", GRPO_PLUGIN_BUILD_DIR, /*with_eval=*/false)
                        << "algorithm: {advantage: grpo, policy_loss: ppo_clip, filter_zero_std_groups: false}\n"
                        << "reward: {verification_reward: 1.0}\n"
                        << "rollout: {num_unique_prompts: 16, num_samples_per_prompt: 8, max_new_tokens: 64,\n"
                        << "          max_prompt_tokens: 8, backend: {name: native, ignore_eos: true, max_num_seqs: 128}}\n"
                        << "train: {learning_rate: 1.0e-4, pack_length: 128, per_device_train_batch_size: 8}\n";
  const RunFigures sync = run(dir, config, 0, steps);
  const RunFigures async = run(dir, config, 1, steps);
  std::printf("%-12s %10s %12s %10s %10s %14s\n", "mode", "step s", "generation s", "training s", "waiting s", "max staleness");
  std::printf("%-12s %10.3f %12.3f %10.3f %10.3f %14.0f\n", "async_steps 0", sync.step_s, sync.generation_s, sync.training_s,
              sync.waiting_s, sync.max_staleness);
  std::printf("%-12s %10.3f %12.3f %10.3f %10.3f %14.0f\n", "async_steps 1", async.step_s, async.generation_s,
              async.training_s, async.waiting_s, async.max_staleness);
  std::printf("sync_step_s: %.4f\n", sync.step_s);
  std::printf("async_step_s: %.4f\n", async.step_s);
  std::printf("generation_to_training_ratio: %.3f\n", sync.training_s > 0 ? sync.generation_s / sync.training_s : 0.0);
  std::printf("async_max_staleness: %.0f\n", async.max_staleness);
  std::printf("async_speedup: %.3f\n", async.step_s > 0 ? sync.step_s / async.step_s : 0.0);
  fs::remove_all(dir);
  return 0;
}
