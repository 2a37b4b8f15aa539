// The run directory's own files, apart from the checkpoints (core/model/checkpoint_dirs.h):
// run.output_dir checked before anything is created, and the effective configuration. Torch-free:
// grpo-run's and grpo-sft's start (apps/cli) and --validate use it.
#pragma once

#include <string>

#include "grpo/sdk/config_value.h"

namespace grpo::core {

// run.output_dir, checked without creating anything: a path the system can hold (each name <=
// the file system's NAME_MAX, the whole < PATH_MAX) that is a writable folder or can be created
// as one under the nearest existing folder. Returns it; a ConfigError naming run.output_dir
// otherwise. --validate and a run (before it creates the folder) say the same.
std::string check_run_output_dir(const sdk::ConfigValue& config);

// RUN_DIR/effective_config.yaml: the configuration a run trains with (defaults < files < --set).
// Written (atomically) once every check before the first step has passed, the resume's too: a
// run rejected at its checks leaves the file of the run it was meant to continue as it was.
inline constexpr const char* kEffectiveConfigFile = "effective_config.yaml";
void write_effective_config(const std::string& run_dir, const sdk::ConfigValue& config);

}  // namespace grpo::core
