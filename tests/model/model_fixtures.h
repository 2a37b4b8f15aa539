// Access to the tiny reference checkpoints in tests/fixtures/models/ (made by an
// independent float64 PyTorch implementation, see docs/model-fixtures.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model/safetensors_torch.h"

namespace grpo::testing {

inline const std::vector<std::string>& fixture_models() {
  static const std::vector<std::string> names = {"qwen2", "qwen3", "llama"};
  return names;
}

inline std::string fixture_dir(const std::string& name) {
  return std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// reference.safetensors of a fixture as a name -> tensor map.
inline std::map<std::string, torch::Tensor> fixture_reference(const std::string& name) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [key, tensor] : core::load_safetensors(fixture_dir(name) + "/reference.safetensors"))
    out[key] = tensor;
  return out;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace grpo::testing
