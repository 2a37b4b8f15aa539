// Where the tiny reference checkpoints live (tests/fixtures/models/, docs/model-fixtures.md).
// Torch-free, so that CLI tests can name them without LibTorch's headers.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace grpo::testing {

// Every causal-LM fixture: the first three (generate.py) and one per family added since
// (generate_families.py; llama_dynamic is Llama with dynamic NTK RoPE).
inline const std::vector<std::string>& fixture_models() {
  static const std::vector<std::string> names = {"qwen2",  "qwen3", "llama",     "mistral",   "gemma2",
                                                 "gemma3", "phi3",  "olmo2",     "qwen2_moe", "qwen3_moe",
                                                 "llama_dynamic"};
  return names;
}

// The mixture-of-experts fixtures (their references hold routing decisions too).
inline const std::vector<std::string>& moe_fixture_models() {
  static const std::vector<std::string> names = {"qwen2_moe", "qwen3_moe"};
  return names;
}

// The checkout the fixtures are read from: the one the tests were built in, or
// GRPO_TEST_SOURCE_DIR when set (a prebuilt GPU bundle runs on another machine, in another
// folder: scripts/gpu-bundle.sh).
inline std::string repo_dir() {
  const char* env = std::getenv("GRPO_TEST_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(GRPO_SOURCE_DIR);
}

inline std::string fixture_dir(const std::string& name) { return repo_dir() + "/tests/fixtures/models/" + name; }

}  // namespace grpo::testing
