// dist.sharding full (core/dist/sharding.h, ShardedParameters) on a real Gloo process group: two
// ranks as two threads of this process, each with its own copy of a fixture model. The
// reference is plain autograd on one unsharded copy: the logits of a batch, and the gradient of
// the sum of both ranks' losses (what the ranks' reduce-scatter must produce, shard by shard).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/gradient_reducer.h"
#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"
#include "core/dist/sharding.h"
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "tests/support/fixture_models.h"
#include "tests/support/gloo_ranks.h"

namespace {

using namespace grpo::core;
namespace dist = grpo::core::dist;

// Two Gloo ranks as threads; a minute for the collectives of a model's passes.
void run_two_ranks(const std::function<void(int, dist::Distributed&)>& body) { grpo::testing::run_two_ranks(body, 0.2, 60); }

// Rank r's packed batch and loss weights (the loss is sum(logits * weights)).
struct Batch {
  torch::Tensor ids, weights;
  AttentionLayout layout;
};

Batch batch_of(int rank, std::int64_t vocab) {
  torch::Generator g(at::detail::createCPUGenerator(40 + rank));
  Batch b;
  const std::vector<std::int64_t> lengths = rank == 0 ? std::vector<std::int64_t>{5, 7} : std::vector<std::int64_t>{9, 2, 4};
  std::int64_t tokens = 0;
  for (auto n : lengths) tokens += n;
  b.ids = torch::randint(vocab, {1, tokens}, g);
  b.weights = torch::randn({1, tokens, vocab}, g);
  b.layout = AttentionLayout::packed(lengths);
  return b;
}

struct Named {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
};

Named trainable(CausalLM& model) {
  Named n;
  for (const auto& kv : model->named_parameters()) {
    n.names.push_back(kv.key());
    n.params.push_back(kv.value());
  }
  return n;
}

struct Reference {
  std::map<std::string, at::Tensor> grads;  // of loss(rank 0) + loss(rank 1)
  at::Tensor logits0;                       // rank 0's batch, no grad
};

Reference reference(const std::string& fixture) {
  LoadedModel m = load_model(grpo::testing::fixture_dir(fixture));
  m.model->train();
  Reference ref;
  at::Tensor loss;
  for (int r = 0; r < 2; ++r) {
    const Batch b = batch_of(r, m.config.vocab_size);
    const at::Tensor l = (m.model->forward(b.ids, b.layout) * b.weights).sum();
    loss = r == 0 ? l : loss + l;
  }
  loss.backward();
  for (const auto& kv : m.model->named_parameters()) ref.grads[kv.key()] = kv.value().grad().clone();
  torch::NoGradGuard no_grad;
  const Batch b0 = batch_of(0, m.config.vocab_size);
  ref.logits0 = m.model->forward(b0.ids, b0.layout);
  return ref;
}

class ShardedParametersTest : public ::testing::TestWithParam<bool> {};  // activation checkpointing

// At rest a rank holds its chunks only; a training pass gathers each layer in forward and again
// in backward and frees it after; the reduce-scatter leaves each rank the reference gradient of
// the values it owns; under a Hold a no-grad forward gives the reference logits.
TEST_P(ShardedParametersTest, PassesGatherLayerByLayerAndGiveThePlainGradients) {
  const bool checkpointing = GetParam();
  const Reference ref = reference("qwen2");
  run_two_ranks([&](int rank, dist::Distributed& d) {
    LoadedModel m = load_model(grpo::testing::fixture_dir("qwen2"));
    m.model->train();
    m.model->set_gradient_checkpointing(checkpointing);
    Named n = trainable(m.model);
    std::int64_t total_bytes = 0;
    for (const auto& p : n.params) total_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
    const auto units = dist::decoder_units(n.names);
    OptimizerSettings settings;
    dist::ShardedAdamW optimizer(n.params, units, settings, d.train(), dist::Sharding::kFull,
                                 dist::decoder_unit_layers(units.size()));
    const auto sharded = optimizer.parameters();
    ASSERT_TRUE(sharded);
    m.model->set_parameter_residency(sharded);
    sharded->free_all();

    // At rest: every parameter's storage is empty; the rank holds its shard, half the values
    // (plus at most one padding value per unit).
    for (std::size_t k = 0; k < n.params.size(); ++k) EXPECT_EQ(n.params[k].storage().nbytes(), 0u) << n.names[k];
    EXPECT_GE(sharded->resident_bytes() * 2, total_bytes);
    EXPECT_LE(sharded->resident_bytes() * 2, total_bytes + 2 * 4 * static_cast<std::int64_t>(units.size()));

    dist::GradientReducer reducer(n.params, d.train(), optimizer.layout(), optimizer.grad_shard());
    const Batch b = batch_of(rank, m.config.vocab_size);
    reducer.arm();
    const at::Tensor loss = (m.model->forward(b.ids, b.layout) * b.weights).sum();
    // After the forward only the rest (embeddings, norm, head) is gathered: layers were freed.
    const dist::ShardLayout& layout = optimizer.layout();
    for (std::size_t u = 0; u < layout.units().size(); ++u)
      EXPECT_EQ(sharded->gathered(u), layout.units()[u].source == 0) << "unit " << u;  // decoder_units()'s first: the rest
    loss.backward();
    reducer.finish();
    for (std::size_t u = 0; u < layout.units().size(); ++u)
      EXPECT_EQ(sharded->gathered(u), layout.units()[u].source == 0) << "unit " << u << " after backward";

    // This rank's chunk of the summed gradients: the reference's values at its pieces.
    // Float32 sums in another order (two ranks' gradients added, against one backward): relative
    // to the gradients' scale.
    double worst = 0.0, scale = 0.0;
    for (const dist::ShardLayout::Piece& piece : layout.pieces()) {
      const at::Tensor want = ref.grads.at(n.names[piece.param]).reshape(-1).narrow(0, piece.param_offset, piece.length);
      const at::Tensor got = optimizer.grad_shard().narrow(0, piece.shard_offset, piece.length);
      worst = std::max(worst, (want - got).abs().max().item<double>());
      scale = std::max(scale, want.abs().max().item<double>());
    }
    EXPECT_GT(scale, 1.0);
    EXPECT_LE(worst, 1e-6 * scale) << "rank " << rank << ", largest gradient " << scale;

    sharded->free_all();
    {
      torch::NoGradGuard no_grad;
      const dist::ShardedParameters::Hold whole(sharded.get());
      for (std::size_t u = 0; u < layout.units().size(); ++u) EXPECT_TRUE(sharded->gathered(u));
      const Batch b0 = batch_of(0, m.config.vocab_size);
      const at::Tensor logits = m.model->forward(b0.ids, b0.layout);
      EXPECT_LE((logits - ref.logits0).abs().max().item<double>(), 1e-5);
      for (std::size_t u = 0; u < layout.units().size(); ++u) EXPECT_TRUE(sharded->gathered(u)) << "held";
    }
    for (std::size_t u = 0; u < layout.units().size(); ++u) EXPECT_FALSE(sharded->gathered(u)) << "after the hold";
  });
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, ShardedParametersTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

}  // namespace
