// The projection seam (core/model/projection.h): every weight matrix of the decoder is a
// Projection built by make_projection, named and shaped as Hugging Face's nn.Linear, so the
// place a LoRA adapter or a quantized weight hooks in covers the whole model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "core/model/projection.h"
#include "core/model/transformer.h"

using namespace grpo::core;

namespace {

ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.architecture = ModelArchitecture::Qwen2;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 32;
  c.qkv_bias = true;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(Projection, ComputesXTimesWeightTransposedPlusBias) {
  Projection p = make_projection({ProjectionRole::kUp, 3, 2, 3, true});
  torch::NoGradGuard no_grad;
  // W = [[1, 2], [3, 4], [5, 6]] ([out=3, in=2]), b = [0.5, -1, 2], x = [1, -1]:
  // y = W x + b = [1 - 2 + 0.5, 3 - 4 - 1, 5 - 6 + 2] = [-0.5, -2, 1].
  p->weight.copy_(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).view({3, 2}));
  p->bias.copy_(torch::tensor({0.5f, -1.0f, 2.0f}));
  const torch::Tensor y = p(torch::tensor({1.0f, -1.0f}).view({1, 2}));
  ASSERT_EQ(y.sizes(), (torch::IntArrayRef{1, 3}));
  EXPECT_FLOAT_EQ(y[0][0].item<float>(), -0.5f);
  EXPECT_FLOAT_EQ(y[0][1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(y[0][2].item<float>(), 1.0f);
  EXPECT_EQ(p->spec().layer, 3);
  EXPECT_STREQ(projection_name(p->spec().role), "up_proj");
}

TEST(Projection, WithoutBiasHasOnlyAWeightParameter) {
  Projection p = make_projection({ProjectionRole::kOutput, 0, 4, 2, false});
  const auto params = p->named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params.begin()->key(), "weight");
  EXPECT_EQ(params.begin()->value().sizes(), (torch::IntArrayRef{2, 4}));  // [out, in]
}

// Every 2-D weight of the decoder except the embedding and norms belongs to a Projection
// module of the role its Hugging Face name says, with the layer it sits in.
TEST(Projection, EveryDecoderWeightMatrixIsAProjection) {
  for (bool tied : {false, true}) {
    CausalLM model(tiny_config(tied));
    std::set<std::string> projected;
    for (const auto& item : model->named_modules()) {
      const auto* proj = dynamic_cast<const ProjectionImpl*>(item.value().get());
      if (!proj) continue;
      const std::string& path = item.key();
      const std::string role = projection_name(proj->spec().role);
      EXPECT_EQ(path.substr(path.size() - role.size()), role) << path;
      if (proj->spec().role != ProjectionRole::kLmHead)
        EXPECT_NE(path.find("layers." + std::to_string(proj->spec().layer) + "."), std::string::npos) << path;
      projected.insert(path + ".weight");
    }
    std::size_t matrices = 0;
    for (const auto& p : model->named_parameters()) {
      if (p.value().dim() != 2 || p.key() == "model.embed_tokens.weight") continue;
      ++matrices;
      EXPECT_TRUE(projected.count(p.key())) << p.key() << " is not built by make_projection";
    }
    // 7 per layer (q, k, v, o, gate, up, down) and the untied LM head.
    EXPECT_EQ(matrices, 2u * 7u + (tied ? 0u : 1u));
    EXPECT_EQ(projected.size(), matrices);
  }
}

// A hook that is not LoRA: doubles the output while active, and records what it was handed.
struct DoublingHook : ProjectionHook {
  bool on = true;
  mutable torch::Dtype seen_x = torch::kFloat64, seen_base = torch::kFloat64;
  mutable int calls = 0;
  bool active() const override { return on; }
  torch::Tensor apply(const torch::Tensor& x, torch::Tensor base, bool /*training*/) const override {
    seen_x = x.scalar_type();
    seen_base = base.scalar_type();
    ++calls;
    return base.mul(2.0);
  }
};

Projection up_projection_of_known_values() {
  Projection p = make_projection({ProjectionRole::kUp, 3, 2, 3, true});
  torch::NoGradGuard no_grad;
  p->weight.copy_(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).view({3, 2}));
  p->bias.copy_(torch::tensor({0.5f, -1.0f, 2.0f}));
  return p;
}

