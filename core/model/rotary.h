// Rotary position embeddings with every RoPE scaling of transformers' modeling_rope_utils
// (default, linear, dynamic NTK, YaRN, Llama 3, LongRoPE), and the cos/sin tables of one pass.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/model/model_config.h"

namespace grpo::core {

// cos/sin of one pass's positions, [B, T, 1, head_dim] float32 (one head axis to broadcast
// over): the model's rotary and, for Gemma 3's sliding layers, the local one. sin comes with
// its first half negated, which folds transformers' rotate_half into a swap of the halves:
// rotate_half(x) * sin == roll(x, head_dim / 2) * sin_signed, bit for bit (negation is exact;
// the backward differs at most in the sign of a zero gradient, which nothing downstream reads),
// with one kernel each way where slicing, negating and concatenating took five.
struct RotaryTables {
  torch::Tensor cos, sin_signed;
  torch::Tensor local_cos, local_sin_signed;  // undefined unless the config has a local_rope
};

// The tables of one pass from cos_sin's [B, T, head_dim] cos and sin.
RotaryTables rotary_tables_from(const std::pair<torch::Tensor, torch::Tensor>& cos_sin,
                                const std::pair<torch::Tensor, torch::Tensor>& local_cos_sin = {});

// transformers' apply_rotary_pos_emb for x [B, T, heads, D]: x * cos + rotate_half(x) * sin,
// written with the tables above.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin_signed);

// Rotary embedding tables (not parameters: transformers does not save inv_freq either), with
// every RoPE scaling of transformers' modeling_rope_utils. Dynamic NTK and longrope depend on the
// length of the call, as transformers' dynamic_rope_update makes them: a call whose largest
// position p has p + 1 > max_position_embeddings (dynamic) or > original_max_position_embeddings
// (longrope) uses the extended frequencies, for all its tokens. Yarn and longrope scale cos/sin
// by their attention factor.
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);  // the model's rotary
  RotaryEmbedding(const ModelConfig& config, const RotaryConfig& rotary);  // another (Gemma 3's local one)
  // cos, sin: [B, T, head_dim] in float32 for position_ids [B, T].
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& position_ids) const;
  // The inverse frequencies a call of `seq_len` tokens uses (0: the call-independent ones).
  torch::Tensor inv_freq(int64_t seq_len = 0) const;
  double attention_factor() const { return attention_factor_; }
  // Dynamic NTK and longrope: the frequencies depend on each call's largest position, which
  // cos_sin reads back from the device (a host sync; a CUDA graph cannot replay it).
  bool length_dependent() const { return scaling_.type == RopeType::kDynamic || scaling_.type == RopeType::kLongrope; }

 private:
  int64_t head_dim_;
  int64_t max_position_embeddings_;
  double theta_;
  RopeScaling scaling_;
  torch::Tensor inv_freq_;       // [head_dim / 2] float32: short calls (or all, for the static scalings)
  torch::Tensor long_inv_freq_;  // longrope: calls past original_max_position_embeddings
  double attention_factor_ = 1.0;

  // Copies of inv_freq_ / long_inv_freq_ on the devices that asked for them, made once: a
  // host-to-device copy per pass would stall the host, and CUDA graphs cannot capture one.
  // Shared by copies of this object (the tables never change); the mutex serves the rollout
  // and training threads, which may run passes of one model at once.
  struct DeviceCopies {
    std::mutex mutex;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (host table, its copy)
  };
  std::shared_ptr<DeviceCopies> device_copies_ = std::make_shared<DeviceCopies>();
  torch::Tensor on_device(const torch::Tensor& table, const torch::Device& device) const;
};

}  // namespace grpo::core
