// The decoder's linear projections (q/k/v/o, gate/up/down, the untied LM head), all built by
// one factory, make_projection(). This is the seam where an adapter hooks in (ProjectionHook:
// a LoRA adapter, core/model/lora.h, is one; a quantized weight or another adapter kind would be
// another): a projection knows its role and layer, and every matmul of a weight matrix in the
// decoder goes through Projection::forward. llama.cpp routes its matmuls through one helper for
// the same reason (llama-adapter), and PEFT wraps nn.Linear the same way. The model knows hooks
// only through this interface, so it never includes what implements one.
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

// What changes a projection's output beyond W x + b. At most one per projection; the projection
// holds it shared, so whoever attached it (core/model/lora.h's LoraAdapters) may keep a handle.
class ProjectionHook {
 public:
  virtual ~ProjectionHook() = default;
  // Whether the hook changes the output now (an adapter switched off does not). Asked on every
  // pass; also what decides whether a path that bypasses Projection::forward may run (a
  // mixture of experts' grouped products, core/model/moe.h) and part of a decode graph's key.
  virtual bool active() const = 0;
  // The projection's output for input `x` given `base` = W x + b (both float32 in
  // forward_float32). May update `base` in place and return it. `training`: the module's
  // training flag.
  virtual torch::Tensor apply(const torch::Tensor& x, torch::Tensor base, bool training) const = 0;
  // The CPU generator the hook draws random numbers from in a training pass (an adapter's
  // dropout), or nullptr: activation checkpointing restores its state before recomputing a layer
  // so the recomputed pass draws what the first one drew.
  virtual const at::Generator* training_generator() const { return nullptr; }
};

class ProjectionImpl : public torch::nn::LinearImpl {
 public:
  explicit ProjectionImpl(const ProjectionSpec& spec);
  // y = x W^T + b, x [..., in_features] -> [..., out_features]; then the hook's apply() when
  // one is attached and active.
  torch::Tensor forward(const torch::Tensor& x);
  // The same product in float32 whatever the weights' dtype and autocast say (a mixture of
  // experts' router: core/model/transformer.h); gradients flow to the weights as in forward().
  torch::Tensor forward_float32(const torch::Tensor& x);
  const ProjectionSpec& spec() const { return spec_; }

  // Attaches a hook (nullptr detaches). std::logic_error when one is attached already: detach it
  // first, so two owners never replace each other's hook unnoticed.
  void set_hook(std::shared_ptr<const ProjectionHook> hook);
  const ProjectionHook* hook() const { return hook_.get(); }
  // Whether an attached hook is active: forward() then applies it.
  bool hook_active() const { return hook_ && hook_->active(); }

 private:
  ProjectionSpec spec_;
  std::shared_ptr<const ProjectionHook> hook_;
};
TORCH_MODULE(Projection);

// The one place the decoder's projections are constructed.
Projection make_projection(const ProjectionSpec& spec);

}  // namespace grpo::core
