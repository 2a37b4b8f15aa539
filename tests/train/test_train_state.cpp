// Trainer checkpoints (core/train/train_state.h): every field of the state and every file's
// record survive a save and a load, LibTorch's default generator is restored, a damaged file is
// rejected before anything is restored, resume falls back past checkpoints that do not load (but
// not from an explicit step), and a failed save leaves no staging folder and the earlier
// checkpoints intact. End-to-end runs of the same (grpo-run processes) are in
// test_checkpoint_recovery.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/model/checkpoint.h"
#include "core/optim/optimizer.h"
#include "core/train/train_state.h"
#include "core/util/fs.h"
#include "tests/metrics/tfevents_reader.h"
#include "tests/support/error_of.h"
#include "tests/support/file_damage.h"
#include "tests/support/test_dir.h"
#include "tests/train/trainer_fixtures.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::core;
using grpo::testing::error_of;
using grpo::testing::flip_middle_byte;

// A policy with its optimizer, as the trainer holds them.
struct Policy {
  explicit Policy(std::uint64_t seed) : model(grpo::testing::tiny_test_model(seed)) {
    OptimizerSettings settings;
    settings.learning_rate = 1e-2;
    optimizer = make_adamw(*model, settings);
    contents.policy = &model;
    contents.optimizer = optimizer.get();
  }
  // One AdamW step on gradients drawn from `seed` (moments and step counts become non-zero).
  void step(std::uint64_t seed) {
    torch::manual_seed(seed);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::randn_like(p);
    optimizer->step();
  }
  std::vector<torch::Tensor> weights() {
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
    return out;
  }
  CausalLM model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  CheckpointContents contents;
};

bool same_weights(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// Every field set to a value of its own (none the default).
TrainerState sample_state(std::int64_t step) {
  TrainerState s;
  s.step = step;
  s.optimizer_steps = 13;
  s.data.epoch = 2;
  s.data.offset = 5;
  s.consecutive_nonfinite = 1;
  s.stale_batches_dropped = 4;
  s.async_steps = 2;
  s.seed = 42;
  return s;
}

const grpo::sdk::ConfigValue& default_configuration() {
  static const grpo::sdk::ConfigValue config = load_config(ConfigSources{});
  return config;
}

std::string file_text(const fs::path& path) { return read_file(path.string()); }

TEST(TrainerCheckpoint, SaveThenLoadRestoresEveryFieldAndRecordsEveryFile) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy saved(1);
  saved.step(10);
  saved.step(11);
  TrainerState state = sample_state(7);
  state.files["stale.bin"] = CheckpointFile{1, 2};  // what the caller passes is ignored
  const TrainerState written = save_checkpoint(run, state, saved.contents, 0);
  const fs::path dir = checkpoint_path(run, 7);

  // The records: every file of the folder but trainer_state.json, with its size and the CRC-32C
  // of its bytes computed bit by bit (tests/metrics/tfevents_reader.h).
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "trainer_state.json") continue;
    names.insert(name);
    const std::string bytes = file_text(entry.path());
    ASSERT_TRUE(written.files.count(name)) << name;
    EXPECT_EQ(written.files.at(name).size, bytes.size()) << name;
    EXPECT_EQ(written.files.at(name).crc32c, grpo::testing::reference_crc32c(bytes.data(), bytes.size())) << name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "generation_config.json", "model.safetensors", "optimizer.pt",
                                          "rng.pt"}));
  EXPECT_EQ(written.files.size(), names.size());

  Policy loaded(2);  // other weights, a fresh optimizer
  const TrainerState back = load_checkpoint(dir.string(), loaded.contents);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.optimizer_steps, 13);
  EXPECT_EQ(back.data.epoch, 2u);
  EXPECT_EQ(back.data.offset, 5u);
  EXPECT_EQ(back.consecutive_nonfinite, 1);
  EXPECT_EQ(back.stale_batches_dropped, 4);
  EXPECT_EQ(back.async_steps, 2);
  EXPECT_EQ(back.seed, 42u);
  ASSERT_EQ(back.files.size(), written.files.size());
  for (const auto& [name, f] : written.files) {
    ASSERT_TRUE(back.files.count(name)) << name;
    EXPECT_EQ(back.files.at(name).size, f.size) << name;
    EXPECT_EQ(back.files.at(name).crc32c, f.crc32c) << name;
  }
  EXPECT_TRUE(same_weights(loaded.weights(), saved.weights()));
  // The optimizer's moments and step counts: the same next step gives the same weights.
  saved.step(12);
  loaded.step(12);
  EXPECT_TRUE(same_weights(loaded.weights(), saved.weights()));
}

