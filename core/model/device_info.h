// What the model code asks of a device beyond LibTorch's own queries.
#pragma once

#include <torch/torch.h>

#include <string>

namespace grpo::core {

// A CUDA device's compute capability as major * 10 + minor (90: Hopper); 0 for a device that is
// not CUDA, or in a build without CUDA code paths (GRPO_HAVE_CUDA: device_info.cpp alone of the
// model library is compiled with it, core/model/CMakeLists.txt).
int cuda_compute_capability(const torch::Device& device);

// The one parser of a device name as configurations and command lines give it (model.device,
// the native backend's `device`, grpo-serve --device): "cpu", "cuda" or "cuda:N", checked
// against this LibTorch and machine. Otherwise std::invalid_argument whose message is what the
// caller's error says after its key: 'expected cpu, cuda or cuda:N, got "tpu"'; '"cuda" asked
// for, but this build's LibTorch has no CUDA (...)' or '... no CUDA device is visible (...)';
// '"cuda:3" asked for, but this machine has 2 CUDA devices (cuda:0 to cuda:1)'.
torch::Device parse_device(const std::string& name);

}  // namespace grpo::core
