// Our side of scripts/transformers_parity.py: with GRPO_PARITY_OUT set to a folder, writes
// <folder>/<model>.safetensors for every fixture model with the float32 logits of our decoder
// on the device under test (cuda:0) for the token ids stored in the fixture's
// reference.safetensors: `<key>.input_ids` (I64 [L]) and `<key>.logits` (F32 [L, vocab]) for
// key = seq.0 .. seq.3, long. The script runs transformers' AutoModelForCausalLM on the same
// ids and compares. Without GRPO_PARITY_OUT the test is skipped (scripts/gpu-check.sh sets it).
//
// It also checks our GPU logits against the stored float64 reference, with the float32 bound
// of tests/model (1e-4; docs/model-fixtures.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "core/model/checkpoint.h"
#include "core/model/safetensors_torch.h"
#include "core/model/transformer.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;
using grpo::testing::max_abs_diff;

namespace {

constexpr double kFp32LogitTolerance = 1e-4;
const std::string kIdsSuffix = ".input_ids";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST(TransformersParity, DumpOurLogitsForTheFixtures) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const char* out_env = std::getenv("GRPO_PARITY_OUT");
  if (!out_env || !*out_env) GTEST_SKIP() << "GRPO_PARITY_OUT not set (scripts/gpu-check.sh sets it)";
  const std::filesystem::path out_dir(out_env);
  std::filesystem::create_directories(out_dir);
  const torch::Device device = device_under_test();
  torch::NoGradGuard no_grad;
  for (const std::string& name : grpo::testing::fixture_models()) {
    core::LoadedModel loaded = core::load_model(fixture_dir(name), torch::kFloat32, device);
    loaded.model->eval();
    std::map<std::string, torch::Tensor> ref;
    for (auto& [key, t] : core::load_safetensors(fixture_dir(name) + "/reference.safetensors")) ref[key] = t;
    core::NamedTensorList tensors;
    for (const auto& [key, ids] : ref) {
      if (!ends_with(key, kIdsSuffix)) continue;  // seq.k.input_ids, long.input_ids
      const std::string base = key.substr(0, key.size() - kIdsSuffix.size());
      const torch::Tensor input = ids.to(torch::kLong).view({1, -1}).to(device);
      const torch::Tensor logits =
          loaded.model->forward(input, core::AttentionLayout::padded(torch::ones_like(input)))[0].to(torch::kCPU).to(torch::kFloat32).contiguous();
      const double diff = max_abs_diff(logits, ref.at(base + ".logits"));
      std::cout << name << " " << base << ": ours on " << device << " vs float64 reference: max |diff| " << diff << "\n";
      EXPECT_LT(diff, kFp32LogitTolerance) << name << " " << base;
      tensors.emplace_back(base + ".input_ids", ids.to(torch::kLong).contiguous());
      tensors.emplace_back(base + ".logits", logits);
    }
    ASSERT_FALSE(tensors.empty()) << name;
    const std::string path = (out_dir / (name + ".safetensors")).string();
    core::save_safetensors(path, tensors, {{"format", "pt"}, {"device", device.str()}, {"dtype", "float32"}, {"model", name}});
    std::cout << "wrote " << path << "\n";
  }
}