// Nothing built in draws from LibTorch's global generator during training, but a plugin may.
TEST(TrainerCheckpoint, RestoresLibTorchsDefaultGenerator) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy policy(1);
  torch::manual_seed(123);
  (void)torch::rand({5});
  save_checkpoint(run, sample_state(1), policy.contents, 0);
  const torch::Tensor after_save = torch::rand({8});
  torch::manual_seed(999);
  ASSERT_FALSE(torch::equal(torch::rand({8}), after_save));
  torch::manual_seed(999);
  load_checkpoint(checkpoint_path(run, 1), policy.contents);
  EXPECT_TRUE(torch::equal(torch::rand({8}), after_save));
}

// A checkpoint of the previous format (1: no "files" records, as grpo-run wrote them before
// sizes and checksums) still resumes, unverified: an upgrade must not strand a run.
TEST(TrainerCheckpoint, PreviousFormatWithoutRecordsStillLoads) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy saved(1);
  saved.step(10);
  save_checkpoint(run, sample_state(3), saved.contents, 0);
  const fs::path state_file = checkpoint_path(run, 3) + "/trainer_state.json";
  std::ofstream(state_file) << R"({"format": 1, "step": 3, "optimizer_steps": 13, "data_epoch": 2, "data_offset": 5,
    "consecutive_nonfinite": 1, "stale_batches_dropped": 4, "async_steps": 2, "seed": 42})";
  Policy loaded(2);
  const TrainerState back = load_checkpoint(checkpoint_path(run, 3), loaded.contents);
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.optimizer_steps, 13);
  EXPECT_TRUE(back.files.empty());
  EXPECT_TRUE(same_weights(loaded.weights(), saved.weights()));
  std::ofstream(state_file) << R"({"format": 7, "step": 3})";
  const std::string msg = error_of<CheckpointError>([&] { load_checkpoint(checkpoint_path(run, 3), loaded.contents); });
  EXPECT_NE(msg.find("format 7 is not a supported one (1 or 2)"), std::string::npos) << msg;
}

// After a resume from an older step, the first save moves the newer checkpoints (an abandoned
// history) to checkpoints/superseded/: the next --resume and keep_last see only this run's.
TEST(TrainerCheckpoint, FirstSaveAfterAnOlderResumeSetsNewerCheckpointsAside) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy policy(1);
  for (std::int64_t step : {1, 2, 3}) save_checkpoint(run, sample_state(step), policy.contents, 0);
  // Resumed from step 1; its next checkpoint is step 2, with keep_last 1.
  save_checkpoint(run, sample_state(2), policy.contents, 1);
  const auto left = complete_checkpoints(run);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].first, 2);
  EXPECT_EQ(latest_checkpoint(run), checkpoint_path(run, 2));
  const fs::path aside = fs::path(checkpoint_root(run)) / "superseded" / "step_000003.before-step-2";
  EXPECT_TRUE(fs::exists(aside / "trainer_state.json")) << "moved, not deleted";
  // The same step set aside again later gets a name of its own.
  save_checkpoint(run, sample_state(3), policy.contents, 0);
  save_checkpoint(run, sample_state(2), policy.contents, 0);
  EXPECT_TRUE(fs::exists(aside.string() + ".2/trainer_state.json"));
  EXPECT_EQ(latest_checkpoint(run), checkpoint_path(run, 2));
}

