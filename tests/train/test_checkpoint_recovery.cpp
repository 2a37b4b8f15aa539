// grpo-run's checkpoints under hostile conditions, as a user meets them: a disk that fills
// during a save, a damaged newest checkpoint, an explicit --resume-from, and a second run
// started on a directory a run is using. Each test runs grpo-run processes on the digit task.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/util/fs.h"
#include "core/util/strings.h"
#include "tests/support/file_damage.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"
#include "tests/train/digit_task_runs.h"

namespace {

namespace fs = std::filesystem;
using grpo::core::read_file;
using grpo::testing::fresh_test_dir;
using grpo::testing::run_command;
using grpo::testing::run_grpo;
using grpo::testing::write_config;

// Three steps of 8 prompts x 4 samples, a checkpoint after each (about 1 s).
std::string short_run(const std::string& config) {
  return "--config " + config +
         " --set train.steps=3 --set checkpoint.save_freq=1 --set rollout.num_unique_prompts=8"
         " --set rollout.num_samples_per_prompt=4 --set eval.every=0 --set eval.max_prompts=20";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The disk fills during the step-2 save: the run stops with exit 5 and the reason in stderr and
// run.log (not an abort), no staging folder is left, and step 1 stays intact. Then, as after a
// save that was killed, a stale staging folder fills the (enlarged) disk: --resume removes it
// before it writes anything and continues from step 1 with no clean-up by hand.
TEST(CheckpointRecovery, FullDiskFailsTheSaveWithExit5AndResumeNeedsNoCleanUp) {
  const std::string dir = fresh_test_dir("checkpoint_recovery");
  const std::string run_dir = dir + "/run", out = dir + "/out";
  fs::create_directories(run_dir);
  fs::create_directories(out);
  // A private mount namespace (unshare -m): the tmpfs is gone when the shell ends.
  const auto probe = run_command("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + run_dir + "' 2>&1");
  if (probe.exit_code != 0)
    GTEST_SKIP() << "needs unshare -m and a tmpfs mount (root or CAP_SYS_ADMIN in this container): " << probe.output;

  const std::string args = short_run(write_config(dir, run_dir));
  const std::string run = std::string("'") + GRPO_RUN_BINARY + "' " + args;
  // One checkpoint of the task model is 1.15 MB: in 2 MB the first fits, the second does not.
  std::ofstream(dir + "/disk_full.sh") << "R='" << run_dir << "'; O='" << out << "'\n"
                                       << "mount -t tmpfs -o size=2m tmpfs \"$R\" || exit 90\n"
                                       << run << " > \"$O/first.log\" 2>&1; echo $? > \"$O/first.rc\"\n"
                                       << "ls -A \"$R/checkpoints\" > \"$O/after_failure.ls\"\n"
                                       << "cp \"$R/run.log\" \"$O/first_run.log\"\n"
                                       << "mount -o remount,size=6m tmpfs \"$R\" || exit 91\n"
                                       << "mkdir \"$R/checkpoints/.step_000002.partial\"\n"
                                       << "dd if=/dev/zero of=\"$R/checkpoints/.step_000002.partial/optimizer.pt\" bs=4k 2>/dev/null\n"
                                       << "df -k \"$R\" | tail -1 | awk '{print $4}' > \"$O/free_kb\"\n"
                                       << run << " --resume > \"$O/second.log\" 2>&1; echo $? > \"$O/second.rc\"\n"
                                       << "ls -A \"$R/checkpoints\" > \"$O/final.ls\"\n";
  const auto script = run_command("unshare -m sh " + dir + "/disk_full.sh 2>&1");
  ASSERT_EQ(script.exit_code, 0) << script.output;

  const std::string first = read_file(out + "/first.log");
  EXPECT_EQ(read_file(out + "/first.rc"), "5\n") << first;
  const std::string reason = "cannot save the checkpoint of step 2 to " + run_dir + "/checkpoints/step_000002";
  EXPECT_TRUE(contains(first, reason)) << first;
  EXPECT_TRUE(contains(first, "No space left on device")) << first;
  EXPECT_FALSE(contains(first, "terminate") || contains(first, "frame #")) << first;
  const std::string log = read_file(out + "/first_run.log");
  EXPECT_TRUE(contains(log, "[error]") && contains(log, reason) && contains(log, "No space left on device")) << log;
  EXPECT_EQ(read_file(out + "/after_failure.ls"), "step_000001\n");

  EXPECT_EQ(read_file(out + "/free_kb"), "0\n") << "the stale staging folder did not fill the disk";
  const std::string second = read_file(out + "/second.log");
  EXPECT_EQ(read_file(out + "/second.rc"), "0\n") << second;
  EXPECT_TRUE(contains(second, "removed 1 unfinished checkpoint folder(s)") && contains(second, ".step_000002.partial"))
      << second;
  EXPECT_TRUE(contains(second, "resumed from " + run_dir + "/checkpoints/step_000001 (step 1")) << second;
  EXPECT_FALSE(contains(second, "skipping the checkpoint")) << second;
  EXPECT_EQ(read_file(out + "/final.ls"), "step_000002\nstep_000003\n");
}

// A damaged newest checkpoint is skipped with a warning saying why; --resume-from chooses a
// step, and an explicit step that is missing or damaged is an error, not a fallback.
TEST(CheckpointRecovery, DamagedNewestFallsBackAndResumeFromChoosesTheStep) {
  const std::string dir = fresh_test_dir("checkpoint_recovery");
  const std::string run_dir = dir + "/run";
  const std::string ckpt = run_dir + "/checkpoints/";
  const std::string args = short_run(write_config(dir, run_dir)) + " --set checkpoint.keep_last=0";
  int code = 0;
  std::string out = run_grpo(args, &code);
  ASSERT_EQ(code, 0) << out;

  grpo::testing::flip_middle_byte(ckpt + "step_000003/model.safetensors");
  const std::string damaged = read_file(ckpt + "step_000003/model.safetensors");
  out = run_grpo(args + " --resume", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "[warning] resume: skipping the checkpoint " + ckpt + "step_000003: " + ckpt +
                                "step_000003/model.safetensors: checksum (CRC-32C)"))
      << out;
  EXPECT_TRUE(contains(out, "falling back to " + ckpt + "step_000002")) << out;
  EXPECT_TRUE(contains(out, "resumed from " + ckpt + "step_000002 (step 2")) << out;
  EXPECT_TRUE(contains(out, "checkpoint " + ckpt + "step_000003 (final")) << out;  // saved anew
  // ... next to the damaged one, which is moved aside with a warning, not replaced (nothing deleted).
  const std::string aside = ckpt + "superseded/step_000003.before-step-3";
  EXPECT_TRUE(contains(out, "[warning] checkpoint " + ckpt + "step_000003 is of the step 3, being saved again (the run "
                            "resumed from an older one): moved to " + aside))
      << out;
  ASSERT_TRUE(fs::exists(aside + "/model.safetensors")) << out;
  EXPECT_TRUE(read_file(aside + "/model.safetensors") == damaged) << "the damaged checkpoint was not kept as it was";
  EXPECT_FALSE(read_file(ckpt + "step_000003/model.safetensors") == damaged) << "step 3 was not saved anew";

  out = run_grpo(args + " --resume-from 1", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "resumed from " + ckpt + "step_000001 (step 1")) << out;

  out = run_grpo(args + " --resume-from 7", &code);
  EXPECT_EQ(code, 3) << out;
  EXPECT_TRUE(contains(out, "run.resume_from: no complete checkpoint step_000007 in " + run_dir +
                                "/checkpoints (complete: step_000001, step_000002, step_000003)"))
      << out;

  grpo::testing::flip_middle_byte(ckpt + "step_000002/optimizer.pt");
  out = run_grpo(args + " --resume-from 2", &code);
  EXPECT_EQ(code, 5) << out;
  EXPECT_TRUE(contains(out, "run.resume_from = 2: " + ckpt + "step_000002/optimizer.pt: checksum (CRC-32C)")) << out;
  EXPECT_FALSE(contains(out, "resumed from")) << out;

  out = run_grpo(args + " --resume-from 0", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_TRUE(contains(out, "--resume-from takes a checkpoint's step >= 1, got 0")) << out;
}

// A --resume that its checks reject changes nothing in the run directory: another run.seed, or
// LoRA adapters of another rank (a configuration error found at the newest checkpoint, not a
// fallback through every older one), leave effective_config.yaml as the run wrote it, so the run
// still resumes from its own file. A run failing its checks on a fresh directory leaves only its
// log and lock. effective_config.yaml is written once the checks pass.
TEST(CheckpointRecovery, ARejectedResumeChangesNothing) {
  const std::string dir = fresh_test_dir("checkpoint_recovery");
  const std::string run_dir = dir + "/run";
  const std::string effective = run_dir + "/effective_config.yaml";
  const std::string lora = " --set model.lora.r=4 --set model.lora.target_modules=all-linear";
  const std::string args = short_run(write_config(dir, run_dir)) + lora + " --set train.steps=2";
  int code = 0;
  std::string out = run_grpo(args, &code);
  ASSERT_EQ(code, 0) << out;
  const std::string written = read_file(effective);
  ASSERT_TRUE(contains(written, "seed: 1") && contains(written, "r: 4")) << written;

  out = run_grpo(args + " --set train.steps=3 --set run.seed=7 --resume", &code);
  EXPECT_EQ(code, 3) << out;
  EXPECT_TRUE(contains(out, "run.seed: the checkpoint " + run_dir + "/checkpoints/step_000002 was written with run.seed 1"))
      << out;
  EXPECT_EQ(read_file(effective), written) << "a rejected --resume rewrote effective_config.yaml";

  out = run_grpo(args + " --set train.steps=3 --set model.lora.r=8 --resume", &code);
  EXPECT_EQ(code, 3) << out;
  EXPECT_TRUE(contains(out, "model.lora.r: " + run_dir + "/checkpoints/step_000002 holds adapters of rank 4 "
                            "(adapter_config.json); this run has model.lora.r 8"))
      << out;
  EXPECT_FALSE(contains(out, "skipping the checkpoint")) << "a rank mismatch is no damage: no fallback\n" << out;
  EXPECT_EQ(read_file(effective), written) << "a rejected --resume rewrote effective_config.yaml";

  // The run resumes from its own file, unchanged; the file then says what the run trained with.
  out = run_grpo("--config " + effective + " --set train.steps=3 --resume", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(contains(out, "resumed from " + run_dir + "/checkpoints/step_000002 (step 2")) << out;
  EXPECT_TRUE(contains(read_file(effective), "steps: 3")) << read_file(effective);

  // A fresh directory and a run its checks reject: the log (saying why) and the lock, nothing else.
  const std::string fresh = dir + "/fresh";
  out = run_grpo(args + " --set run.output_dir=" + fresh + " --set train.pack_length=4", &code);
  EXPECT_EQ(code, 3) << out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(fresh)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".lock", "run.log"})) << out;
  EXPECT_TRUE(contains(read_file(fresh + "/run.log"), "train.pack_length")) << read_file(fresh + "/run.log");
}

