#include "core/model/backward_callback.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <memory>
#include <string>
#include <utility>

namespace grpo::core {

namespace {

class CallbackBackward : public torch::autograd::Node {
 public:
  explicit CallbackBackward(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::string name() const override { return "CallbackBackward"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (fn_) fn_();
    return std::move(grads);
  }
  void release_variables() override { fn_ = nullptr; }

 private:
  std::function<void()> fn_;
};

}  // namespace

at::Tensor call_in_backward(const at::Tensor& x, std::function<void()> fn) {
  if (!x.requires_grad()) return x;
  at::Tensor y = x.detach();  // the same storage and version counter, cut from x's history
  auto node = std::shared_ptr<CallbackBackward>(new CallbackBackward(std::move(fn)), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace grpo::core
