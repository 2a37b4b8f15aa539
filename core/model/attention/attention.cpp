#include "core/model/attention/attention.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <set>
#include <stdexcept>

#include "core/model/attention/kernels.h"
#include "core/model/attention/varlen.h"
#include "core/model/precision.h"

namespace grpo::core {

namespace kernels = attention_kernels;

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kAuto: return "auto";
    case AttentionBackend::kEager: return "eager";
    case AttentionBackend::kSdpa: return "sdpa";
    case AttentionBackend::kFlashVarlen: return "flash_varlen";
  }
  return "?";
}

std::optional<AttentionBackend> parse_attention_backend(std::string_view name) {
  for (auto b : {AttentionBackend::kAuto, AttentionBackend::kEager, AttentionBackend::kSdpa, AttentionBackend::kFlashVarlen})
    if (name == attention_backend_name(b)) return b;
  return std::nullopt;
}

const char* attention_backend_choices() { return "auto, eager, sdpa, flash_varlen"; }

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kEager: return "eager";
    case AttentionKernel::kSdpa: return "sdpa";
    case AttentionKernel::kFlashVarlen: return "flash_varlen";
  }
  return "?";
}

bool attention_kernel_compiled(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kEager: return true;
    case AttentionKernel::kSdpa: return kernels::sdpa_compiled();
    case AttentionKernel::kFlashVarlen: return kernels::flash_varlen_compiled();
  }
  return false;
}

namespace {

// flash_varlen's answer for a pass that is not a packed row: not a fallback, sdpa serves it by
// the backend's definition.
constexpr const char* kNotAPackedRow = "it serves packed rows (this pass: another layout)";

// Why flash_varlen cannot run this layer in this pass ("" = it can).
std::string flash_varlen_unsupported(const AttentionSpec& spec, const AttentionContext& context, const torch::Tensor& q) {
  if (!kernels::flash_varlen_compiled()) return "this build's LibTorch has no FlashAttention (LibTorch 2.x needed)";
  if (!q.is_cuda()) return "it runs on CUDA only";
  if (at::globalContext().deterministicAlgorithms()) return "its backward accumulates with atomics (run.deterministic)";
  if (spec.softcap > 0) return "it has no soft-capping (attn_logit_softcapping)";
  const auto dtype = autocast_compute_dtype(q);
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf) return "it computes in bf16/fp16 only (this pass: float32)";
  if (spec.head_dim % 8 != 0 || spec.head_dim > 256) return "it takes head_dim <= 256 in multiples of 8";
  if (!context.layout.is_packed() || context.cache || context.slots) return kNotAPackedRow;
  return "";
}

std::string sdpa_unsupported(const AttentionSpec& spec, const AttentionContext& context, const torch::Tensor& q) {
  if (spec.softcap > 0) return "scaled_dot_product_attention has no soft-capping (attn_logit_softcapping)";
  if (at::globalContext().deterministicAlgorithms() && q.is_cuda()) return "its CUDA backward accumulates with atomics (run.deterministic)";
  return "";
}

}  // namespace

AttentionChoice choose_attention_kernel(const AttentionSpec& spec, const AttentionContext& context, const torch::Tensor& q) {
  AttentionChoice choice;
  switch (context.backend) {
    case AttentionBackend::kEager:
      return choice;
    case AttentionBackend::kAuto: {
      // CUDA: flash for packed rows, sdpa otherwise. CPU: sdpa's fused kernel on LibTorch 2.x;
      // on 1.13 the eager path (ATen's math op there is no faster, and expands the heads).
      // A CUDA decode step (one query per row) with grouped heads stays eager: it reads the
      // cache in place, where sdpa's masked kernel would need the heads expanded, a copy of the
      // whole cache per layer and step.
      const bool grouped_decode = q.is_cuda() && q.size(1) == 1 && spec.num_heads != spec.num_kv_heads;
      if (flash_varlen_unsupported(spec, context, q).empty()) choice.kernel = AttentionKernel::kFlashVarlen;
      else if ((q.is_cuda() || kernels::sdpa_fused()) && !grouped_decode && sdpa_unsupported(spec, context, q).empty())
        choice.kernel = AttentionKernel::kSdpa;
      return choice;  // auto never reports a fallback: it asked for nothing in particular
    }
    case AttentionBackend::kFlashVarlen: {
      const std::string why = flash_varlen_unsupported(spec, context, q);
      if (why.empty()) {
        choice.kernel = AttentionKernel::kFlashVarlen;
        return choice;
      }
      if (why != kNotAPackedRow) choice.fallback_reason = "flash_varlen: " + why;
      [[fallthrough]];
    }
    case AttentionBackend::kSdpa: {
      const std::string why = sdpa_unsupported(spec, context, q);
      if (why.empty()) {
        choice.kernel = AttentionKernel::kSdpa;
        return choice;
      }
      choice.fallback_reason += (choice.fallback_reason.empty() ? "" : "; ") + std::string("sdpa: ") + why;
      return choice;
    }
  }
  return choice;
}

namespace {

// Says once per process and reason that a layer runs another kernel than the one asked for.
void log_fallback_once(const AttentionSpec& spec, const AttentionChoice& choice) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (!said.insert(choice.fallback_reason).second) return;
  spdlog::info("attention: layer {} (and others like it) runs {}: {}", spec.layer, attention_kernel_name(choice.kernel),
               choice.fallback_reason);
}

