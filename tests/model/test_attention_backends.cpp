// The attention seam (core/model/attention/): every backend that runs on this machine against
// the eager one — the reference, held to transformers by test_transformer.cpp — on every fixture
// family and every layout the model serves (padded rows, a packed row with its gradients, KV-cache
// decoding, the engine's slots): float32 within 1e-5, bf16 within the bf16 bound of
// ForwardParity.Bfloat16StaysCloseToFloat32. On CPU `flash_varlen` falls back to sdpa (logged);
// its CUDA kernel's arguments (cu_seqlens, window offsets) are held to the eager masks below.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/model/attention/attention.h"
#include "core/model/attention/varlen.h"
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "model_fixtures.h"

using namespace grpo::core;
using grpo::testing::fixture_dir;
using grpo::testing::fixture_reference;
using grpo::testing::max_abs_diff;

namespace {

constexpr double kFloat32Bound = 1e-5;  // the bound: same math, another kernel

using BackendCase = std::tuple<std::string, AttentionBackend>;

std::string case_name(const ::testing::TestParamInfo<BackendCase>& info) {
  return std::get<0>(info.param) + "_" + attention_backend_name(std::get<1>(info.param));
}

// Backends other than eager that run on a CPU: sdpa everywhere (LibTorch 2.x's fused CPU kernel,
// or ATen's math op on 1.13), flash_varlen through its fallback.
std::vector<BackendCase> cases() {
  std::vector<BackendCase> out;
  for (const auto& m : grpo::testing::fixture_models())
    for (auto b : {AttentionBackend::kSdpa, AttentionBackend::kFlashVarlen}) out.emplace_back(m, b);
  return out;
}

class BackendEqualsEager : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    model_ = load_model(fixture_dir(std::get<0>(GetParam()))).model;
    model_->eval();
    ref_ = fixture_reference(std::get<0>(GetParam()));
  }
  torch::Tensor ids(int k) { return ref_.at("seq." + std::to_string(k) + ".input_ids"); }

  // f() under the backend under test and under eager.
  template <typename F>
  std::pair<torch::Tensor, torch::Tensor> both(CausalLM& model, F f) {
    model->set_attention_backend(std::get<1>(GetParam()));
    auto tested = f();
    model->set_attention_backend(AttentionBackend::kEager);
    auto eager = f();
    return {tested, eager};
  }

  CausalLM model_{nullptr};
  std::map<std::string, torch::Tensor> ref_;
};

TEST_P(BackendEqualsEager, PaddedRowsLeftAndRight) {
  torch::NoGradGuard no_grad;
  for (bool left : {false, true}) {
    std::vector<torch::Tensor> seqs = {ids(0), ids(1), ids(2)};
    int64_t T = 0;
    for (const auto& s : seqs) T = std::max(T, s.size(0));
    auto input = torch::full({3, T}, 7, torch::kLong);
    auto mask = torch::zeros({3, T}, torch::kLong);
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t L = seqs[b].size(0), start = left ? T - L : 0;
      input[b].narrow(0, start, L).copy_(seqs[b]);
      mask[b].narrow(0, start, L).fill_(1);
    }
    auto [tested, eager] = both(model_, [&] { return model_(input, AttentionLayout::padded(mask)); });
    // Padding positions are nobody's tokens: compare the real ones.
    auto real = mask.to(torch::kBool);
    EXPECT_LT(max_abs_diff(tested.index({real}), eager.index({real})), kFloat32Bound) << (left ? "left" : "right");
  }
}

TEST_P(BackendEqualsEager, PackedRowAndItsGradients) {
  std::vector<int64_t> lengths;
  std::vector<torch::Tensor> seqs;
  for (int k : {3, 0, 2, 1}) {
    seqs.push_back(ids(k));
    lengths.push_back(ids(k).size(0));
  }
  auto input = torch::cat(seqs).unsqueeze(0);
  const auto layout = AttentionLayout::packed(lengths);
  auto weights = torch::randn({input.size(1), model_->config().vocab_size});
  std::vector<torch::Tensor> grads;
  auto [tested, eager] = both(model_, [&] {
    model_->zero_grad();
    auto logits = model_(input, layout);
    (logits[0] * weights).sum().backward();
    // The query projection of the first layer: its gradient flows through every attention call.
    auto& attn = model_->model->layers[0]->as<DecoderLayer>()->self_attn;
    grads.push_back((attn->qkv_proj ? attn->qkv_proj : attn->q_proj)->weight.grad().clone());
    return logits.detach();
  });
  EXPECT_LT(max_abs_diff(tested, eager), kFloat32Bound);
  const double scale = grads[1].abs().max().item<double>();
  EXPECT_LT(max_abs_diff(grads[0], grads[1]), kFloat32Bound * std::max(1.0, scale)) << "gradient scale " << scale;
}

