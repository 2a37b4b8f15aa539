// Activation checkpointing (core/model/activation_checkpoint.h): the gradients of a training
// pass with every decoder layer recomputed in backward equal those of the plain pass (the
// reference: the uncheckpointed forward, itself checked against the float64 fixtures), on the
// fixture models, padded and packed, with LoRA dropout drawing masks, and under bf16-mixed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/lora.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "tests/model/model_fixtures.h"

using namespace grpo::core;
using namespace grpo::testing;

namespace {

struct Batch {
  torch::Tensor ids;
  AttentionLayout layout;
  torch::Tensor weights;  // [B, T, vocab]: the loss is sum(logits * weights) over real tokens
};

// Two rows, one padded on the left and one on the right.
Batch padded_batch(const ModelConfig& c) {
  Batch b;
  b.ids = torch::tensor({{0, 0, 5, 9, 3, 7, 2}, {4, 8, 1, 6, 2, 0, 0}}, torch::kLong).remainder(c.vocab_size);
  const torch::Tensor mask = torch::tensor({{0, 0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0, 0}}, torch::kLong);
  b.layout = AttentionLayout::padded(mask);
  b.weights = torch::randn({2, 7, c.vocab_size}, torch::Generator(at::detail::createCPUGenerator(11))) *
              mask.unsqueeze(-1).to(torch::kFloat32);
  return b;
}

// One row of three sequences back to back.
Batch packed_batch(const ModelConfig& c) {
  Batch b;
  b.ids = torch::tensor({{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3}}, torch::kLong).remainder(c.vocab_size);
  b.layout = AttentionLayout::packed({5, 7, 4});
  b.weights = torch::randn({1, 16, c.vocab_size}, torch::Generator(at::detail::createCPUGenerator(12)));
  return b;
}

// The loss's value and every trainable parameter's gradient (gradients start from none).
struct Pass {
  double loss = 0.0;
  std::map<std::string, torch::Tensor> grads;
};

using NamedTensorList = std::vector<std::pair<std::string, torch::Tensor>>;

NamedTensorList trainable_of(CausalLM& model) {
  NamedTensorList out;
  for (const auto& kv : model->named_parameters())
    if (kv.value().requires_grad()) out.emplace_back(kv.key(), kv.value());
  return out;
}

// `trainable`: what gets gradients (default: the model's parameters that require them).
Pass train_pass(CausalLM& model, const Batch& b, bool checkpointing, NamedTensorList trainable = {}) {
  if (trainable.empty()) trainable = trainable_of(model);
  model->set_gradient_checkpointing(checkpointing);
  for (auto& [name, p] : trainable) p.mutable_grad() = torch::Tensor();
  const torch::Tensor loss = (model->forward(b.ids, b.layout) * b.weights).sum();
  loss.backward();
  Pass out;
  out.loss = loss.item<double>();
  for (const auto& [name, p] : trainable) {
    // An expert no token of the batch was routed to gets none (as in transformers); the
    // comparison below still requires both passes to agree on which ones.
    if (name.find(".experts.") == std::string::npos) EXPECT_TRUE(p.grad().defined()) << name << " got no gradient";
    if (p.grad().defined()) out.grads[name] = p.grad().clone();
  }
  model->set_gradient_checkpointing(false);
  return out;
}

void expect_same_gradients(const Pass& plain, const Pass& recomputed, double tolerance) {
  EXPECT_NEAR(plain.loss, recomputed.loss, tolerance * (1.0 + std::abs(plain.loss)));
  ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
  double worst = 0.0;
  std::string where;
  for (const auto& [name, g] : plain.grads) {
    const double d = max_abs_diff(g, recomputed.grads.at(name));
    if (d > worst) worst = d, where = name;
  }
  EXPECT_LE(worst, tolerance) << "largest difference in " << where;
}

class CheckpointedGradients : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointedGradients, EqualThePlainPassPaddedAndPacked) {
  LoadedModel m = load_model(fixture_dir(GetParam()));
  m.model->train();
  for (const Batch& b : {padded_batch(m.config), packed_batch(m.config)}) {
    const Pass plain = train_pass(m.model, b, false);
    const Pass recomputed = train_pass(m.model, b, true);
    ASSERT_FALSE(plain.grads.empty());
    expect_same_gradients(plain, recomputed, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckpointedGradients, ::testing::ValuesIn(fixture_models()),
                         [](const auto& info) { return info.param; });

// The checkpointed forward keeps one node per layer whose backward recomputes it; inference
// passes (no autograd) never take that path.
TEST(ActivationCheckpoint, TrainingPassesRecomputeAndInferencePassesDoNot) {
  LoadedModel m = load_model(fixture_dir("qwen2"));
  m.model->train();
  m.model->set_gradient_checkpointing(true);
  const Batch b = packed_batch(m.config);
  const torch::Tensor h = m.model->hidden_states(b.ids, b.layout);
  // One recompute node per layer in the graph.
  std::vector<torch::autograd::Node*> todo = {h.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int recompute_nodes = 0;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    recompute_nodes += n->name() == "RecomputeBlockBackward";
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  EXPECT_EQ(recompute_nodes, m.config.num_hidden_layers);
  m.model->set_gradient_checkpointing(false);
  const torch::Tensor plain = m.model->hidden_states(b.ids, b.layout);
  EXPECT_TRUE(torch::equal(h, plain));  // the checkpointed forward's values are the plain forward's
  m.model->set_gradient_checkpointing(true);
  torch::NoGradGuard no_grad;
  const torch::Tensor inference = m.model->hidden_states(b.ids, b.layout);
  EXPECT_FALSE(inference.requires_grad());
  EXPECT_TRUE(torch::equal(inference, plain));
}

// LoRA dropout draws its masks from the adapters' generator in the forward; the recompute
// draws the same masks, and afterwards the generator is where the plain pass leaves it.
TEST(ActivationCheckpoint, LoraDropoutMasksAreRedrawnIdentically) {
  LoadedModel m = load_model(fixture_dir("llama"));
  LoraSettings s;
  s.r = 4;
  s.lora_alpha = 8;
  s.lora_dropout = 0.3;
  s.target_modules = {"q_proj", "v_proj", "up_proj"};
  LoraAdapters lora(m.model, s, 5);
  {  // non-zero B, so the adapters (and their dropout) change the output
    torch::NoGradGuard no_grad;
    for (auto& p : lora.parameters()) p.normal_(0.0, 0.2);
  }
  m.model->train();
  const torch::Tensor start = lora.dropout_rng_state();
  const Batch b = packed_batch(m.config);
  NamedTensorList adapters;
  for (const auto& p : lora.parameters()) adapters.emplace_back(std::to_string(adapters.size()), p);
  const Pass plain = train_pass(m.model, b, false, adapters);
  const torch::Tensor after_plain = lora.dropout_rng_state();
  lora.set_dropout_rng_state(start);
  const Pass recomputed = train_pass(m.model, b, true, adapters);
  EXPECT_TRUE(torch::equal(after_plain, lora.dropout_rng_state()));
  ASSERT_EQ(plain.grads.size(), lora.parameters().size());
  expect_same_gradients(plain, recomputed, 1e-6);
  // A different mask would show: the plain pass again, from where the generator now is.
  const Pass other_masks = train_pass(m.model, b, false, adapters);
  EXPECT_GT(std::abs(other_masks.loss - plain.loss), 1e-4);
}

// bf16-mixed: the recompute runs under the forward's autocast settings (they are per thread
// and the forward's scope has ended by backward), so the bf16 matmuls are the same ones.
TEST(ActivationCheckpoint, Bf16MixedRecomputesInBf16) {
  LoadedModel m = load_model(fixture_dir("qwen3"));
  m.model->train();
  const Batch b = padded_batch(m.config);
  auto pass = [&](bool checkpointing) {
    m.model->set_gradient_checkpointing(checkpointing);
    for (auto& p : m.model->parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss;
    {
      const ComputePrecisionScope bf16(Precision::kBf16Mixed, torch::kCPU);
      loss = (m.model->forward(b.ids, b.layout).to(torch::kFloat32) * b.weights).sum();
    }
    loss.backward();  // outside the scope, as the trainer's chunked loss may be
    Pass out;
    out.loss = loss.item<double>();
    for (const auto& kv : m.model->named_parameters()) out.grads[kv.key()] = kv.value().grad().clone();
    return out;
  };
  const Pass plain = pass(false), recomputed = pass(true);
  expect_same_gradients(plain, recomputed, 1e-6);
  // And it was bf16: fp32 gives other gradients.
  const Pass fp32 = train_pass(m.model, b, false);
  double spread = 0.0;
  for (const auto& [name, g] : fp32.grads) spread = std::max(spread, max_abs_diff(g, plain.grads.at(name)));
  EXPECT_GT(spread, 1e-4);
}

}  // namespace
