// What the model code asks of a device beyond LibTorch's own queries.
#pragma once

#include <torch/torch.h>

namespace grpo::core {

// A CUDA device's compute capability as major * 10 + minor (90: Hopper); 0 for a device that is
// not CUDA, or in a build without CUDA code paths (GRPO_HAVE_CUDA: device_info.cpp alone of the
// model library is compiled with it, core/model/CMakeLists.txt).
int cuda_compute_capability(const torch::Device& device);

}  // namespace grpo::core
