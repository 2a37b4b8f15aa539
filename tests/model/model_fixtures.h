// Access to the tiny reference checkpoints in tests/fixtures/models/ (made by an
// independent float64 PyTorch implementation, see docs/model-fixtures.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model/safetensors_torch.h"
#include "tests/support/fixture_models.h"

namespace grpo::testing {

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
