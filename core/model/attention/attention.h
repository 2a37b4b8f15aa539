// The attention seam: attend(q, k, v, spec, context) owns everything between the projections
// and o_proj — the KV cache writes, the masks (causal, sliding window, soft-capping, packed
// boundaries, padding) and the choice of kernel — so that AttentionImpl (core/model/transformer.h)
// keeps only the projections, the q/k norms and rotary, as llama.cpp's build_attn and vLLM's
// Attention layer split it. Backends: core/model/attention/backend.h; kernels: kernels.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/model/attention/backend.h"
#include "core/model/attention/kv_cache.h"
#include "core/model/attention/layout.h"
#include "core/model/attention/varlen.h"

namespace grpo::core {

// What one layer's attention computes, fixed when the layer is built.
struct AttentionSpec {
  int64_t layer = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double scaling = 1.0;  // the softmax scale
  double softcap = 0.0;  // Gemma 2: scores = c * tanh(scores / c) before the mask; 0 = off
  int64_t window = 0;    // sliding window: a query at i sees keys j with i - window < j <= i; 0 = full
};

// What one pass attends over. Copied into the closures of activation checkpointing, so it owns
// its layout (the cache pointers are null there: recomputation never decodes).
struct AttentionContext {
  AttentionLayout layout;
  KVCache* cache = nullptr;        // padded decoding: the new tokens are appended
  const SlotStep* slots = nullptr;  // slot decoding (the rollout engine)
  AttentionBackend backend = AttentionBackend::kAuto;
  // Packed rows on a device: the layout's cu_seqlens there, copied by the first layer whose
  // kernel needs them and reused by the others (one host-to-device copy per pass, not per
  // layer); shared with the copies activation checkpointing makes.
  std::shared_ptr<VarlenCopy> varlen_copy = std::make_shared<VarlenCopy>();
};

// The kernel attend() runs.
enum class AttentionKernel { kEager, kSdpa, kFlashVarlen };
const char* attention_kernel_name(AttentionKernel kernel);  // "eager", "sdpa", "flash_varlen"

// Whether this build has the kernel at all (sdpa: LibTorch's op, or ATen's math op on 1.13;
// flash_varlen: LibTorch 2.x, on CUDA devices only).
bool attention_kernel_compiled(AttentionKernel kernel);

// Which kernel `context.backend` runs for this layer on q's device and compute dtype, and why a
// requested one cannot (empty when it can): soft-capping, float32, the device, the build, or
// LibTorch's deterministic mode (run.deterministic: no kernel whose backward uses atomics).
struct AttentionChoice {
  AttentionKernel kernel = AttentionKernel::kEager;
  std::string fallback_reason;
};
AttentionChoice choose_attention_kernel(const AttentionSpec& spec, const AttentionContext& context,
                                        const torch::Tensor& q);

// q [B, T, H, D], k/v [B, T, Hkv, D] (after the q/k norms and rotary) -> [B, T, H, D].
// With a cache, k/v are stored first and the queries attend over the cached keys too.
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttentionSpec& spec,
                     const AttentionContext& context);

// The keys each query of a packed row may see: [T, T] bool for sequences cu_seqlens (causal,
// inside its own sequence, inside the window). The eager and sdpa backends mask each sequence
// with its diagonal block; tests hold the varlen kernel's arguments to it.
torch::Tensor packed_visibility(const std::vector<int64_t>& cu_seqlens, int64_t window);

}  // namespace grpo::core
