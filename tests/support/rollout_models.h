// The tiny reference checkpoints of tests/fixtures/models with a tokenizer beside them (the
// demo byte-level tokenizer plus merges: 300 ids, the models' vocabulary), for tests that
// generate text: the rollout engine, grpo-generate.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "tests/support/fixture_models.h"

namespace grpo::testing {

// tokenizer.json text with exactly 300 ids: 256 bytes, 3 specials, 41 merges.
inline std::string rollout_tokenizer_json() {
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz";
  for (char c : letters) merges.push_back({std::string(1, ' '), std::string(1, c)});  // " e", " t", ...
  for (std::size_t i = 0; merges.size() < 41; ++i) merges.push_back({std::string(1, letters[i]), std::string(1, letters[i + 1])});
  return core::make_byte_level_tokenizer_json(core::default_demo_special_tokens(), merges);
}

// A copy of fixture `name` with tokenizer.json beside it. ctest runs tests as parallel
// processes, so the folder is built under a private name and renamed into place; a process
// that loses the race uses the winner's (identical) folder.
inline std::string rollout_model_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GRPO_TEST_TMP_DIR) / "rollout-models" / name;
  if (fs::exists(dir)) return dir.string();
  const fs::path staging = dir.string() + ".staging." + std::to_string(::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(fs::path(fixture_dir(name)) / f, staging / f);
  core::atomic_write_file((staging / "tokenizer.json").string(), rollout_tokenizer_json());
  std::error_code ec;
  fs::rename(staging, dir, ec);
  if (ec) fs::remove_all(staging);  // another process won
  if (!fs::exists(dir / "tokenizer.json")) throw std::runtime_error("could not create " + dir.string() + ": " + ec.message());
  return dir.string();
}

}  // namespace grpo::testing
