#include "core/train/train_state.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/safetensors_torch.h"
#include "core/config/config_access.h"
#include "core/train/optimizer.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"

namespace grpo::core {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = kCheckpointStateFile;
constexpr const char* kOptimizerFile = "optimizer.pt";
constexpr const char* kRngFile = "rng.pt";
constexpr const char* kReferenceFile = "reference.safetensors";
constexpr int kStateFormat = 1;

nlohmann::json state_json(const TrainerState& s) {
  nlohmann::ordered_json j;
  j["format"] = kStateFormat;
  j["step"] = s.step;
  j["optimizer_steps"] = s.optimizer_steps;
  j["data_epoch"] = s.data.epoch;
  j["data_offset"] = s.data.offset;
  j["consecutive_nonfinite"] = s.consecutive_nonfinite;
  j["stale_batches_dropped"] = s.stale_batches_dropped;
  j["async_steps"] = s.async_steps;
  j["seed"] = s.seed;
  return j;
}

}  // namespace

void save_checkpoint(const std::string& run_dir, const TrainerState& state, const CheckpointContents& c,
                     std::int64_t keep_last) {
  const fs::path root = checkpoint_root(run_dir);
  fs::create_directories(root);
  for (const auto& entry : fs::directory_iterator(root))  // leftovers of a killed save
    if (entry.path().filename().string().rfind(".step_", 0) == 0) fs::remove_all(entry.path());

  const fs::path final_dir = checkpoint_path(run_dir, state.step);
  const fs::path staging = root / ("." + checkpoint_step_name(state.step) + ".partial");
  SaveOptions options;
  options.tokenizer = c.tokenizer;
  options.chat_template_name = c.chat_template_name;
  options.generation_config_json = c.generation_config_json;
  save_model(staging.string(), *c.policy, options);
  save_optimizer(*c.optimizer, (staging / kOptimizerFile).string());
  {
    torch::serialize::OutputArchive archive;
    // LibTorch's CPU generator: its state is a CPU tensor by nature (whatever the model's device).
    archive.write("cpu_generator_state", at::detail::getDefaultCPUGenerator().get_state());
    archive.save_to((staging / kRngFile).string());
  }
  if (c.reference) save_safetensors((staging / kReferenceFile).string(), model_state_tensors(*c.reference));
  atomic_write_file((staging / kStateFile).string(), state_json(state).dump(2) + "\n");
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-run of the same step
  fs::rename(staging, final_dir);

  if (keep_last > 0) {
    auto all = complete_checkpoints(run_dir);
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < all.size(); ++i) fs::remove_all(all[i].second);
  }
}

TrainerState load_checkpoint(const std::string& dir, const CheckpointContents& c) {
  const fs::path d(dir);
  const std::string state_path = (d / kStateFile).string();
  TrainerState s;
  try {
    const std::string text = read_file(state_path);
    if (auto error = json_nesting_error(text)) throw std::runtime_error(*error);
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", 0) != kStateFormat)
      throw std::runtime_error("format " + std::to_string(j.value("format", 0)) + " is not the supported " +
                               std::to_string(kStateFormat));
    s.step = j.at("step").get<std::int64_t>();
    s.optimizer_steps = j.at("optimizer_steps").get<std::int64_t>();
    s.data.epoch = j.at("data_epoch").get<std::uint64_t>();
    s.data.offset = j.at("data_offset").get<std::uint64_t>();
    s.consecutive_nonfinite = j.at("consecutive_nonfinite").get<std::int64_t>();
    s.stale_batches_dropped = j.at("stale_batches_dropped").get<std::int64_t>();
    s.async_steps = j.at("async_steps").get<std::int64_t>();
    s.seed = j.at("seed").get<std::uint64_t>();
  } catch (const std::exception& e) {
    throw std::runtime_error(state_path + ": " + e.what());
  }
  load_model_weights(*c.policy, load_checkpoint_tensors(dir), dir);
  load_optimizer(*c.optimizer, (d / kOptimizerFile).string());
  try {
    torch::serialize::InputArchive archive;
    archive.load_from((d / kRngFile).string());
    torch::Tensor rng;
    archive.read("cpu_generator_state", rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle: shares the global state
    generator.set_state(rng);
  } catch (const c10::Error& e) {
    throw std::runtime_error((d / kRngFile).string() + ": " + e.what_without_backtrace());
  }
  if (c.reference && fs::exists(d / kReferenceFile))
    load_model_weights(*c.reference, load_safetensors((d / kReferenceFile).string()), (d / kReferenceFile).string());
  return s;
}

bool resume_from_latest_checkpoint(const sdk::ConfigValue& config, const std::string& run_dir, std::uint64_t seed,
                                   const CheckpointContents& contents, TrainerState& state) {
  const auto latest = latest_checkpoint(run_dir);
  if (!latest) {
    spdlog::warn("--resume: no complete checkpoint in {}; starting from step 0", checkpoint_root(run_dir));
    return false;
  }
  state = load_checkpoint(*latest, contents);
  if (state.seed != seed)
    fail_at_config_key(config, {"run", "seed"}, "the checkpoint " + *latest + " was written with run.seed " +
                                                   std::to_string(state.seed) + "; resume with the same seed");
  spdlog::info("resumed from {} (step {}, optimizer step {}, data epoch {} offset {})", *latest, state.step,
               state.optimizer_steps, state.data.epoch, state.data.offset);
  return true;
}

}  // namespace grpo::core
