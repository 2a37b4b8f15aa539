// parse_device (core/model/device_info.h): the one parser of model.device, the native backend's
// `device` and grpo-serve --device. The CUDA-machine cases (an index past the device count) are
// in tests/gpu/test_device_config.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "core/model/device_info.h"

using grpo::core::parse_device;

namespace {

std::string error_of(const std::string& name) {
  try {
    parse_device(name);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ParseDevice, TheCpuIsTheCpu) {
  EXPECT_EQ(parse_device("cpu"), torch::Device(torch::kCPU));
}

TEST(ParseDevice, ANameThatIsNoDeviceSaysWhatIsExpected) {
  EXPECT_EQ(error_of("tpu"), "expected cpu, cuda or cuda:N, got \"tpu\"");
  EXPECT_EQ(error_of("cuda:x"), "expected cpu, cuda or cuda:N, got \"cuda:x\"");
  EXPECT_EQ(error_of(""), "expected cpu, cuda or cuda:N, got \"\"");
  // A device LibTorch knows but the runtime does not run on.
  EXPECT_EQ(error_of("meta"), "expected cpu, cuda or cuda:N, got \"meta\"");
}

TEST(ParseDevice, CudaWithoutACudaDeviceSaysWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  const std::string error = error_of("cuda");
  EXPECT_EQ(error.rfind("\"cuda\" asked for, but ", 0), 0u) << error;
  // Either this LibTorch has no CUDA at all or it sees no device; the message says which.
  EXPECT_TRUE(error.find("has no CUDA") != std::string::npos || error.find("no CUDA device is visible") != std::string::npos)
      << error;
  EXPECT_EQ(error_of("cuda:1").rfind("\"cuda:1\" asked for, but ", 0), 0u);
}

}  // namespace
