// Activation checkpointing (train.gradient_checkpointing): a block's forward keeps only its
// input; backward runs the block again, with autograd on, and backpropagates through that
// recomputation. A decoder layer's saved activations (norm inputs, q/k/v, attention
// probabilities, the MLP's gate and up products) are then alive for one layer at a time in
// backward instead of for every layer from the forward on, at the price of one more forward
// of the layers (~1/3 more compute for a forward + backward).
//
// The recomputation must be the forward it replaces, so the block runs under the same
// conditions both times:
//   - autograd on in both (LoRA dropout draws only in a pass that trains); the first run's
//     graph is dropped as soon as its output is taken;
//   - the random generators it may draw from (the device's default generator, the LoRA
//     adapters' dropout generator) are set back to their states before the first run, and
//     after the recomputation to where they were, so the draws of everything else are those
//     of a run without checkpointing;
//   - the autocast settings of the first run (bf16-mixed), which are per thread.
// This is PyTorch's reentrant torch.utils.checkpoint (preserve_rng_state=True): backward
// calls autograd's backward on the recomputed graph, so the parameters' gradients accumulate
// through their usual accumulators and their hooks (the data-parallel reducer's) fire.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace grpo::core {

// A block's forward as a function of its input (everything else it needs captured).
using BlockForward = std::function<at::Tensor(const at::Tensor&)>;

// run(x), with only x kept for backward (see above). Returns run(x) as it is when nothing of it
// needs a gradient (no input gradient and no trainable parameter inside). `generators`: those
// the block may draw from, besides x's device default generator.
at::Tensor checkpointed(const BlockForward& run, const at::Tensor& x, std::vector<at::Generator> generators = {});

}  // namespace grpo::core
