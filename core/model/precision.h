// Training precision: which dtype weights are stored in and which dtype the forward and
// backward passes compute in (docs/precision.md).
//
//   fp32        float32 weights, float32 compute.
//   bf16-mixed  float32 master weights (what AdamW updates and checkpoints hold), forward and
//               backward matmuls in bfloat16 through LibTorch's autocast; log-softmax,
//               log-probs, entropy, KL and the loss stay float32. Each use of a weight casts
//               it (autocast's cast cache is off: docs/precision.md).
//   bf16        bfloat16 weights and compute, AdamW on bf16 parameters: no master weights, so
//               updates below bf16's resolution (2^-8 relative) are lost.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>
#include <string_view>

namespace grpo::core {

enum class Precision { kFp32, kBf16Mixed, kBf16 };

// "fp32", "bf16-mixed", "bf16".
const char* precision_name(Precision precision);
std::optional<Precision> parse_precision(std::string_view name);

// The dtype parameters are stored (loaded, updated, checkpointed) in.
torch::Dtype storage_dtype(Precision precision);
// The dtype matrix products run in.
torch::Dtype compute_dtype(Precision precision);

// While alive, and only for bf16-mixed, forward passes on `device` run their matrix products
// in bfloat16 (LibTorch autocast for the device type), casting a weight at each use. Autocast's
// cast cache (one bf16 copy per weight for the whole scope) is turned off inside: on the
// 0.5B bench it gave no consistent speed-up, and it would let a cast made under no-grad (no
// autograd history) be reused by a pass that trains. Scopes nest; autocast state is per thread.
class ComputePrecisionScope {
 public:
  ComputePrecisionScope(Precision precision, const torch::Device& device);
  ~ComputePrecisionScope();
  ComputePrecisionScope(const ComputePrecisionScope&) = delete;
  ComputePrecisionScope& operator=(const ComputePrecisionScope&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  bool cache_was_enabled_ = true;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

// This thread's autocast settings (CPU and CUDA flags and dtypes, the cast cache), captured
// so that a later computation can run under the same ones: autocast state is per thread, and
// a recomputation in backward (core/model/activation_checkpoint.h) may run on another thread
// or after the scope that set it has ended.
struct AutocastState {
  bool cpu_enabled = false, cuda_enabled = false, cache_enabled = true;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;
  static AutocastState current();
};

// While alive, this thread runs under `state`; the previous settings come back after.
class AutocastStateScope {
 public:
  explicit AutocastStateScope(const AutocastState& state);
  ~AutocastStateScope();
  AutocastStateScope(const AutocastStateScope&) = delete;
  AutocastStateScope& operator=(const AutocastStateScope&) = delete;

 private:
  AutocastState previous_;
  static void apply(const AutocastState& state);
};

// Autocast's per-device switches, through whichever API this LibTorch has (2.4 renamed them and
// warns on every call of the old names).
bool autocast_enabled_on(c10::DeviceType device);
void set_autocast_enabled_on(c10::DeviceType device, bool on);
at::ScalarType autocast_dtype_on(c10::DeviceType device);
void set_autocast_dtype_on(c10::DeviceType device, at::ScalarType dtype);

// The dtype autocast computes `t`'s matrix products in when it is on for t's device, else
// t's own dtype (what a custom autograd function with explicit casts should compute in).
torch::Dtype autocast_compute_dtype(const torch::Tensor& t);

// run.deterministic: LibTorch's deterministic algorithms (an op without a deterministic
// implementation is an error, not a silent race), deterministic cuDNN without autotuning, and
// cuBLAS's fixed workspaces (CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set; it must be set before
// the first cuBLAS call, so call this before any CUDA computation). Attention then avoids
// kernels whose backward accumulates with atomics (core/model/attention/attention.h).
// Process-wide, as LibTorch's settings are.
void use_deterministic_algorithms(bool on);

// What this CPU offers bfloat16 (from /proc/cpuinfo's flags on Linux).
struct CpuBf16Support {
  bool amx_bf16 = false;     // Intel AMX tiles (Sapphire Rapids and later): oneDNN's fastest bf16 path
  bool avx512_bf16 = false;  // vdpbf16ps (Cooper Lake, Zen 4 and later): about 2x fp32's matmul rate
  bool any() const { return amx_bf16 || avx512_bf16; }
  // "amx_bf16 avx512_bf16", "avx512_bf16" or "none".
  std::string describe() const;
};
CpuBf16Support cpu_bf16_support();

}  // namespace grpo::core
