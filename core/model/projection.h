// The decoder's linear projections (q/k/v/o, gate/up/down, the untied LM head), all built by
// one factory, make_projection(). This is the seam where a LoRA adapter (core/model/lora.h) or
// a quantized weight hooks in: a projection knows its role and layer, and every matmul of a
// weight matrix in the decoder goes through Projection::forward. llama.cpp routes its matmuls through one
// helper for the same reason (llama-adapter), and PEFT wraps nn.Linear the same way.
//
// Parameters are `weight` [out, in] and, when present, `bias` [out], named and initialized
// exactly as torch::nn::Linear's, so checkpoint keys ("...q_proj.weight") and seeded
// initialization are those of Hugging Face's nn.Linear.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace grpo::core {

struct LoraAdapter;

// What a projection is, for the factory and for anything that hooks into it later.
enum class ProjectionRole {
  kQuery, kKey, kValue, kOutput, kGate, kUp, kDown, kLmHead,
  kQkv,               // Phi-3's fused [q; k; v]
  kGateUp,            // Phi-3's fused [gate; up]
  kRouter,            // a mixture-of-experts block's router ("gate")
  kSharedExpertGate,  // Qwen2-MoE's scalar gate of the shared expert
  kScore,             // a *ForSequenceClassification's head
};

// The Hugging Face module name of a role ("q_proj", ..., "lm_head").
const char* projection_name(ProjectionRole role);

struct ProjectionSpec {
  ProjectionRole role = ProjectionRole::kQuery;
  std::int64_t layer = -1;  // decoder layer index; -1 for the LM head
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = false;
};

class ProjectionImpl : public torch::nn::LinearImpl {
 public:
  explicit ProjectionImpl(const ProjectionSpec& spec);
  // y = x W^T + b, x [..., in_features] -> [..., out_features]; plus the LoRA adapter's
  // update when one is attached and switched on.
  torch::Tensor forward(const torch::Tensor& x);
  // The same product in float32 whatever the weights' dtype and autocast say (a mixture of
  // experts' router: core/model/transformer.h); gradients flow to the weights as in forward().
  torch::Tensor forward_float32(const torch::Tensor& x);
  const ProjectionSpec& spec() const { return spec_; }

  // LoraAdapters (core/model/lora.h) attaches and detaches adapters; nullptr detaches.
  void set_lora(std::shared_ptr<const LoraAdapter> adapter) { lora_ = std::move(adapter); }
  const LoraAdapter* lora() const { return lora_.get(); }
  // Whether an attached adapter is switched on: forward() then adds its update.
  bool lora_on() const;

 private:
  ProjectionSpec spec_;
  std::shared_ptr<const LoraAdapter> lora_;
};
TORCH_MODULE(Projection);

// The one place the decoder's projections are constructed.
Projection make_projection(const ProjectionSpec& spec);

}  // namespace grpo::core