TEST_P(BackendEqualsEager, KvCacheDecoding) {
  torch::NoGradGuard no_grad;
  auto seq = ids(3);
  const int64_t prompt = 9, steps = seq.size(0) - prompt;
  auto run = [&] {
    KVCache cache(model_->config(), 1, seq.size(0), torch::kFloat32);
    std::vector<torch::Tensor> outs;
    auto x = seq.narrow(0, 0, prompt).unsqueeze(0);
    outs.push_back(model_(x, model_->decode_layout(cache, prompt), &cache)[0]);
    for (int64_t s = 0; s < steps; ++s) {
      auto t = seq.narrow(0, prompt + s, 1).unsqueeze(0);
      outs.push_back(model_(t, model_->decode_layout(cache, 1), &cache)[0]);
    }
    return torch::cat(outs);
  };
  auto [tested, eager] = both(model_, run);
  EXPECT_LT(max_abs_diff(tested, eager), kFloat32Bound);
}

TEST_P(BackendEqualsEager, EngineSlotsDecodeAndExtend) {
  torch::NoGradGuard no_grad;
  auto a = ids(3), b = ids(1);
  auto run = [&] {
    // Two slots of different lengths (the engine's continuous batching), one and four tokens a step.
    SlotKVCache slots(model_->config(), 2, 64, torch::kFloat32);
    std::vector<torch::Tensor> outs;
    for (int64_t row = 0; row < 2; ++row) {
      const auto& seq = row == 0 ? a : b;
      const int64_t prompt = row == 0 ? 9 : 5;
      KVCache prefill(model_->config(), 1, prompt, torch::kFloat32);
      model_(seq.narrow(0, 0, prompt).unsqueeze(0), model_->decode_layout(prefill, prompt), &prefill);
      slots.load_prefix(row, prefill, 0, prompt);
    }
    for (int step = 0; step < 2; ++step) {  // b (19 tokens) ends at 15
      auto next = torch::stack({a[slots.length(0)], b[slots.length(1)]});
      outs.push_back(model_->decode_slots(next, slots));
      auto more = torch::stack({a.narrow(0, slots.length(0), 4), b.narrow(0, slots.length(1), 4)});
      outs.push_back(model_->extend_slots(more, slots, 0).reshape({-1, model_->config().hidden_size}));
    }
    return model_->logits(torch::cat(outs));
  };
  auto [tested, eager] = both(model_, run);
  EXPECT_LT(max_abs_diff(tested, eager), kFloat32Bound);
}

TEST_P(BackendEqualsEager, Bfloat16WithinTheBf16Bound) {
  torch::NoGradGuard no_grad;
  auto bf16 = load_model(fixture_dir(std::get<0>(GetParam())), torch::kBFloat16).model;
  std::vector<int64_t> lengths = {ids(3).size(0), ids(0).size(0)};
  auto input = torch::cat({ids(3), ids(0)}).unsqueeze(0);
  const auto layout = AttentionLayout::packed(lengths);
  auto [tested, eager] = both(bf16, [&] { return bf16(input, layout).to(torch::kFloat64); });
  auto fp32 = model_(input, layout).to(torch::kFloat64);
  // ForwardParity.Bfloat16StaysCloseToFloat32's bound (relative RMS against float32's spread):
  // a kernel may round differently from eager, by no more than bf16 itself does.
  const double spread = fp32.pow(2).mean().sqrt().item<double>();
  const double bound = bf16->config().num_experts > 0 ? 0.1 : 0.03;
  EXPECT_LT((tested - eager).pow(2).mean().sqrt().item<double>() / spread, bound);
  EXPECT_LT((tested - fp32).pow(2).mean().sqrt().item<double>() / spread, bound);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BackendEqualsEager, ::testing::ValuesIn(cases()), case_name);

// ---- fixed-shape decode steps (the rollout engine's CUDA graphs) -------------------------

namespace {

class FixedShapeDecode : public ::testing::TestWithParam<BackendCase> {};

std::vector<BackendCase> fixed_cases() {
  std::vector<BackendCase> out;
  for (const auto& m : grpo::testing::fixture_models())
    for (auto b : {AttentionBackend::kEager, AttentionBackend::kSdpa}) out.emplace_back(m, b);
  return out;
}

}  // namespace

