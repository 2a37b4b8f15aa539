// Which kernel computes softmax(QK^T)V: the `model.attention` key (and the apps' --attention).
// Torch-free, so that configuration code can name and parse a backend without LibTorch.
//
//   eager         grouped matmuls + a float32 softmax, as transformers' eager path: the reference
//                 every other backend is tested against; runs everything (soft-capping included).
//   sdpa          LibTorch's scaled_dot_product_attention: flash / memory-efficient kernels on
//                 CUDA, the fused CPU kernel on CPU (LibTorch 2.x; on 1.13 ATen's math op).
//   flash_varlen  FlashAttention-2's variable-length kernel for packed rows on CUDA in bf16/fp16
//                 (cumulative sequence lengths: no per-sequence loop, no [T, T] mask); other
//                 layouts use sdpa.
//   auto          the fastest backend that supports the layer, the layout and the device.
//
// A backend that cannot run a layer (soft-capping, a dtype, the device) falls back to the next
// one that can (flash_varlen -> sdpa -> eager), said once in the log (docs/gpu.md).
#pragma once

#include <optional>
#include <string_view>

namespace grpo::core {

enum class AttentionBackend { kAuto, kEager, kSdpa, kFlashVarlen };

const char* attention_backend_name(AttentionBackend backend);  // "auto", "eager", "sdpa", "flash_varlen"
std::optional<AttentionBackend> parse_attention_backend(std::string_view name);
// "auto, eager, sdpa, flash_varlen": what an error message lists.
const char* attention_backend_choices();

}  // namespace grpo::core
