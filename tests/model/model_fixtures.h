// Access to the tiny reference checkpoints in tests/fixtures/models/ and to the two references
// the model tests hold them to: the committed float64 one (an independent implementation,
// docs/model-fixtures.md) and transformers' own, which the ctest reference.transformers.write
// produces (tests/reference/models/transformers_reference.py) before the `Transformers/*`
// instances run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/safetensors_torch.h"
#include "tests/support/fixture_models.h"

namespace grpo::testing {

enum class Reference { kFloat64, kTransformers };

// One parity case: a fixture model and the reference it is held to.
struct FixtureCase {
  std::string model;
  Reference reference = Reference::kFloat64;
};

// How gtest prints a case (test lists, failures): "gemma2 (transformers)".
inline void PrintTo(const FixtureCase& c, std::ostream* os) {
  *os << c.model << (c.reference == Reference::kFloat64 ? " (float64)" : " (transformers)");
}

inline std::vector<FixtureCase> fixture_cases(Reference reference, const std::vector<std::string>& models) {
  std::vector<FixtureCase> out;
  for (const auto& m : models) out.push_back({m, reference});
  return out;
}

// Test names end in the model's name ("Transformers/ForwardParity.PackedRow/gemma2").
inline std::string fixture_case_name(const ::testing::TestParamInfo<FixtureCase>& info) { return info.param.model; }

inline std::string transformers_reference_dir(const std::string& name) {
  return std::string(GRPO_TRANSFORMERS_REFERENCE_DIR) + "/" + name;
}

// The folder the case loads its model from: the fixture, or the fixture as transformers saved
// it (transformers' current config format and weight layout).
inline std::string case_model_dir(const FixtureCase& c) {
  return c.reference == Reference::kFloat64 ? fixture_dir(c.model) : transformers_reference_dir(c.model) + "/model";
}

// A reference file as a name -> tensor map.
inline std::map<std::string, torch::Tensor> load_reference(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing " + path +
                             ": the ctest reference.transformers.write makes it (tests/reference/models/"
                             "transformers_reference.py, run with .venv/bin/python from scripts/install-deps.sh)");
  std::map<std::string, torch::Tensor> out;
  for (auto& [key, tensor] : core::load_safetensors(path)) out[key] = tensor;
  return out;
}

inline std::map<std::string, torch::Tensor> case_reference(const FixtureCase& c) {
  return load_reference(c.reference == Reference::kFloat64 ? fixture_dir(c.model) + "/reference.safetensors"
                                                          : transformers_reference_dir(c.model) + "/reference.safetensors");
}

// reference.safetensors of a fixture (the float64 reference) as a name -> tensor map.
inline std::map<std::string, torch::Tensor> fixture_reference(const std::string& name) {
  return case_reference({name, Reference::kFloat64});
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace grpo::testing