// decode_slots_fixed (every key of the cache, masked past each row's length; padding rows in
// free slots) against decode_slots under eager, 30 steps of two rows of different lengths: past
// the sliding windows (16) of mistral and the Gemmas. Models whose step reads the device from
// the host refuse it: the MoE fixtures and the length-dependent RoPE scalings (dynamic, longrope).
TEST_P(FixedShapeDecode, EqualsDecodeSlotsWithPaddingRows) {
  const std::string name = std::get<0>(GetParam());
  torch::NoGradGuard no_grad;
  auto model = load_model(fixture_dir(name)).model;
  model->eval();
  const bool host_reads = name == "qwen2_moe" || name == "qwen3_moe" || name == "phi3" || name == "llama_dynamic";
  EXPECT_EQ(!model->fixed_decode_unsupported().empty(), host_reads) << model->fixed_decode_unsupported();
  const auto& config = model->config();
  auto gen = at::detail::createCPUGenerator(17);
  const auto a = at::randint(3, config.vocab_size, {40}, gen, torch::kLong);
  const auto b = at::randint(3, config.vocab_size, {40}, gen, torch::kLong);
  auto prefill = [&](SlotKVCache& slots) {
    for (int64_t row = 0; row < 2; ++row) {
      const int64_t prompt = row == 0 ? 7 : 3;
      KVCache cache(config, 1, prompt, torch::kFloat32);
      model(((row == 0) ? a : b).narrow(0, 0, prompt).unsqueeze(0), model->decode_layout(cache, prompt), &cache);
      slots.load_prefix(row, cache, 0, prompt);
    }
  };
  if (host_reads) {
    SlotKVCache slots(config, 4, 48, torch::kFloat32);
    EXPECT_THROW(model->decode_slots_fixed(torch::zeros({4}, torch::kLong), torch::zeros({4}, torch::kLong), slots),
                 std::invalid_argument);
    return;
  }
  model->set_attention_backend(AttentionBackend::kEager);
  SlotKVCache dynamic(config, 2, 48, torch::kFloat32);
  prefill(dynamic);
  std::vector<torch::Tensor> expected;
  for (int step = 0; step < 30; ++step)
    expected.push_back(model->logits(model->decode_slots(torch::stack({a[dynamic.length(0)], b[dynamic.length(1)]}), dynamic)));

  model->set_attention_backend(std::get<1>(GetParam()));
  SlotKVCache fixed(config, 4, 48, torch::kFloat32);  // rows 2 and 3 pad the bucket of 4
  prefill(fixed);
  for (int step = 0; step < 30; ++step) {
    const int64_t la = fixed.length(0), lb = fixed.length(1);
    const auto tokens = torch::stack({a[la], b[lb], torch::zeros({}, torch::kLong), torch::zeros({}, torch::kLong)});
    const auto past = torch::tensor({la, lb, int64_t{0}, int64_t{0}}, torch::kLong);
    const auto logits = model->logits(model->decode_slots_fixed(tokens, past, fixed));
    fixed.advance(0, 2, 1);  // the real rows only
    EXPECT_LT(max_abs_diff(logits.narrow(0, 0, 2), expected[static_cast<std::size_t>(step)]), kFloat32Bound) << "step " << step;
  }
  EXPECT_EQ(fixed.length(0), 37);
  EXPECT_EQ(fixed.length(2), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixedShapeDecode, ::testing::ValuesIn(fixed_cases()), case_name);

// ---- the kernel choice ----------------------------------------------------------------------

TEST(AttentionKernelChoice, FallsBackWhereAKernelCannotRunTheLayer) {
  AttentionSpec spec;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  AttentionContext context;
  context.layout = AttentionLayout::packed({3, 2});
  auto q = torch::zeros({1, 5, 4, 16});

  context.backend = AttentionBackend::kEager;
  EXPECT_EQ(choose_attention_kernel(spec, context, q).kernel, AttentionKernel::kEager);
  context.backend = AttentionBackend::kSdpa;
  EXPECT_EQ(choose_attention_kernel(spec, context, q).kernel, AttentionKernel::kSdpa);
  EXPECT_EQ(choose_attention_kernel(spec, context, q).fallback_reason, "");
  // flash_varlen on a CPU: sdpa, and the reason is said.
  context.backend = AttentionBackend::kFlashVarlen;
  auto choice = choose_attention_kernel(spec, context, q);
  EXPECT_EQ(choice.kernel, AttentionKernel::kSdpa);
  EXPECT_NE(choice.fallback_reason.find("flash_varlen"), std::string::npos) << choice.fallback_reason;
  // Gemma 2's soft-capping: only eager has it, whatever is asked for.
  spec.softcap = 50.0;
  for (auto b : {AttentionBackend::kSdpa, AttentionBackend::kFlashVarlen, AttentionBackend::kAuto}) {
    context.backend = b;
    choice = choose_attention_kernel(spec, context, q);
    EXPECT_EQ(choice.kernel, AttentionKernel::kEager) << attention_backend_name(b);
    if (b != AttentionBackend::kAuto)
      EXPECT_NE(choice.fallback_reason.find("soft-capping"), std::string::npos) << choice.fallback_reason;
  }
}

TEST(AttentionBackendNames, ParseWhatTheyPrint) {
  for (auto b : {AttentionBackend::kAuto, AttentionBackend::kEager, AttentionBackend::kSdpa, AttentionBackend::kFlashVarlen})
    EXPECT_EQ(parse_attention_backend(attention_backend_name(b)), b);
  EXPECT_FALSE(parse_attention_backend("flash").has_value());
}

// ---- the varlen kernel's arguments ------------------------------------------------------------

TEST(VarlenPlan, OneHandWrittenCase) {
  // Sequences of 3 and 2 tokens, window 2: each query sees itself and the token before it, in
  // its own sequence only. Written out by hand.
  const auto plan = varlen_plan({0, 3, 5}, 2, torch::kCPU);
  EXPECT_EQ(plan.cu_seqlens.scalar_type(), torch::kInt32);
  EXPECT_EQ(plan.cu_seqlens.to(torch::kLong).equal(torch::tensor({0, 3, 5}, torch::kLong)), true);
  EXPECT_EQ(plan.max_seqlen, 3);
  EXPECT_EQ(plan.window_left, 1);
  EXPECT_EQ(plan.window_right, 0);
  auto expected = torch::tensor({1, 0, 0, 0, 0,  //
                                 1, 1, 0, 0, 0,  //
                                 0, 1, 1, 0, 0,  //
                                 0, 0, 0, 1, 0,  //
                                 0, 0, 0, 1, 1},
                                torch::kBool)
                      .view({5, 5});
  EXPECT_TRUE(varlen_visibility(plan).equal(expected));
  EXPECT_TRUE(packed_visibility({0, 3, 5}, 2).equal(expected));
}

TEST(VarlenPlan, MatchesTheEagerMasksOfPackedRows) {
  const std::vector<std::vector<int64_t>> rows = {{0, 1}, {0, 7}, {0, 4, 5, 13, 29}, {0, 16, 32, 33}, {0, 2, 40}};
  for (const auto& cu : rows)
    for (int64_t window : {0, 1, 2, 4, 16, 64}) {
      const auto plan = varlen_plan(cu, window, torch::kCPU);
      int64_t longest = 0;
      for (std::size_t i = 1; i < cu.size(); ++i) longest = std::max(longest, cu[i] - cu[i - 1]);
      EXPECT_EQ(plan.max_seqlen, longest);
      EXPECT_TRUE(varlen_visibility(plan).equal(packed_visibility(cu, window)))
          << "row of " << cu.size() - 1 << " sequences, window " << window;
    }
}

TEST(VarlenPlan, AKeptCopyServesTheSameRowAndIsReplacedForAnother) {
  // One pass's layers share a layout: the second plan reads the first one's device tensor; a
  // row with other lengths (even as many) gets a fresh copy with its own values.
  VarlenCopy copy;
  const auto first = varlen_plan({0, 3, 5}, 0, torch::kCPU, &copy);
  const auto again = varlen_plan({0, 3, 5}, 2, torch::kCPU, &copy);
  EXPECT_EQ(again.cu_seqlens.data_ptr(), first.cu_seqlens.data_ptr());
  EXPECT_EQ(again.window_left, 1);
  const auto other = varlen_plan({0, 2, 5}, 0, torch::kCPU, &copy);
  EXPECT_NE(other.cu_seqlens.data_ptr(), first.cu_seqlens.data_ptr());
  EXPECT_TRUE(other.cu_seqlens.to(torch::kLong).equal(torch::tensor({0, 2, 5}, torch::kLong)));
  EXPECT_TRUE(first.cu_seqlens.to(torch::kLong).equal(torch::tensor({0, 3, 5}, torch::kLong))) << "the first plan's copy is its own";
  EXPECT_EQ(copy.host, (std::vector<int64_t>{0, 2, 5}));
}

TEST(VarlenPlan, RejectsARowThatDoesNotStartAtZero) {
  EXPECT_THROW(varlen_plan({1, 3}, 0, torch::kCPU), std::invalid_argument);
  EXPECT_THROW(varlen_plan({0}, 0, torch::kCPU), std::invalid_argument);
}

}  // namespace