// [len, len] bool: query i sees key j <= i (and j > i - window), built where it is used.
torch::Tensor causal_block(int64_t len, int64_t window, const torch::Device& device) {
  auto causal = torch::ones({len, len}, torch::TensorOptions().dtype(torch::kBool).device(device)).tril();
  if (window > 0) causal = causal.triu(-(window - 1));  // key j > query i - window
  return causal;
}

// One dense call: q [B, H, T, D], k/v [B, Hkv, S, D], allowed [B or 1, 1, T, S] (undefined:
// causal over S == T, for sdpa's fused causal path).
torch::Tensor dense(AttentionKernel kernel, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& allowed, const AttentionSpec& spec) {
  if (kernel == AttentionKernel::kSdpa) return kernels::sdpa(q, k, v, allowed, spec.scaling);
  const int64_t T = q.size(2);
  const torch::Tensor mask = allowed.defined() ? allowed : causal_block(T, 0, q.device()).view({1, 1, T, T});
  return kernels::eager(q, k, v, mask, spec.scaling, spec.softcap);
}

}  // namespace

torch::Tensor packed_visibility(const std::vector<int64_t>& cu_seqlens, int64_t window) {
  const int64_t T = cu_seqlens.empty() ? 0 : cu_seqlens.back();
  auto visible = torch::zeros({T, T}, torch::kBool);
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const int64_t start = cu_seqlens[i], len = cu_seqlens[i + 1] - start;
    visible.narrow(0, start, len).narrow(1, start, len).copy_(causal_block(len, window, torch::kCPU));
  }
  return visible;
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttentionSpec& spec,
                     const AttentionContext& context) {
  const AttentionChoice choice = choose_attention_kernel(spec, context, q);
  if (!choice.fallback_reason.empty()) log_fallback_once(spec, choice);
  const AttentionLayout& layout = context.layout;
  const int64_t B = q.size(0), T = q.size(1);

  if (choice.kernel == AttentionKernel::kFlashVarlen) {  // packed rows, B == 1: [T, heads, D] as they are
    const VarlenPlan plan = varlen_plan(layout.cu_seqlens, spec.window, q.device(), context.varlen_copy.get());
    const auto dtype = autocast_compute_dtype(q);
    // squeeze, not q[0]: a select's backward writes a zero tensor and copies into it, a
    // squeeze's is a view (two kernels fewer per tensor and layer).
    auto out = kernels::flash_varlen(q.squeeze(0).to(dtype), k.squeeze(0).to(dtype), v.squeeze(0).to(dtype), plan,
                                     spec.scaling);
    return out.unsqueeze(0);
  }

  auto qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);  // [B, heads, T, D]
  torch::Tensor out;
  if (context.slots) {
    // Each new token attends to its row's cached tokens, the new ones before it and itself (keys
    // past the row's length belong to nobody, or to an earlier sequence of the slot).
    auto [keys, values] = context.slots->cache->write(spec.layer, *context.slots, kh, vh);
    out = dense(choice.kernel, qh, keys, values, spec.window > 0 ? context.slots->allowed_sliding : context.slots->allowed,
                spec);
  } else if (layout.is_packed()) {
    // Each sequence attends causally within itself only (and within the window).
    std::vector<torch::Tensor> parts;
    parts.reserve(layout.cu_seqlens.size() - 1);
    for (std::size_t i = 0; i + 1 < layout.cu_seqlens.size(); ++i) {
      const int64_t start = layout.cu_seqlens[i], len = layout.cu_seqlens[i + 1] - start;
      torch::Tensor allowed;  // undefined: plain causal
      if (spec.window > 0 || choice.kernel == AttentionKernel::kEager)
        allowed = causal_block(len, spec.window, q.device()).view({1, 1, len, len});
      parts.push_back(dense(choice.kernel, qh.narrow(2, start, len), kh.narrow(2, start, len), vh.narrow(2, start, len),
                            allowed, spec));
    }
    out = parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
  } else {
    int64_t past = 0;
    torch::Tensor keys = kh, values = vh;
    if (context.cache) {
      past = context.cache->length();
      std::tie(keys, values) = context.cache->write(spec.layer, kh, vh);
    }
    const int64_t S = past + T;
    auto opts = torch::TensorOptions().dtype(torch::kLong).device(q.device());
    auto qpos = torch::arange(past, past + T, opts).view({T, 1});
    auto kpos = torch::arange(0, S, opts).view({1, S});
    // Causal and real keys only; a query always sees itself so that padding rows stay finite.
    // The window counts cache indices, as transformers' masks do: padding is contiguous at
    // one end of a row, so between real tokens it equals the distance in positions.
    auto visible = kpos <= qpos;
    if (spec.window > 0) visible = visible & (kpos > qpos - spec.window);
    auto allowed = (visible.unsqueeze(0) & layout.key_padding_mask.view({B, 1, S})) | (kpos == qpos).unsqueeze(0);
    out = dense(choice.kernel, qh, keys, values, allowed.unsqueeze(1), spec);
  }
  return out.transpose(1, 2);  // [B, T, H, D]
}

}  // namespace grpo::core
