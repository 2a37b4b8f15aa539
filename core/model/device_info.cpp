#include "core/model/device_info.h"

#include <optional>
#include <stdexcept>

#if defined(GRPO_HAVE_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

namespace grpo::core {

int cuda_compute_capability(const torch::Device& device) {
#if defined(GRPO_HAVE_CUDA)
  if (!device.is_cuda()) return 0;
  const cudaDeviceProp* props =
      at::cuda::getDeviceProperties(device.has_index() ? device.index() : at::cuda::current_device());
  return props->major * 10 + props->minor;
#else
  (void)device;
  return 0;
#endif
}

torch::Device parse_device(const std::string& name) {
  const std::string expected = "expected cpu, cuda or cuda:N, got \"" + name + "\"";
  std::optional<torch::Device> device;
  try {
    device.emplace(name);
  } catch (const std::exception&) {
    throw std::invalid_argument(expected);
  }
  if (!device->is_cpu() && !device->is_cuda()) throw std::invalid_argument(expected);
  if (device->is_cpu()) return *device;
  if (!torch::cuda::is_available())
    throw std::invalid_argument(
        "\"" + name + "\" asked for, but " +
        (!at::hasCUDA() ? std::string("this build's LibTorch has no CUDA (Debian's libtorch-dev is CPU-only; build against a "
                                      "CUDA LibTorch with -DGRPO_WITH_CUDA=AUTO: docs/precision.md)")
                        : std::string("no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)")));
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (device->has_index() && device->index() >= count)
    throw std::invalid_argument("\"" + name + "\" asked for, but this machine has " + std::to_string(count) + " CUDA device" +
                                (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")"));
  return *device;
}

}  // namespace grpo::core