// A folder swap without RENAME_EXCHANGE interrupted between its two renames leaves step N
// only under staging names; the start-up clean-up puts the newest complete copy back first.
TEST(TrainerCheckpoint, StartUpCleanUpRestoresAStepAnInterruptedSwapLeftAside) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy policy(1);
  for (std::int64_t step : {1, 2}) save_checkpoint(run, sample_state(step), policy.contents, 0);
  const fs::path root = checkpoint_root(run);
  // Step 2: new copy complete under .step_000002.partial, old one moved aside.
  fs::rename(root / "step_000002", root / ".step_000002.partial.old");
  fs::copy(root / ".step_000002.partial.old", root / ".step_000002.partial", fs::copy_options::recursive);
  std::ofstream(root / ".step_000002.partial" / "marker") << "new";
  // Step 1: only the old copy, the new one never got its trainer_state.json.
  fs::rename(root / "step_000001", root / ".step_000001.partial.old");
  fs::create_directories(root / ".step_000001.partial");
  // A plain killed save of step 3.
  fs::create_directories(root / ".step_000003.partial");

  remove_checkpoint_staging(run);
  EXPECT_TRUE(fs::exists(root / "step_000002" / "marker")) << "the complete new copy is the one restored";
  EXPECT_TRUE(fs::exists(root / "step_000001" / "trainer_state.json"));
  for (const auto& entry : fs::directory_iterator(root))
    EXPECT_NE(entry.path().filename().string().rfind(".step_", 0), 0u) << entry.path();
  EXPECT_EQ(complete_checkpoints(run).size(), 2u);
}

// Each kind of damage is found while verifying, before anything is restored.
TEST(TrainerCheckpoint, DamagedFileIsRejectedBeforeTheModelChanges) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy saved(1);
  saved.step(10);
  const fs::path dir = checkpoint_path(run, 1);
  struct Damage {
    std::string file, expected;
    std::function<void(const fs::path&)> apply;
  };
  const std::vector<Damage> damages = {
      {"model.safetensors", "checksum (CRC-32C)", flip_middle_byte},
      {"optimizer.pt", "bytes, but", [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) - 1); }},
      {"rng.pt", "missing", [](const fs::path& p) { fs::remove(p); }},
      {"trainer_state.json", "trainer_state.json", [](const fs::path& p) { std::ofstream(p, std::ios::trunc) << "{\"format\": 2,"; }},
  };
  for (const auto& damage : damages) {
    SCOPED_TRACE(damage.file);
    save_checkpoint(run, sample_state(1), saved.contents, 0);
    damage.apply(dir / damage.file);
    Policy other(2);
    const auto before = other.weights();
    const std::string msg = error_of<CheckpointError>([&] { load_checkpoint(dir.string(), other.contents); });
    EXPECT_NE(msg.find((dir / damage.file).string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(damage.expected), std::string::npos) << msg;
    EXPECT_TRUE(same_weights(other.weights(), before)) << "the model changed";
  }
}

class TrainerResumeChoice : public ::testing::Test {
 protected:
  // Checkpoints of steps 1, 2 and 3, each after one more optimizer step.
  void SetUp() override {
    run_ = grpo::testing::fresh_test_dir("train_state");
    for (std::int64_t step = 1; step <= 3; ++step) {
      saved_.step(static_cast<std::uint64_t>(step));
      weights_[step] = saved_.weights();
      TrainerState s = sample_state(step);
      s.seed = 7;
      save_checkpoint(run_, s, saved_.contents, 0);
    }
  }
  bool resume(std::int64_t step, Policy& policy, TrainerState& state) {
    return resume_from_checkpoint(default_configuration(), run_, 7, step, policy.contents, state);
  }
  fs::path dir(std::int64_t step) const { return checkpoint_path(run_, step); }
  std::string run_;
  Policy saved_{1};
  std::map<std::int64_t, std::vector<torch::Tensor>> weights_;
};

TEST_F(TrainerResumeChoice, NewestThatLoadsIsUsed) {
  flip_middle_byte(dir(3) / "optimizer.pt");
  std::ofstream(dir(2) / "trainer_state.json", std::ios::trunc) << "not json";
  Policy policy(5);
  TrainerState state;
  ASSERT_TRUE(resume(0, policy, state));
  EXPECT_EQ(state.step, 1);
  EXPECT_TRUE(same_weights(policy.weights(), weights_[1]));
}

