// Where the tiny reference checkpoints live (tests/fixtures/models/, docs/model-fixtures.md).
// Torch-free, so that CLI tests can name them without LibTorch's headers.
#pragma once

#include <string>
#include <vector>

namespace grpo::testing {

inline const std::vector<std::string>& fixture_models() {
  static const std::vector<std::string> names = {"qwen2", "qwen3", "llama"};
  return names;
}

inline std::string fixture_dir(const std::string& name) {
  return std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

}  // namespace grpo::testing
