// A point in a pass where backward calls back: call_in_backward(x, fn) returns x as it is (the
// same values, no copy) behind an autograd node whose backward calls fn() and passes the
// gradient through. Backward reaches the node when every use of the returned tensor has been
// backpropagated, and before anything that produced x. dist.sharding: full uses it to gather a
// decoder layer's parameters before the layer's backward (a node on the layer's output) and to
// free them after (a node on its input; core/model/transformer.h, LayerParameterResidency).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace grpo::core {

// x itself when x needs no gradient (nothing would backpropagate through the node).
at::Tensor call_in_backward(const at::Tensor& x, std::function<void()> fn);

}  // namespace grpo::core