TEST_F(TrainerResumeChoice, UndamagedNewestIsUsed) {
  Policy policy(5);
  TrainerState state;
  ASSERT_TRUE(resume(0, policy, state));
  EXPECT_EQ(state.step, 3);
  EXPECT_TRUE(same_weights(policy.weights(), weights_[3]));
}

TEST_F(TrainerResumeChoice, ExplicitStepIsLoadedWithoutFallback) {
  Policy policy(5);
  TrainerState state;
  ASSERT_TRUE(resume(2, policy, state));
  EXPECT_EQ(state.step, 2);
  EXPECT_TRUE(same_weights(policy.weights(), weights_[2]));

  flip_middle_byte(dir(2) / "model.safetensors");
  Policy other(6);
  const auto before = other.weights();
  std::string msg = error_of<CheckpointError>([&] { resume(2, other, state); });
  EXPECT_NE(msg.find("run.resume_from = 2: " + (dir(2) / "model.safetensors").string()), std::string::npos) << msg;
  EXPECT_TRUE(same_weights(other.weights(), before));

  msg = error_of([&] { resume(5, other, state); });  // a configuration error
  EXPECT_NE(msg.find("run.resume_from"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no complete checkpoint step_000005"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(complete: step_000001, step_000002, step_000003)"), std::string::npos) << msg;
}

TEST_F(TrainerResumeChoice, NoCheckpointThatLoadsIsAnErrorNamingEach) {
  for (std::int64_t step = 1; step <= 3; ++step) fs::remove(dir(step) / "rng.pt");
  Policy policy(5);
  TrainerState state;
  const std::string msg = error_of<CheckpointError>([&] { resume(0, policy, state); });
  EXPECT_NE(msg.find("none of the 3 complete checkpoints"), std::string::npos) << msg;
  for (const char* name : {"step_000001: ", "step_000002: ", "step_000003: "})
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
}

TEST_F(TrainerResumeChoice, AnotherSeedIsAConfigErrorNotAFallback) {
  Policy policy(5);
  TrainerState state;
  const std::string msg =
      error_of([&] { resume_from_checkpoint(default_configuration(), run_, 8, 0, policy.contents, state); });
  EXPECT_NE(msg.find("run.seed 7"), std::string::npos) << msg;
}

TEST(TrainerCheckpoint, NoCheckpointStartsFresh) {
  Policy policy(5);
  TrainerState state;
  EXPECT_FALSE(resume_from_checkpoint(default_configuration(), grpo::testing::fresh_test_dir("train_state"), 1, 0,
                                      policy.contents, state));
}

// A save that cannot write (here: a file size limit, EFBIG, as a full disk gives ENOSPC) fails
// with an error naming the file, removes its staging folder and leaves the step-1 checkpoint
// loadable; the failure inside LibTorch's archive writer (optimizer.pt) does not abort.
TEST(TrainerCheckpoint, FailedSaveRemovesItsStagingAndKeepsEarlierCheckpoints) {
  const std::string run = grpo::testing::fresh_test_dir("train_state");
  Policy policy(1);
  policy.step(1);
  save_checkpoint(run, sample_state(1), policy.contents, 0);
  const std::uint64_t weights_bytes = fs::file_size(checkpoint_path(run, 1) + "/model.safetensors");
  ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  // Stops the save at model.safetensors, then (the weights fit) at optimizer.pt.
  for (const auto& [limit, file] : std::vector<std::pair<std::uint64_t, std::string>>{
           {4096, "model.safetensors"}, {weights_bytes + 1024, "optimizer.pt"}}) {
    SCOPED_TRACE(file);
    rlimit small = original;
    small.rlim_cur = limit;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    std::string msg;
    try {
      save_checkpoint(run, sample_state(2), policy.contents, 0);
    } catch (const CheckpointError& e) {
      msg = e.what();
    }
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &original), 0);
    EXPECT_NE(msg.find("cannot save the checkpoint of step 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
    std::vector<std::string> entries;
    for (const auto& entry : fs::directory_iterator(checkpoint_root(run))) entries.push_back(entry.path().filename().string());
    EXPECT_EQ(entries, std::vector<std::string>{"step_000001"});
  }
  Policy other(2);
  EXPECT_EQ(load_checkpoint(checkpoint_path(run, 1), other.contents).step, 1);
}

}  // namespace
