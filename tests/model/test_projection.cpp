// The projection seam (core/model/projection.h): every weight matrix of the decoder is a
// Projection built by make_projection, named and shaped as Hugging Face's nn.Linear, so the
// place a LoRA adapter or a quantized weight hooks in covers the whole model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
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

}  // namespace
