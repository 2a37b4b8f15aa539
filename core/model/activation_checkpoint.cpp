#include "core/model/activation_checkpoint.h"

#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <memory>
#include <string>
#include <utility>

#include "core/model/precision.h"

namespace grpo::core {

namespace {

using torch::autograd::variable_list;

// Generators and their states; set() installs the states and returns the ones it replaced.
struct GeneratorStates {
  std::vector<at::Generator> generators;
  std::vector<at::Tensor> states;

  static GeneratorStates of(std::vector<at::Generator> generators) {
    GeneratorStates s;
    s.generators = std::move(generators);
    for (auto& g : s.generators) s.states.push_back(g.get_state());
    return s;
  }
  GeneratorStates set() const {
    GeneratorStates before = of(generators);
    for (std::size_t i = 0; i < generators.size(); ++i) {
      at::Generator g = generators[i];
      g.set_state(states[i]);
    }
    return before;
  }
};

// The backward node of a checkpointed block: one input (the block's), one output.
class RecomputeBlockBackward : public torch::autograd::Node {
 public:
  RecomputeBlockBackward(BlockForward run, at::Tensor input, GeneratorStates rng, AutocastState autocast)
      : run_(std::move(run)),
        // Saved as autograd saves its inputs: unpacking it throws when it was changed in place
        // after the forward (the recompute would silently use other values).
        input_(input, /*is_output=*/false),
        input_needs_grad_(input.requires_grad()),
        rng_(std::move(rng)),
        autocast_(autocast) {}

  std::string name() const override { return "RecomputeBlockBackward"; }

  variable_list apply(variable_list&& grads) override {
    if (!run_) throw std::runtime_error("a checkpointed block was backpropagated twice (its input is released after the first)");
    at::Tensor grad_input;
    if (grads.at(0).defined()) {
      const at::Tensor x = input_.unpack().detach().requires_grad_(input_needs_grad_);
      at::Tensor y;
      {
        const GeneratorStates now = rng_.set();
        struct Restore {
          const GeneratorStates& states;
          ~Restore() { states.set(); }
        } restore{now};
        const c10::AutoGradMode grad_mode(true);
        const AutocastStateScope autocast(autocast_);
        y = run_(x);
      }
      torch::autograd::backward({y}, {grads[0]});
      if (input_needs_grad_) grad_input = x.grad();
    }
    release_variables();
    return {grad_input};
  }

  void release_variables() override {
    run_ = nullptr;
    input_.reset_data();
  }

 private:
  BlockForward run_;
  torch::autograd::SavedVariable input_;
  bool input_needs_grad_;
  GeneratorStates rng_;
  AutocastState autocast_;
};

}  // namespace

at::Tensor checkpointed(const BlockForward& run, const at::Tensor& x, std::vector<at::Generator> generators) {
  generators.push_back(at::globalContext().defaultGenerator(x.device()));
  GeneratorStates rng = GeneratorStates::of(std::move(generators));
  const AutocastState autocast = AutocastState::current();
  // The forward exactly as without checkpointing (autograd on), on an input cut from its history.
  at::Tensor y = run(x.detach());
  if (!x.requires_grad() && !y.requires_grad()) return y;
  y = y.detach();  // drops the graph and with it the activations it saved
  auto node = std::shared_ptr<RecomputeBlockBackward>(new RecomputeBlockBackward(run, x, std::move(rng), autocast),
                                                      torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace grpo::core