// While a run trains, a second grpo-run on its directory, fresh or resumed, exits 3 naming the
// first's PID; once the first is killed (SIGKILL: no clean-up of its own), the directory is free.
TEST(CheckpointRecovery, SecondRunOnALockedDirectoryExits3NamingThePid) {
  const std::string dir = fresh_test_dir("checkpoint_recovery");
  const std::string run_dir = dir + "/run";
  const std::string args = short_run(write_config(dir, run_dir));
  const auto started = run_command(std::string("'") + GRPO_RUN_BINARY + "' " + args + " --set train.steps=100000 --set checkpoint.save_freq=0 > " + dir +
                                   "/first.log 2>&1 & echo $!");
  const std::string pid = std::string(grpo::core::trim(started.output));
  ASSERT_FALSE(pid.empty());
  // The lock records "PID HOST" once it is taken (bounded wait: start-up takes about a second).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(fs::exists(run_dir + "/.lock") ? read_file(run_dir + "/.lock") : "", pid + " ") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int code = 0;
  const std::string fresh = run_grpo(args, &code);
  const int fresh_code = code;
  const std::string resumed = run_grpo(args + " --resume", &code);
  const int resumed_code = code;
  run_command("kill -9 " + pid + "; while kill -0 " + pid + " 2>/dev/null; do sleep 0.02; done");

  for (const auto& [output, exit_code] : {std::pair{fresh, fresh_code}, std::pair{resumed, resumed_code}}) {
    EXPECT_EQ(exit_code, 3) << output << read_file(dir + "/first.log");
    EXPECT_TRUE(contains(output, "run.output_dir '" + run_dir + "' is in use by another run: PID " + pid + " on ")) << output;
    EXPECT_TRUE(contains(output, run_dir + "/.lock")) << output;
  }
  EXPECT_FALSE(contains(read_file(run_dir + "/run.log"), "in use by another run")) << "the refused run wrote to the log";

  const std::string after = run_grpo(args + " --set train.steps=1", &code);
  EXPECT_EQ(code, 0) << after;
}

}  // namespace
