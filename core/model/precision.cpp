#include "core/model/precision.h"

#include <ATen/autocast_mode.h>

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

ComputePrecisionScope::ComputePrecisionScope(Precision precision, const torch::Device& device) {
  if (precision != Precision::kBf16Mixed) return;
  active_ = true;
  cuda_ = device.is_cuda();
  if (cuda_) {
    was_enabled_ = at::autocast::is_enabled();
    previous_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
  } else {
    was_enabled_ = at::autocast::is_cpu_enabled();
    previous_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(true);
  }
  cache_was_enabled_ = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  at::autocast::increment_nesting();
}

ComputePrecisionScope::~ComputePrecisionScope() {
  if (!active_) return;
  // As Python's autocast does on leaving the outermost region (a no-op with the cache off).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_cache_enabled(cache_was_enabled_);
  if (cuda_) {
    at::autocast::set_enabled(was_enabled_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
}

AutocastState AutocastState::current() {
  AutocastState s;
  s.cpu_enabled = at::autocast::is_cpu_enabled();
  s.cuda_enabled = at::autocast::is_enabled();
  s.cache_enabled = at::autocast::is_autocast_cache_enabled();
  s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
  s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
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
  at::autocast::set_cpu_enabled(state.cpu_enabled);
  at::autocast::set_enabled(state.cuda_enabled);
  at::autocast::set_autocast_cache_enabled(state.cache_enabled);
  at::autocast::set_autocast_cpu_dtype(state.cpu_dtype);
  at::autocast::set_autocast_gpu_dtype(state.cuda_dtype);
}

torch::Dtype autocast_compute_dtype(const torch::Tensor& t) {
  if (t.is_cuda() && at::autocast::is_enabled()) return at::autocast::get_autocast_gpu_dtype();
  if (t.is_cpu() && at::autocast::is_cpu_enabled()) return at::autocast::get_autocast_cpu_dtype();
  return t.scalar_type();
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
