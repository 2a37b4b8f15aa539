// Where a run keeps its checkpoints: RUN_DIR/checkpoints/step_000010/, one Hugging Face model
// folder per saved step (core/model/checkpoint.h writes its model files; the trainer adds its
// resume state, core/train/train_state.h). A folder counts as complete only once its
// trainer_state.json exists, which the trainer writes last. A save in progress lives under a
// hidden name (".step_000010.partial" and the like, all starting with "."). Used by the
// trainer, by `model.path: RUN_DIR` (the newest checkpoint of a run) and by the apps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace grpo::core {

inline constexpr const char* kCheckpointStateFile = "trainer_state.json";

std::string checkpoint_root(const std::string& run_dir);                     // RUN_DIR/checkpoints
std::string checkpoint_step_name(std::int64_t step);                         // step_000010
std::string checkpoint_path(const std::string& run_dir, std::int64_t step);  // .../step_000010

// Complete checkpoints (step, folder), oldest first.
std::vector<std::pair<std::int64_t, std::filesystem::path>> complete_checkpoints(const std::string& run_dir);

// The newest complete checkpoint folder under RUN_DIR/checkpoints, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// Removes what interrupted saves left in RUN_DIR/checkpoints (the hidden ".step_*" staging
// folders) and returns their names, after putting back a step_N that an interrupted folder swap
// (replace_directory without RENAME_EXCHANGE) left only under a staging name. Only for the run
// that holds RUN_DIR's lock (apps/cli/app_common.h, prepare_run_dir): another run's save in
// progress looks the same.
// Throws std::filesystem::filesystem_error when one cannot be removed.
std::vector<std::string> remove_checkpoint_staging(const std::string& run_dir);

}  // namespace grpo::core
