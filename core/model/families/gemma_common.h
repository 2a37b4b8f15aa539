// What Gemma 2 and Gemma 3 share (gemma2.cpp, gemma3.cpp).
#pragma once

#include <cmath>

#include "core/model/families/family.h"

namespace grpo::core {

// Sandwich norms of the (1 + w) kind, GeGLU (gelu_pytorch_tanh), embeddings scaled by
// sqrt(hidden_size), the softmax scaled by query_pre_attn_scalar^-0.5, tied embeddings by default.
inline void read_gemma_blocks(const ConfigReader& r, ModelConfig& c) {
  c.norm_placement = NormPlacement::kSandwich;
  c.rms_norm_kind = RmsNormKind::kOffsetInFloat32;
  c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  if (!r.find("hidden_activation") && !r.find("hidden_act")) c.hidden_act = Activation::kGeluTanh;
  c.attention_scale = 1.0 / std::sqrt(r.has("query_pre_attn_scalar") ? r.require_positive("query_pre_attn_scalar") : 256.0);
  c.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  c.qkv_bias = c.o_proj_bias = r.get_bool("attention_bias", false);
}

// A soft-capping value: the class default when the key is absent, off when it is null.
inline double read_softcap(const ConfigReader& r, const char* key, double class_default) {
  if (!r.has(key)) return class_default;
  if (!r.find(key)) return 0.0;
  return r.require_positive(key);
}

inline void write_gemma_blocks(const ModelConfig& c, nlohmann::json& out) {
  set_default(out, "attention_bias", c.qkv_bias);
  // (1 / scale^2 recovers the scalar up to rounding: 24.000000000000004 for 24)
  const double scalar = std::round(1e6 / (c.attention_scale * c.attention_scale)) / 1e6;
  set_default(out, "query_pre_attn_scalar", std::round(scalar) == scalar ? nlohmann::json(static_cast<int64_t>(scalar)) : nlohmann::json(scalar));
  set_default(out, "hidden_activation", c.hidden_act == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu");
  auto cap = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  set_default(out, "attn_logit_softcapping", cap(c.attn_logit_softcapping));
  set_default(out, "final_logit_softcapping", cap(c.final_logit_softcapping));
  write_sliding_layers(c, out);
}

}  // namespace grpo::core
