// The exact-resume check grpo-run's tests share: a run SIGKILLed right after a checkpoint and
// resumed must end where the uninterrupted run ended, metric for metric and bit for bit.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "core/model/checkpoint_dirs.h"
#include "core/model/safetensors_torch.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/run_command.h"
#include "tests/train/digit_task_runs.h"

namespace grpo::testing {

// Runs `common` into cut_dir, kills it (kill -9) as soon as the checkpoint of `kill_step` is
// complete, resumes it with --resume, and expects its metrics (but timings) and the `weights`
// file of the checkpoint of `last_step` to equal those of the uninterrupted run in full_dir.
inline void expect_killed_run_resumes_exactly(const std::string& common, const std::string& full_dir,
                                              const std::string& cut_dir, int kill_step, int last_step,
                                              const std::string& weights) {
  const std::string marker = core::checkpoint_path(cut_dir, kill_step) + "/trainer_state.json";
  const std::string log = cut_dir + ".log";
  const auto killed = run_command("(" + std::string(GRPO_RUN_BINARY) + " " + common + " --set run.output_dir=" + cut_dir +
                                  " >" + log + " 2>&1 & pid=$!; while [ ! -f " + marker +
                                  " ] && kill -0 $pid 2>/dev/null; do sleep 0.02; done; kill -9 $pid; wait $pid; echo killed:$?)");
  ASSERT_NE(killed.output.find("killed:137"), std::string::npos) << killed.output << run_command("cat " + log).output;
  ASSERT_FALSE(std::filesystem::exists(core::checkpoint_path(cut_dir, last_step))) << "the run finished before it was killed";
  int code = 0;
  const std::string out = run_grpo(common + " --set run.output_dir=" + cut_dir + " --resume", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;

  const auto a = read_metrics(full_dir), b = read_metrics(cut_dir);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(deterministic_metrics(a[i]), deterministic_metrics(b[i])) << "line " << i;
  const auto wa = core::load_safetensors(core::checkpoint_path(full_dir, last_step) + "/" + weights);
  const auto wb = core::load_safetensors(core::checkpoint_path(cut_dir, last_step) + "/" + weights);
  ASSERT_EQ(wa.size(), wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) {
    EXPECT_EQ(wa[i].first, wb[i].first);
    EXPECT_TRUE(torch::equal(wa[i].second, wb[i].second)) << wa[i].first;
  }
}

}  // namespace grpo::testing