// The seam another adapter kind plugs into: forward() applies an attached hook only while it is
// active, and detaching it gives the plain product back.
TEST(ProjectionHook, ChangesTheOutputOnlyWhileActive) {
  Projection p = up_projection_of_known_values();
  auto hook = std::make_shared<DoublingHook>();
  p->set_hook(hook);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::tensor({1.0f, -1.0f}).view({1, 2});
  // W x + b = [-0.5, -2, 1] (ComputesXTimesWeightTransposedPlusBias), doubled.
  EXPECT_TRUE(p->hook_active());
  EXPECT_TRUE(torch::equal(p(x), torch::tensor({-1.0f, -4.0f, 2.0f}).view({1, 3})));
  hook->on = false;
  EXPECT_FALSE(p->hook_active());
  EXPECT_TRUE(torch::equal(p(x), torch::tensor({-0.5f, -2.0f, 1.0f}).view({1, 3})));
  EXPECT_EQ(hook->calls, 1);
  hook->on = true;
  p->set_hook(nullptr);
  EXPECT_EQ(p->hook(), nullptr);
  EXPECT_TRUE(torch::equal(p(x), torch::tensor({-0.5f, -2.0f, 1.0f}).view({1, 3})));
  EXPECT_EQ(hook->calls, 1);
}

// forward_float32 (a router's product) hands the hook float32 input and output whatever the
// weights are stored in.
TEST(ProjectionHook, SeesFloat32InTheFloat32Product) {
  Projection p = up_projection_of_known_values();
  p->to(torch::kBFloat16);
  auto hook = std::make_shared<DoublingHook>();
  p->set_hook(hook);
  torch::NoGradGuard no_grad;
  const torch::Tensor y = p->forward_float32(torch::tensor({1.0f, -1.0f}).view({1, 2}).to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  EXPECT_EQ(hook->seen_x, torch::kFloat32);
  EXPECT_EQ(hook->seen_base, torch::kFloat32);
  EXPECT_TRUE(torch::equal(y, torch::tensor({-1.0f, -4.0f, 2.0f}).view({1, 3})));  // exact in bf16
}

// One hook per projection: a second owner is refused (naming the projection) until the first
// detaches, so two adapters never replace each other unnoticed.
TEST(ProjectionHook, ASecondHookIsRefusedUntilTheFirstIsDetached) {
  Projection p = up_projection_of_known_values();
  p->set_hook(std::make_shared<DoublingHook>());
  try {
    p->set_hook(std::make_shared<DoublingHook>());
    FAIL() << "a second hook was attached";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("up_proj of layer 3 has a hook attached already"), std::string::npos) << e.what();
  }
  p->set_hook(nullptr);
  auto second = std::make_shared<DoublingHook>();
  p->set_hook(second);
  EXPECT_EQ(p->hook(), second.get());
}

// The model reaches its projections' hooks through Projection::forward alone: a hook on one
// layer's down_proj changes the logits while active, and the model is its old self when not.
TEST(ProjectionHook, AHookInsideTheModelChangesItsLogits) {
  CausalLM model(tiny_config(/*tied=*/false));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor ids = torch::tensor({{1, 4, 2, 7}}, torch::kLong);
  const AttentionLayout layout = AttentionLayout::padded(torch::ones({1, 4}, torch::kLong));
  const torch::Tensor before = model->forward(ids, layout);
  auto hook = std::make_shared<DoublingHook>();
  Projection down{nullptr};
  for (const auto& item : model->named_modules())
    if (item.key() == "model.layers.1.mlp.down_proj") down = Projection(std::dynamic_pointer_cast<ProjectionImpl>(item.value()));
  ASSERT_FALSE(down.is_empty());
  down->set_hook(hook);
  EXPECT_FALSE(torch::allclose(model->forward(ids, layout), before));
  EXPECT_GE(hook->calls, 1);
  hook->on = false;
  EXPECT_TRUE(torch::equal(model->forward(ids, layout), before));
}

}  // namespace
