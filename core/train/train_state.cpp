// Over 500 lines: saving, verifying and resuming share the file records and checks private to this file.
#include "core/train/train_state.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "core/config/config_access.h"
#include "core/dist/parallelism.h"
#include "core/metrics/crc32c.h"
#include "core/model/checkpoint.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/lora.h"
#include "core/model/safetensors_torch.h"
#include "core/optim/optimizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = kCheckpointStateFile;
constexpr const char* kOptimizerFile = "optimizer.pt";
constexpr const char* kRngFile = "rng.pt";
constexpr const char* kReferenceFile = "reference.safetensors";
constexpr const char* kRngKey = "cpu_generator_state";
constexpr const char* kLoraDropoutRngKey = "lora_dropout_generator_state";  // LoRA runs
constexpr const char* kSupersededFolder = "superseded";
// 2: "files" (sizes and checksums) added. Format 1 checkpoints (written before) still load,
// unverified: an upgrade must not strand a run's checkpoints.
constexpr int kStateFormat = 2;
constexpr int kStateFormatWithoutFiles = 1;

nlohmann::ordered_json state_json(const TrainerState& s) {
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
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& [name, f] : s.files) files[name] = {{"size", f.size}, {"crc32c", f.crc32c}};
  j["files"] = files;
  return j;
}

TrainerState parse_state(const std::string& path) {
  TrainerState s;
  try {
    const std::string text = read_file(path);
    if (auto error = json_nesting_error(text)) throw std::runtime_error(*error);
    const auto j = nlohmann::json::parse(text);
    const int format = j.value("format", 0);
    if (format != kStateFormat && format != kStateFormatWithoutFiles)
      throw std::runtime_error("format " + std::to_string(format) + " is not a supported one (" +
                               std::to_string(kStateFormatWithoutFiles) + " or " + std::to_string(kStateFormat) + ")");
    s.step = j.at("step").get<std::int64_t>();
    s.optimizer_steps = j.at("optimizer_steps").get<std::int64_t>();
    s.data.epoch = j.at("data_epoch").get<std::uint64_t>();
    s.data.offset = j.at("data_offset").get<std::uint64_t>();
    s.consecutive_nonfinite = j.at("consecutive_nonfinite").get<std::int64_t>();
    s.stale_batches_dropped = j.at("stale_batches_dropped").get<std::int64_t>();
    s.async_steps = j.at("async_steps").get<std::int64_t>();
    s.seed = j.at("seed").get<std::uint64_t>();
    if (format == kStateFormatWithoutFiles) return s;  // nothing recorded to verify (read_checkpoint warns)
    for (const auto& [name, f] : j.at("files").items()) {
      // Names are plain file names of this folder (the JSON is data: no paths out of it).
      if (name.empty() || name == "." || name == ".." || name == kStateFile || name.find('/') != std::string::npos)
        throw std::runtime_error("\"files\" lists '" + name + "', which is not a file of a checkpoint folder");
      s.files[name] = CheckpointFile{f.at("size").get<std::uint64_t>(), f.at("crc32c").get<std::uint32_t>()};
    }
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": " + e.what());
  }
  return s;
}

CheckpointFile describe_file(const fs::path& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw std::runtime_error("cannot open '" + path.string() + "'");
  CheckpointFile out;
  std::vector<char> buf(1 << 20);
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), file)) > 0) {
    out.crc32c = crc32c(buf.data(), n, out.crc32c);
    out.size += n;
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) throw std::runtime_error("cannot read '" + path.string() + "'");
  return out;
}

// Every file of a finished staging folder but the state file, with its size and checksum.
std::map<std::string, CheckpointFile> record_files(const fs::path& dir) {
  std::map<std::string, CheckpointFile> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kStateFile || !entry.is_regular_file()) continue;
    files[name] = describe_file(entry.path());
  }
  return files;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Sizes first (cheap), then checksums.
