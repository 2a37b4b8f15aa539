// grpo-run on the digit task (tests/train/trainer_fixtures.h) as a user runs it: the task's
// data and warm-started model, made once per test process, a run config, and the process.
// For test files of grpo_train_tests (GRPO_TEST_TMP_DIR, GRPO_PLUGIN_BUILD_DIR, GRPO_RUN_BINARY).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/train/trainer_fixtures.h"

namespace grpo::testing {

// The task data and the warm-started task model, each made once per test process (ctest
// runs every test in its own process).
inline const std::string& task_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(GRPO_TEST_TMP_DIR) + "/trainer-task-" + std::to_string(::getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    write_digit_task(d, 400, 200, 7);
    return d;
  }();
  return dir;
}

inline const std::string& task_model() {
  static const std::string dir = [] {
    const std::string d = task_dir() + "/model";
    make_digit_task_model(d, 3);
    return d;
  }();
  return dir;
}

// A run config for the task; tests change it with --set. `model` defaults to the task model.
inline std::string write_config(const std::string& dir, const std::string& run_dir, const std::string& model = "") {
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << digit_task_config_head(task_dir(), model.empty() ? task_model() : model, GRPO_PLUGIN_BUILD_DIR,
                                                /*with_eval=*/true, run_dir)
                      << "algorithm: {advantage: grpo, policy_loss: ppo_clip, loss_aggregation: token-mean}\n"
                      << "reward: {verification_reward: 1.0, num_threads: 2}\n"
                      << "rollout:\n"
                      << "  num_unique_prompts: 16\n  num_samples_per_prompt: 8\n  max_new_tokens: 2\n"
                      << "  max_prompt_tokens: 8\n  temperature: 1.0\n  async_steps: 0\n"
                      << "  backend: {name: native, max_num_seqs: 128}\n"
                      << "train: {steps: 30, learning_rate: 3.0e-3, pack_length: 64, per_device_train_batch_size: 4}\n"
                      << "eval: {max_prompts: 200}\n";
  return path;
}

inline std::string run_grpo(const std::string& args, int* exit_code) {
  const auto r = run_command(std::string(GRPO_RUN_BINARY) + " " + args + " 2>&1");
  *exit_code = r.exit_code;
  return r.output;
}

}  // namespace grpo::testing
