// Host data onto the model's device without stalling the host: on CUDA through pinned memory and
// a non-blocking copy (LibTorch's caching host allocator keeps the pinned buffer alive until the
// copy has run), elsewhere a plain copy. A pageable copy to a GPU waits for the copy engine, and
// the training step makes several per micro-batch (token ids, indices, masks).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace grpo::core {

torch::Tensor to_device(const torch::Tensor& host, const torch::Device& device);

// values as a 1-D tensor of `dtype` on `device`.
torch::Tensor to_device(const std::vector<int64_t>& values, const torch::Device& device, torch::Dtype dtype = torch::kLong);

}  // namespace grpo::core
