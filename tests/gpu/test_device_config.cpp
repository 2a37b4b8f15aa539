// model.device against the GPUs this machine has (core/runtime/policy.h): what only a GPU
// machine can check. The CPU build's errors (no CUDA at all) are tested in tests/train.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>

#include "core/config/config_loader.h"
#include "core/runtime/policy.h"
#include "tests/support/error_of.h"

using grpo::testing::error_of;

namespace {

grpo::sdk::ConfigValue config_with_device(const std::string& device) {
  return grpo::core::load_config(grpo::core::ConfigSources{{}, {"model.device=" + device}});
}

}  // namespace

TEST(ModelDevice, ExistingGpusResolveAndOneBeyondIsAnErrorNamingTheKey) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto count = static_cast<int>(torch::cuda::device_count());
  EXPECT_EQ(grpo::core::policy_device(config_with_device("cuda:0")), torch::Device("cuda:0"));
  EXPECT_TRUE(grpo::core::policy_device(config_with_device("cuda")).is_cuda());
  const std::string beyond = "cuda:" + std::to_string(count);
  const std::string error = error_of([&] { grpo::core::policy_device(config_with_device(beyond)); });
  EXPECT_NE(error.find("--set #1: model.device: \"" + beyond + "\" asked for, but this machine has " + std::to_string(count) +
                       " CUDA device"),
            std::string::npos)
      << error;
}

TEST(ModelDevice, DataParallelRanksBindTheirLocalGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  grpo::sdk::ConfigValue config = config_with_device("cuda");
  grpo::core::bind_local_cuda_device(config, 0);
  EXPECT_EQ(grpo::core::policy_device(config), torch::Device("cuda:0"));
}
