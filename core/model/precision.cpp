#include "core/model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace grpo::core {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::kBf16: return "bf16";
    case Precision::kFp32: break;
  }
  return "fp32";
}

std::optional<Precision> parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16-mixed") return Precision::kBf16Mixed;
  if (name == "bf16") return Precision::kBf16;
  return std::nullopt;
}

torch::Dtype storage_dtype(Precision precision) {
  return precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
}

torch::Dtype compute_dtype(Precision precision) {
  return precision == Precision::kFp32 ? torch::kFloat32 : torch::kBFloat16;
}

// LibTorch 2.4 renamed autocast's switches to per-device-type ones; the old names still work
// there but warn on every call (a log flooded at each forward), so each LibTorch gets its own.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled_on(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void set_autocast_enabled_on(c10::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
at::ScalarType autocast_dtype_on(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void set_autocast_dtype_on(c10::DeviceType device, at::ScalarType dtype) { at::autocast::set_autocast_dtype(device, dtype); }
#else
bool autocast_enabled_on(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_autocast_enabled_on(c10::DeviceType device, bool on) {
  if (device == c10::DeviceType::CUDA) at::autocast::set_enabled(on);
  else at::autocast::set_cpu_enabled(on);
}
at::ScalarType autocast_dtype_on(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype_on(c10::DeviceType device, at::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) at::autocast::set_autocast_gpu_dtype(dtype);
  else at::autocast::set_autocast_cpu_dtype(dtype);
}
#endif

ComputePrecisionScope::ComputePrecisionScope(Precision precision, const torch::Device& device) {
  if (precision != Precision::kBf16Mixed) return;
  active_ = true;
  cuda_ = device.is_cuda();
  const auto type = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  was_enabled_ = autocast_enabled_on(type);
  previous_dtype_ = autocast_dtype_on(type);
  set_autocast_dtype_on(type, at::kBFloat16);
  set_autocast_enabled_on(type, true);
  cache_was_enabled_ = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  at::autocast::increment_nesting();
}

ComputePrecisionScope::~ComputePrecisionScope() {
  if (!active_) return;
  // As Python's autocast does on leaving the outermost region (a no-op with the cache off).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_cache_enabled(cache_was_enabled_);
  const auto type = cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  set_autocast_enabled_on(type, was_enabled_);
  set_autocast_dtype_on(type, previous_dtype_);
}

AutocastState AutocastState::current() {
  AutocastState s;
  s.cpu_enabled = autocast_enabled_on(c10::DeviceType::CPU);
  s.cuda_enabled = autocast_enabled_on(c10::DeviceType::CUDA);
  s.cache_enabled = at::autocast::is_autocast_cache_enabled();
  s.cpu_dtype = autocast_dtype_on(c10::DeviceType::CPU);
  s.cuda_dtype = autocast_dtype_on(c10::DeviceType::CUDA);
  return s;
}

AutocastStateScope::AutocastStateScope(const AutocastState& state) : previous_(AutocastState::current()) {
  apply(state);
  at::autocast::increment_nesting();
}

AutocastStateScope::~AutocastStateScope() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  apply(previous_);
}

void AutocastStateScope::apply(const AutocastState& state) {
  set_autocast_enabled_on(c10::DeviceType::CPU, state.cpu_enabled);
  set_autocast_enabled_on(c10::DeviceType::CUDA, state.cuda_enabled);
  at::autocast::set_autocast_cache_enabled(state.cache_enabled);
  set_autocast_dtype_on(c10::DeviceType::CPU, state.cpu_dtype);
  set_autocast_dtype_on(c10::DeviceType::CUDA, state.cuda_dtype);
}

torch::Dtype autocast_compute_dtype(const torch::Tensor& t) {
  if (t.is_cuda() && autocast_enabled_on(c10::DeviceType::CUDA)) return autocast_dtype_on(c10::DeviceType::CUDA);
  if (t.is_cpu() && autocast_enabled_on(c10::DeviceType::CPU)) return autocast_dtype_on(c10::DeviceType::CPU);
  return t.scalar_type();
}

void use_deterministic_algorithms(bool on) {
  if (on) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(on);
  if (on) at::globalContext().setBenchmarkCuDNN(false);
}

std::string CpuBf16Support::describe() const {
  if (amx_bf16 && avx512_bf16) return "amx_bf16 avx512_bf16";
  if (amx_bf16) return "amx_bf16";
  if (avx512_bf16) return "avx512_bf16";
  return "none";
}

CpuBf16Support cpu_bf16_support() {
  static const CpuBf16Support support = [] {
    CpuBf16Support s;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      std::istringstream words(line);
      std::string w;
      while (words >> w) {
        if (w == "amx_bf16") s.amx_bf16 = true;
        if (w == "avx512_bf16") s.avx512_bf16 = true;
      }
      break;  // every core lists the same flags
    }
    return s;
  }();
  return support;
}

}  // namespace grpo::core