void verify_files(const fs::path& dir, const std::map<std::string, CheckpointFile>& files) {
  const std::string record = kStateFile;  // in the same folder as the file it names
  for (const auto& [name, f] : files) {
    const fs::path path = dir / name;
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw CheckpointError(path.string() + ": missing (" + record + " records it): " + ec.message());
    if (size != f.size)
      throw CheckpointError(path.string() + ": " + std::to_string(size) + " bytes, but " + record + " records " +
                            std::to_string(f.size));
  }
  for (const auto& [name, f] : files) {
    const fs::path path = dir / name;
    CheckpointFile found;
    try {
      found = describe_file(path);
    } catch (const std::exception& e) {
      throw CheckpointError(e.what());
    }
    if (found.crc32c != f.crc32c || found.size != f.size)
      throw CheckpointError(path.string() + ": checksum (CRC-32C) " + hex32(found.crc32c) + " differs from the " +
                            hex32(f.crc32c) + " recorded in " + record + ": the file is damaged");
  }
}

// A checkpoint read into memory and verified; nothing restored yet.
struct CheckpointData {
  TrainerState state;
  NamedTensorList policy;
  torch::serialize::InputArchive optimizer;
  torch::Tensor rng;
  torch::Tensor lora_dropout_rng;  // LoRA runs
  std::optional<NamedTensorList> reference;
};

// A checkpoint whose files verify but that another configuration wrote (whole model vs LoRA,
// another rank, scaling or targets): with `config` (resume), a ConfigError naming the key to set
// back, since every older checkpoint of the run was written the same way (no fallback); without,
// a CheckpointError.
void check_checkpoint_matches_config(const fs::path& d, const CheckpointContents& c, const sdk::ConfigValue* config) {
  auto fail = [&](std::initializer_list<const char*> key, const std::string& what) {
    if (config) fail_at_config_key(*config, key, d.string() + " " + what);
    throw CheckpointError(d.string() + ": " + what);
  };
  const bool holds_adapter = fs::exists(d / kAdapterConfigFile) && !fs::exists(d / "config.json");
  if (holds_adapter && !c.lora)
    fail({"model", "lora"}, "holds LoRA adapters (adapter_config.json), but this run trains every weight: set model.lora as "
                            "the run that wrote it did");
  if (!holds_adapter && c.lora)
    fail({"model", "lora"}, "holds a whole model, but this run trains LoRA adapters (model.lora): resume it without "
                            "model.lora, or start the adapters from scratch in a new run.output_dir");
  if (!c.lora) return;
  try {
    c.lora->check_peft_config(d.string());  // rank, scaling and targets as this run's
  } catch (const PeftConfigMismatch& e) {
    if (std::string(e.key()) == "r")
      fail({"model", "lora", "r"}, "holds adapters of rank " + e.theirs() + " (adapter_config.json); this run has model.lora.r " +
                                       e.ours() + ": resume with the rank the run was started with");
    fail({"model", "lora", e.key()}, std::string("was written by adapters this run's model.lora does not make: ") + e.what());
  } catch (const std::exception& e) {  // adapter_config.json that does not parse: damage
    throw CheckpointError(d.string() + ": " + e.what());
  }
}

