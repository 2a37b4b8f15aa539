#include "core/model/device_info.h"

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

}  // namespace grpo::core
