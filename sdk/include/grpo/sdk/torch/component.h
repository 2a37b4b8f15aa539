// Shared plumbing of the torch-side SDK: the LibTorch version a torch component was built
// against travels with its registration (see ComponentDescriptor::torch_version).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include "grpo/sdk/plugin.h"

GRPO_SDK_NAMESPACE_BEGIN

namespace detail {
inline const char* compiled_torch_version() { return TORCH_VERSION; }
}  // namespace detail

// A named scalar metric reported by a component (clip fraction, approx KL, ...); a 0-dim
// tensor so that it can stay on the device until the trainer reduces it.
struct Metric {
  std::string name;
  at::Tensor value;
};

GRPO_SDK_NAMESPACE_END