// Every check that needs no change to the models: an error here leaves them as they were.
void read_checkpoint(const fs::path& d, const CheckpointContents& c, CheckpointData& out,
                     const sdk::ConfigValue* config = nullptr) {
  out.state = parse_state((d / kStateFile).string());
  if (out.state.files.empty())
    spdlog::warn("{}: written before checkpoints recorded sizes and checksums (trainer_state.json format {}): its files "
                 "are loaded unverified", d.string(), kStateFormatWithoutFiles);
  verify_files(d, out.state.files);  // damage first: a damaged file is no statement about the configuration
  auto file_error = [&](const char* file, const std::string& what) { return CheckpointError((d / file).string() + ": " + what); };
  check_checkpoint_matches_config(d, c, config);
  try {
    if (c.lora) {
      const fs::path weights = d / kAdapterWeightsFile;
      out.policy = load_safetensors(weights.string());
      check_peft_tensors((*c.policy)->config(), c.lora->settings(), out.policy, weights.string());
    } else {
      out.policy = load_checkpoint_tensors(d.string());
    }
  } catch (const std::exception& e) {
    throw CheckpointError(d.string() + ": " + e.what());
  }
  const std::string optimizer_file = c.shard_world > 0 ? optimizer_shard_file(c.shard_rank, c.shard_world) : kOptimizerFile;
  try {
    out.optimizer.load_from((d / optimizer_file).string());
    // A shard of another layout is refused here, before anything is restored.
    if (const auto* self_checking = dynamic_cast<const CheckedOptimizerState*>(c.optimizer))
      self_checking->check_state(out.optimizer);
  } catch (const c10::Error& e) {
    throw file_error(optimizer_file.c_str(), std::string("cannot load the optimizer state: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw file_error(optimizer_file.c_str(), std::string("cannot load the optimizer state: ") + e.what());
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from((d / kRngFile).string());
    archive.read(kRngKey, out.rng);
    at::detail::createCPUGenerator().set_state(out.rng);  // a scratch generator: checks the state's size
    if (c.lora) {
      archive.read(kLoraDropoutRngKey, out.lora_dropout_rng);
      at::detail::createCPUGenerator().set_state(out.lora_dropout_rng);
    }
  } catch (const c10::Error& e) {
    throw file_error(kRngFile, e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw file_error(kRngFile, e.what());
  }
  if (c.reference && fs::exists(d / kReferenceFile)) {
    try {
      out.reference = load_safetensors((d / kReferenceFile).string());
    } catch (const std::exception& e) {
      throw file_error(kReferenceFile, e.what());
    }
  }
}

void restore_checkpoint(const fs::path& d, CheckpointData& data, const CheckpointContents& c) {
  if (c.lora)
    c.lora->load_peft_state(data.policy, (d / kAdapterWeightsFile).string());
  else
    load_model_weights(*c.policy, data.policy, d.string());
  if (data.reference) load_model_weights(*c.reference, *data.reference, (d / kReferenceFile).string());
  const std::string optimizer_file = c.shard_world > 0 ? optimizer_shard_file(c.shard_rank, c.shard_world) : kOptimizerFile;
  try {
    c.optimizer->load(data.optimizer);
  } catch (const c10::Error& e) {
    throw CheckpointError((d / optimizer_file).string() + ": cannot restore the optimizer state: " + e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    throw CheckpointError((d / optimizer_file).string() + ": cannot restore the optimizer state: " + e.what());
  }
  if (c.lora) c.lora->set_dropout_rng_state(data.lora_dropout_rng);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle: shares the global state
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(data.rng);
}

// Why `d`'s optimizer state does not fit this run's layout (c.shard_world), or "".
std::string optimizer_layout_mismatch(const fs::path& d, const CheckpointContents& c) {
  int saved_world = 0;  // 0: optimizer.pt
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(d, ec)) {
    int r = 0, w = 0;
    if (std::sscanf(entry.path().filename().c_str(), "optimizer_shard_%d_of_%d.pt", &r, &w) == 2) saved_world = w;
  }
  const bool saved_whole = fs::exists(d / kOptimizerFile);
  if (c.shard_world == 0 && saved_world > 0)
    return "holds an optimizer state sharded over " + std::to_string(saved_world) +
           " ranks (dist.sharding); this run keeps one whole optimizer state: resume it with dist.sharding optimizer or "
           "gradients and " + std::to_string(saved_world) + " ranks (re-sharding is not supported)";
  if (c.shard_world > 0 && saved_whole)
    return "holds one whole optimizer state (dist.sharding: none); this run shards it over " +
           std::to_string(c.shard_world) + " ranks: resume it with dist.sharding none (re-sharding is not supported)";
  if (c.shard_world > 0 && saved_world > 0 && saved_world != c.shard_world)
    return "holds optimizer shards of " + std::to_string(saved_world) + " ranks; this run has " +
           std::to_string(c.shard_world) + ": resume it with " + std::to_string(saved_world) +
           " ranks (re-sharding to another world size is not supported)";
  return "";
}

// Moves the checkpoint folder `dir` to checkpoints/superseded/<name>.before-step-<step> (".2",
// ".3", ... when taken), never deleting it: it belongs to a history the run left when it resumed
// from an older checkpoint (--resume-from, or a fallback past a damaged one), and a damaged one
// may be worth a look.
void move_to_superseded(const fs::path& root, const fs::path& dir, std::int64_t step, const std::string& why) {
  const std::string name = dir.filename().string() + ".before-step-" + std::to_string(step);
  fs::path aside = root / kSupersededFolder / name;
  for (int n = 2; fs::exists(aside); ++n) aside = root / kSupersededFolder / (name + "." + std::to_string(n));
  std::error_code ec;
  fs::create_directories(aside.parent_path(), ec);
  if (!ec) fs::rename(dir, aside, ec);
  if (ec)
    throw CheckpointError("cannot move the checkpoint " + dir.string() + ", " + why + ", out of the way (to " +
                          aside.string() + "): " + ec.message());
  spdlog::warn("checkpoint {} is {} (the run resumed from an older one): moved to {}", dir.string(), why, aside.string());
}

std::string step_list(const std::vector<std::pair<std::int64_t, fs::path>>& all) {
  std::vector<std::string> names;
  for (const auto& [step, path] : all) names.push_back(checkpoint_step_name(step));
  return names.empty() ? std::string("none") : join(names, ", ");
}

}  // namespace

std::string optimizer_shard_file(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer_shard_%05d_of_%05d.pt", rank, world);
  return buf;
}

// A hidden ".step_..." folder: remove_checkpoint_staging clears it when a save was killed.
std::string optimizer_shards_path(const std::string& run_dir, std::int64_t step) {
  return (fs::path(checkpoint_root(run_dir)) / ("." + checkpoint_step_name(step) + ".shards")).string();
}

void prepare_optimizer_shards(const std::string& run_dir, std::int64_t step) {
  const std::string folder = optimizer_shards_path(run_dir, step);
  try {
    fs::create_directories(checkpoint_root(run_dir));
    remove_checkpoint_staging(run_dir);  // leftovers of a killed save
    fs::create_directories(folder);
  } catch (const std::exception& e) {
    throw CheckpointError("cannot prepare the folder of the optimizer shards " + folder + ": " + e.what());
  }
}

void save_optimizer_shard(const std::string& run_dir, std::int64_t step, torch::optim::Optimizer& optimizer, int rank,
                          int world) {
  const std::string path = (fs::path(optimizer_shards_path(run_dir, step)) / optimizer_shard_file(rank, world)).string();
  try {
    save_optimizer(optimizer, path);
  } catch (const std::exception& e) {
    throw CheckpointError("cannot save the optimizer shard " + path + ": " + e.what());
  }
}

TrainerState save_checkpoint(const std::string& run_dir, const TrainerState& state, const CheckpointContents& c,
                             std::int64_t keep_last) {
  const fs::path root = checkpoint_root(run_dir);
  const fs::path final_dir = checkpoint_path(run_dir, state.step);
  const fs::path staging = root / ("." + checkpoint_step_name(state.step) + ".partial");
  const fs::path shards = optimizer_shards_path(run_dir, state.step);
  TrainerState written = state;
  try {
    fs::create_directories(root);
    // Leftovers of a killed save (with sharding, prepare_optimizer_shards cleared them already
    // and the current shards are kept).
    if (c.shard_world == 0) remove_checkpoint_staging(run_dir);
    fs::remove_all(staging);
    if (c.lora) {
      // A PEFT adapter folder, with the tokenizer beside it as TRL saves one.
      fs::create_directories(staging);
      c.lora->save_peft_files(staging.string(), c.lora_base_model);
      if (c.tokenizer) {
        TokenizerFilesOptions tok;
        tok.chat_templates = c.chat_templates;
        write_tokenizer_files(staging.string(), *c.tokenizer, tok);
      }
    } else {
      SaveOptions options;
      options.tokenizer = c.tokenizer;
      options.chat_templates = c.chat_templates;
      options.generation_config_json = c.generation_config_json;
      save_model(staging.string(), *c.policy, options);
    }
    if (c.shard_world == 0) {
      save_optimizer(*c.optimizer, (staging / kOptimizerFile).string());
    } else {  // every rank's shard, saved by that rank (save_optimizer_shard)
      for (int r = 0; r < c.shard_world; ++r) {
        const std::string name = optimizer_shard_file(r, c.shard_world);
        if (!fs::exists(shards / name))
          throw CheckpointError("rank " + std::to_string(r) + "'s optimizer shard " + (shards / name).string() +
                                " is missing (with dist.sharding every rank writes its shard into the run directory: "
                                "it must be shared and writable by every rank)");
        fs::rename(shards / name, staging / name);
      }
      fsync_directory(staging.string());
    }
    {
      torch::serialize::OutputArchive archive;
      // LibTorch's CPU generator: its state is a CPU tensor by nature (whatever the model's device).
      archive.write(kRngKey, at::detail::getDefaultCPUGenerator().get_state());
      if (c.lora) archive.write(kLoraDropoutRngKey, c.lora->dropout_rng_state());
      save_archive(archive, (staging / kRngFile).string());
    }
    if (c.reference) save_safetensors((staging / kReferenceFile).string(), model_state_tensors(*c.reference));
    written.files = record_files(staging);
    atomic_write_file((staging / kStateFile).string(), state_json(written).dump(2) + "\n");
    // A folder of this step already there is of the history the run left (a damaged step the
    // resume fell back past, or a step after --resume-from's): kept aside, never replaced.
    if (fs::exists(final_dir))
      move_to_superseded(root, final_dir, state.step, "of the step " + std::to_string(state.step) + ", being saved again");
    replace_directory(staging.string(), final_dir.string());
    if (c.shard_world > 0) fs::remove_all(shards);
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::remove_all(shards, ec);
    throw CheckpointError("cannot save the checkpoint of step " + std::to_string(state.step) + " to " +
                          final_dir.string() + " (the checkpoints saved before are untouched): " + e.what());
  }

  // Checkpoints newer than this step belong to a history the run left when it resumed from an
  // older one (--resume-from, or a fallback past a damaged newest): from now on they would be
  // taken for the newest by the next --resume and by keep_last. They are moved, not deleted, to
  // checkpoints/superseded/ (a damaged one may be worth a look).
  bool moved = false;
  for (const auto& [newer_step, dir] : complete_checkpoints(run_dir)) {
    if (newer_step <= state.step) continue;
    move_to_superseded(root, dir, state.step, "newer than the step " + std::to_string(state.step) + " just saved");
    moved = true;
  }
  if (moved) fsync_directory(root.string());

  if (keep_last > 0) {
    auto all = complete_checkpoints(run_dir);
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < all.size(); ++i) {
      std::error_code ec;
      fs::remove_all(all[i].second, ec);
      if (ec) spdlog::warn("cannot remove the old checkpoint {} (checkpoint.keep_last): {}", all[i].second.string(), ec.message());
    }
  }
  return written;
}

TrainerState load_checkpoint(const std::string& dir, const CheckpointContents& c) {
  CheckpointData data;
  read_checkpoint(dir, c, data);
  restore_checkpoint(dir, data, c);
  return data.state;
}

void save_training_checkpoint(dist::Parallelism& parallel, const std::string& run_dir, const TrainerState& state,
                              const CheckpointContents& contents, std::int64_t keep_last) {
  if (!parallel.optimizer_per_rank()) {
    if (parallel.is_main()) save_checkpoint(run_dir, state, contents, keep_last);  // every rank holds the same weights and state
    return;
  }
  const auto whole = parallel.whole_model();  // rank 0 writes the whole model
  const std::string at = "checkpoint " + std::to_string(state.step);
  if (parallel.is_main()) prepare_optimizer_shards(run_dir, state.step);
  parallel.barrier(at + ": folder prepared");
  save_optimizer_shard(run_dir, state.step, *contents.optimizer, parallel.rank(), parallel.world_size());
  parallel.barrier(at + ": optimizer shards written");
  if (parallel.is_main()) save_checkpoint(run_dir, state, contents, keep_last);
  parallel.barrier(at + ": complete");
}

bool resume_from_checkpoint(const sdk::ConfigValue& config, const std::string& run_dir, std::uint64_t seed,
                            std::int64_t step, const CheckpointContents& contents, TrainerState& state) {
  const auto all = complete_checkpoints(run_dir);
  std::vector<std::pair<std::int64_t, fs::path>> candidates;
  if (step > 0) {
    for (const auto& entry : all)
      if (entry.first == step) candidates.push_back(entry);
    if (candidates.empty())
      fail_at_config_key(config, {"run", "resume_from"},
                         "no complete checkpoint " + checkpoint_step_name(step) + " in " + checkpoint_root(run_dir) +
                             " (complete: " + step_list(all) + ")");
  } else {
    if (all.empty()) {
      spdlog::warn("resume: no complete checkpoint in {}; starting from step 0", checkpoint_root(run_dir));
      return false;
    }
    candidates.assign(all.rbegin(), all.rend());
  }
  std::vector<std::string> failures;
  for (const auto& [candidate_step, dir] : candidates) {
    // A checkpoint of another optimizer layout cannot be resumed by this run: no fallback.
    if (const std::string why = optimizer_layout_mismatch(dir, contents); !why.empty())
      fail_at_config_key(config, {"dist", "sharding"}, dir.string() + " " + why);
    try {
      CheckpointData data;
      read_checkpoint(dir, contents, data, &config);
      if (data.state.step != candidate_step)
        throw CheckpointError((dir / kStateFile).string() + ": records step " + std::to_string(data.state.step) +
                              ", not the folder's step " + std::to_string(candidate_step));
      if (data.state.seed != seed)
        fail_at_config_key(config, {"run", "seed"}, "the checkpoint " + dir.string() + " was written with run.seed " +
                                                       std::to_string(data.state.seed) + "; resume with the same seed");
      restore_checkpoint(dir, data, contents);
      state = std::move(data.state);
    } catch (const CheckpointError& e) {
      if (step > 0) throw CheckpointError("run.resume_from = " + std::to_string(step) + ": " + e.what());
      spdlog::warn("resume: skipping the checkpoint {}: {}", dir.string(), e.what());
      failures.push_back(checkpoint_step_name(candidate_step) + ": " + e.what());
      continue;
    }
    if (!failures.empty())
      spdlog::warn("resume: {} newer checkpoint(s) could not be loaded; falling back to {}", failures.size(), dir.string());
    spdlog::info("resumed from {} (step {}, optimizer step {}, data epoch {} offset {}; {} files verified)", dir.string(),
                 state.step, state.optimizer_steps, state.data.epoch, state.data.offset, state.files.size());
    return true;
  }
  throw CheckpointError("resume: none of the " + std::to_string(candidates.size()) + " complete checkpoints in " +
                        checkpoint_root(run_dir) + " can be loaded: " + join(failures, "; "));
}

}  // namespace grpo::core
