#include "core/runtime/blas_check.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <link.h>
#include <torch/version.h>

#include <cctype>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <vector>

#include "core/util/strings.h"

namespace grpo::core {

namespace {

int collect_object(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name && *info->dlpi_name) out->push_back(info->dlpi_name);
  return 0;
}

std::string resolve(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::canonical(path, ec);
  return ec ? path : p.string();
}

}  // namespace

BlasInfo detect_blas() {
  std::vector<std::string> objects;
  ::dl_iterate_phdr(&collect_object, &objects);

  BlasInfo info;
  info.implementation = "unknown";
  for (const auto& obj : objects) {
    const std::string real = resolve(obj);
    const std::string base = std::filesystem::path(real).filename().string();
    if (base.find("openblas") != std::string::npos || real.find("/openblas") != std::string::npos) {
      info.implementation = "OpenBLAS";
      info.library_path = real;
      break;
    }
    if (base.find("mkl_rt") != std::string::npos || base.find("libmkl") != std::string::npos) {
      info.implementation = "MKL";
      info.library_path = real;
      break;
    }
    if (base.find("blis") != std::string::npos || real.find("/blis") != std::string::npos) {
      info.implementation = "BLIS";
      info.library_path = real;
      break;
    }
    if (starts_with(base, "libblas.so")) {
      // The Debian alternative resolved to .../blas/libblas.so.3: Netlib's reference BLAS.
      info.library_path = real;
      if (real.find("/blas/") != std::string::npos) {
        info.implementation = "reference";
        info.is_reference = true;
      }
    }
  }
  // OpenBLAS exports its build configuration; it also identifies OpenBLAS reached through
  // the libblas.so.3 name.
  using StringFn = const char* (*)();
  if (auto fn = reinterpret_cast<StringFn>(::dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    info.implementation = "OpenBLAS";
    info.is_reference = false;
    info.details = fn();
  }
  if (auto fn = reinterpret_cast<StringFn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"))) {
    info.openblas_core = fn();
    // DYNAMIC_ARCH OpenBLAS identifies the CPU by its cpuid model; a VM that reports a
    // generic model gets SSE-era kernels (measured here: 27 vs 157 GFLOP/s on 2 cores,
    // 1024^2 fp32 matmul, Prescott vs SkylakeX kernels).
    static const char* const kPreAvx2Cores[] = {"prescott", "core2", "penryn", "dunnington", "nehalem",
                                                "atom", "banias", "katmai", "coppermine", "northwood",
                                                "sandybridge", "unknown"};
    std::string core = info.openblas_core;
    for (auto& ch : core) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    bool old_kernels = false;
    for (const char* c : kPreAvx2Cores) old_kernels = old_kernels || core == c;
    if (old_kernels) {
      __builtin_cpu_init();
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        info.suggested_coretype = "SkylakeX";
      else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        info.suggested_coretype = "Haswell";
    }
  }
  return info;
}

void log_blas_status() {
  const BlasInfo blas = detect_blas();
  spdlog::info("LibTorch {} (intra-op threads: {}), BLAS: {} {}{}", TORCH_VERSION, at::get_num_threads(),
               blas.implementation, blas.library_path.empty() ? "(no BLAS library mapped)" : blas.library_path,
               blas.details.empty() ? "" : " [" + blas.details + "]");
  if (!blas.suggested_coretype.empty()) {
    spdlog::warn("OpenBLAS chose its '{}' kernels but this CPU supports {}-class ones: matrix products may run",
                 blas.openblas_core, blas.suggested_coretype);
    spdlog::warn("several times slower. Set OPENBLAS_CORETYPE={} in the environment (before starting the program).",
                 blas.suggested_coretype);
  }
  if (blas.is_reference) {
    spdlog::warn("**************************************************************************");
    spdlog::warn("LibTorch is using the REFERENCE BLAS ({}): matrix products run ~35x slower", blas.library_path);
    spdlog::warn("than with OpenBLAS. Fix: sudo apt-get install libopenblas0-openmp");
    spdlog::warn("(scripts/install-deps.sh installs it), or select it with");
    spdlog::warn("update-alternatives --config libblas.so.3-x86_64-linux-gnu");
    spdlog::warn("**************************************************************************");
  }
}

}  // namespace grpo::core
