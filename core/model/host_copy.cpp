#include "core/model/host_copy.h"

namespace grpo::core {

torch::Tensor to_device(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda() || !host.device().is_cpu()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

torch::Tensor to_device(const std::vector<int64_t>& values, const torch::Device& device, torch::Dtype dtype) {
  return to_device(torch::tensor(values, torch::kLong).to(dtype), device);
}

}  // namespace grpo::core
