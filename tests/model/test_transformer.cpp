// Forward-pass parity: single sequences, padded batches (right and left padding), a packed row,
// KV-cache and slot decoding, greedy continuations. Each test runs twice per fixture model:
// Float64/* against the committed independent reference (tests/fixtures/models, float64 PyTorch
// written from transformers' modeling code), Transformers/* against transformers itself on the
// model as transformers saves it (tests/reference/models; ctest label `reference`).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/model/transformer.h"
#include "core/util/fs.h"
#include "model_fixtures.h"

using namespace grpo::core;
using grpo::testing::case_model_dir;
using grpo::testing::case_reference;
using grpo::testing::fixture_cases;
using grpo::testing::fixture_dir;
using grpo::testing::FixtureCase;
using grpo::testing::max_abs_diff;
using grpo::testing::Reference;

namespace {

constexpr double kLogitTolerance = 1e-4;  // the fp32 bound
constexpr int kSequences = 4;

class ForwardParity : public ::testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    loaded_ = load_model(case_model_dir(GetParam()));
    model_ = loaded_.model;
    model_->eval();
    ref_ = case_reference(GetParam());
  }
  torch::Tensor ids(int k) { return ref_.at("seq." + std::to_string(k) + ".input_ids"); }
  torch::Tensor logits(int k) { return ref_.at("seq." + std::to_string(k) + ".logits"); }

  LoadedModel loaded_;
  CausalLM model_{nullptr};
  std::map<std::string, torch::Tensor> ref_;
  torch::NoGradGuard no_grad_;
};

// Pads the fixture sequences into [B, T] with junk pad ids (so a leak would show).
std::pair<torch::Tensor, torch::Tensor> pad_batch(const std::vector<torch::Tensor>& seqs, bool left) {
  int64_t T = 0;
  for (const auto& s : seqs) T = std::max(T, s.size(0));
  auto input = torch::full({static_cast<int64_t>(seqs.size()), T}, 299, torch::kLong);
  auto mask = torch::zeros({static_cast<int64_t>(seqs.size()), T}, torch::kLong);
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const int64_t L = seqs[b].size(0), start = left ? T - L : 0;
    input[b].narrow(0, start, L).copy_(seqs[b]);
    mask[b].narrow(0, start, L).fill_(1);
  }
  return {input, mask};
}

}  // namespace

TEST_P(ForwardParity, SingleSequences) {
  for (int k = 0; k < kSequences; ++k) {
    auto x = ids(k).unsqueeze(0);
    auto out = model_(x, AttentionLayout::padded(torch::ones_like(x)));
    EXPECT_LT(max_abs_diff(out[0], logits(k)), kLogitTolerance) << "seq " << k;
  }
  auto x = ref_.at("long.input_ids").unsqueeze(0);
  auto out = model_(x, AttentionLayout::padded(torch::ones_like(x)));
  EXPECT_LT(max_abs_diff(out[0], ref_.at("long.logits")), kLogitTolerance) << "100 tokens";
}

TEST_P(ForwardParity, PaddedBatchRightAndLeft) {
  std::vector<torch::Tensor> seqs;
  for (int k = 0; k < kSequences; ++k) seqs.push_back(ids(k));
  for (bool left : {false, true}) {
    auto [input, mask] = pad_batch(seqs, left);
    auto out = model_(input, AttentionLayout::padded(mask));
    const int64_t T = input.size(1);
    double worst = 0;
    for (int k = 0; k < kSequences; ++k) {
      const int64_t L = seqs[k].size(0), start = left ? T - L : 0;
      const double diff = max_abs_diff(out[k].narrow(0, start, L), logits(k));
      worst = std::max(worst, diff);
      EXPECT_LT(diff, kLogitTolerance) << (left ? "left" : "right") << " padding, seq " << k;
    }
    std::cout << "[parity] " << GetParam().model << (left ? " left" : " right") << "-padded: max |delta| = " << worst << "\n";
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>()) << "padding rows must stay finite";
  }
}

TEST_P(ForwardParity, PackedRow) {
  std::vector<torch::Tensor> seqs;
  std::vector<int64_t> lengths;
  for (int k : {3, 0, 2, 1}) {  // an order different from the padded test
    seqs.push_back(ids(k));
    lengths.push_back(ids(k).size(0));
  }
  auto out = model_(torch::cat(seqs).unsqueeze(0), AttentionLayout::packed(lengths));
  int64_t start = 0;
  int i = 0;
  double worst = 0;
  for (int k : {3, 0, 2, 1}) {
    const double diff = max_abs_diff(out[0].narrow(0, start, lengths[i]), logits(k));
    worst = std::max(worst, diff);
    EXPECT_LT(diff, kLogitTolerance) << "seq " << k;
    start += lengths[i++];
  }
  std::cout << "[parity] " << GetParam().model << " packed: max |delta| = " << worst << "\n";
}

TEST_P(ForwardParity, GreedyDecodingWithKVCacheMatchesReference) {
  auto prompt = ref_.at("greedy.prompt_ids");
  auto expected = ref_.at("greedy.ids");
  const int64_t steps = expected.size(0);
  KVCache cache(model_->config(), 1, prompt.size(0) + steps, torch::kFloat32);
  auto next_input = prompt.unsqueeze(0);
  std::vector<int64_t> produced;
  for (int64_t s = 0; s < steps; ++s) {
    auto layout = model_->decode_layout(cache, next_input.size(1));
    auto out = model_(next_input, layout, &cache);
    const int64_t token = out[0][-1].argmax().item<int64_t>();
    produced.push_back(token);
    next_input = torch::tensor({token}, torch::kLong).unsqueeze(0);
  }
  EXPECT_EQ(produced, std::vector<int64_t>(expected.data_ptr<int64_t>(), expected.data_ptr<int64_t>() + steps));
}

TEST_P(ForwardParity, BatchedCacheDecodingOfLeftPaddedPromptsMatchesFullForward) {
  // Prefill left-padded prompts, then feed each row's continuation token by token; every
  // step's logits must equal the reference logits of the whole sequence.
  std::vector<torch::Tensor> prompts, rest;
  const int64_t steps = 5;
  for (int k : {1, 3}) {
    prompts.push_back(ids(k).narrow(0, 0, ids(k).size(0) - steps));
    rest.push_back(ids(k).narrow(0, ids(k).size(0) - steps, steps));
  }
  auto [input, mask] = pad_batch(prompts, /*left=*/true);
  KVCache cache(model_->config(), 2, input.size(1) + steps, torch::kFloat32);
  auto out = model_(input, model_->decode_layout(cache, input.size(1), mask), &cache);
  int r = 0;
  for (int k : {1, 3}) {
    const int64_t Lp = prompts[r].size(0);
    EXPECT_LT(max_abs_diff(out[r].narrow(0, input.size(1) - Lp, Lp), logits(k).narrow(0, 0, Lp)), kLogitTolerance);
    ++r;
  }
  for (int64_t s = 0; s < steps; ++s) {
    auto step = torch::stack({rest[0][s], rest[1][s]}).unsqueeze(1);
    auto step_out = model_(step, model_->decode_layout(cache, 1), &cache);
    r = 0;
    for (int k : {1, 3}) {
      const int64_t pos = prompts[r].size(0) + s;
      EXPECT_LT(max_abs_diff(step_out[r][0], logits(k)[pos]), kLogitTolerance) << "row " << r << " step " << s;
      ++r;
    }
  }
  EXPECT_EQ(cache.length(), input.size(1) + steps);
}

TEST_P(ForwardParity, DecodeStepWithAPaddedRowKeepsPositionsAndMask) {
  // Row 0 gets a real token this step, row 1 a padding slot (it has finished); on the next step
  // row 1's token must still see exactly its own real tokens at the right position.
  auto a = ids(1), b = ids(3);
  const int64_t La = 6, Lb = 9;
  auto [input, mask] = pad_batch({a.narrow(0, 0, La), b.narrow(0, 0, Lb)}, /*left=*/true);
  KVCache cache(model_->config(), 2, input.size(1) + 2, torch::kFloat32);
  model_(input, model_->decode_layout(cache, input.size(1), mask), &cache);
  auto step1 = torch::stack({a[La], torch::tensor(299, torch::kLong)}).unsqueeze(1);
  auto step1_mask = torch::tensor({1, 0}, torch::kLong).unsqueeze(1);
  model_(step1, model_->decode_layout(cache, 1, step1_mask), &cache);
  EXPECT_EQ(cache.next_positions()[0].item<int64_t>(), La + 1);
  EXPECT_EQ(cache.next_positions()[1].item<int64_t>(), Lb);
  auto step2 = torch::stack({a[La + 1], b[Lb]}).unsqueeze(1);
  auto out = model_(step2, model_->decode_layout(cache, 1), &cache);
  EXPECT_LT(max_abs_diff(out[0][0], logits(1)[La + 1]), kLogitTolerance);
  EXPECT_LT(max_abs_diff(out[1][0], logits(3)[Lb]), kLogitTolerance);
}

TEST_P(ForwardParity, SlotDecodingAndExtensionMatchTheReference) {
  // The rollout engine's path: prefill a prompt into a KVCache, move it into a slot, then decode
  // token by token (decode_slots) and feed several tokens at once (extend_slots); the 40-token
  // sequence runs past the fixtures' sliding windows (16) and into longrope's long factors only
  // in single forwards (calls here stay under 64 positions).
  auto seq = ids(3);
  const int64_t prompt = 9, L = seq.size(0);
  KVCache prefill(model_->config(), 1, prompt, torch::kFloat32);
  auto x = seq.narrow(0, 0, prompt).unsqueeze(0);
  model_(x, model_->decode_layout(prefill, prompt), &prefill);
  SlotKVCache slots(model_->config(), 2, L, torch::kFloat32);
  slots.load_prefix(1, prefill, 0, prompt);
  slots.move_slot(1, 0);
  int64_t pos = prompt;
  double worst = 0;
  while (pos < L) {
    const int64_t n = pos % 3 == 0 ? std::min<int64_t>(4, L - pos) : 1;  // steps of 1 and of 4 tokens
    torch::Tensor hidden = n == 1 ? model_->decode_slots(seq.narrow(0, pos, 1), slots).unsqueeze(1)
                                  : model_->extend_slots(seq.narrow(0, pos, n).unsqueeze(0), slots, 0);
    const double diff = max_abs_diff(model_->logits(hidden)[0], logits(3).narrow(0, pos, n));
    worst = std::max(worst, diff);
    EXPECT_LT(diff, kLogitTolerance) << "positions " << pos << ".." << pos + n - 1;
    pos += n;
  }
  EXPECT_EQ(slots.length(0), L);
  std::cout << "[parity] " << GetParam().model << " slot decoding: max |delta| = " << worst << "\n";
}

TEST_P(ForwardParity, MisuseIsAnError) {
  auto x = ids(0).unsqueeze(0);
  KVCache small(model_->config(), 1, 4, torch::kFloat32);
  EXPECT_THROW(model_(x, model_->decode_layout(small, x.size(1)), &small), std::invalid_argument);  // 7 > 4
  KVCache cache(model_->config(), 1, 16, torch::kFloat32);
  EXPECT_THROW(model_(x, AttentionLayout::packed({x.size(1)}), &cache), std::invalid_argument);
  EXPECT_THROW(model_(x, AttentionLayout::packed({3, 3})), std::invalid_argument);  // lengths sum 6 != 7
  {
    torch::AutoGradMode grad(true);
    EXPECT_THROW(model_(x, model_->decode_layout(cache, x.size(1)), &cache), std::invalid_argument);
  }
}

TEST_P(ForwardParity, PackedLogProbsEqualPerSequenceLogProbs) {
  std::vector<torch::Tensor> seqs;
  std::vector<int64_t> lengths;
  for (int k = 0; k < kSequences; ++k) {
    seqs.push_back(ids(k));
    lengths.push_back(ids(k).size(0));
  }
  auto packed_hidden = model_->hidden_states(torch::cat(seqs).unsqueeze(0), AttentionLayout::packed(lengths))[0];
  // Target of each position: the next token of the same sequence (last position: token 0).
  std::vector<torch::Tensor> targets;
  for (const auto& s : seqs) targets.push_back(torch::cat({s.narrow(0, 1, s.size(0) - 1), torch::zeros({1}, torch::kLong)}));
  const LogProbOptions options = model_->logprob_options({});  // Gemma 2's soft-capped logits
  auto packed = token_logprobs(packed_hidden, model_->lm_head_weight(), torch::cat(targets), options).logprobs;
  int64_t start = 0;
  for (int k = 0; k < kSequences; ++k) {
    auto x = seqs[k].unsqueeze(0);
    auto h = model_->hidden_states(x, AttentionLayout::padded(torch::ones_like(x)))[0];
    auto single = token_logprobs(h, model_->lm_head_weight(), targets[k], options).logprobs;
    EXPECT_LT(max_abs_diff(packed.narrow(0, start, lengths[k]), single), 1e-5) << "seq " << k;
    // And both agree with log_softmax of the reference logits.
    auto ref = torch::log_softmax(logits(k).to(torch::kFloat64), -1).gather(1, targets[k].unsqueeze(1)).squeeze(1);
    EXPECT_LT(max_abs_diff(single, ref), kLogitTolerance) << "seq " << k;
    start += lengths[k];
  }
}

TEST_P(ForwardParity, Bfloat16StaysCloseToFloat32) {
  auto bf16 = load_model(case_model_dir(GetParam()), torch::kBFloat16).model;
  auto x = ids(3).unsqueeze(0);
  auto out = bf16(x, AttentionLayout::padded(torch::ones_like(x)));
  // (soft-capped logits are capped, and returned, in float32)
  EXPECT_EQ(out.scalar_type(), bf16->config().final_logit_softcapping > 0 ? torch::kFloat32 : torch::kBFloat16);
  // bf16 keeps 8 mantissa bits (relative rounding 2^-9 per op); over two layers the
  // error relative to the logits' spread stays at the percent level.
  auto ref = logits(3).to(torch::kFloat64);
  const double rel_rms = (out[0].to(torch::kFloat64) - ref).pow(2).mean().sqrt().item<double>() /
                         ref.pow(2).mean().sqrt().item<double>();
  // Mixtures of experts: bf16 rounding flips the routing of near-tie tokens (docs/precision.md).
  EXPECT_LT(rel_rms, bf16->config().num_experts > 0 ? 0.1 : 0.03);
  auto agree = (out[0].argmax(-1) == logits(3).argmax(-1)).to(torch::kFloat32).mean().item<float>();
  EXPECT_GT(agree, 0.9);
}

INSTANTIATE_TEST_SUITE_P(Float64, ForwardParity,
                         ::testing::ValuesIn(fixture_cases(Reference::kFloat64, grpo::testing::fixture_models())),
                         grpo::testing::fixture_case_name);
INSTANTIATE_TEST_SUITE_P(Transformers, ForwardParity,
                         ::testing::ValuesIn(fixture_cases(Reference::kTransformers, grpo::testing::fixture_models())),
                         grpo::testing::fixture_case_name);

// Rotary positions restart at 0 for every sequence of a packed row, and count only real tokens
// in a padded batch. RoPE scores depend only on position differences, so a layout that kept
// counting across sequences would give the same logits in exact arithmetic; the positions
// themselves are the contract (and transformers' packed position_ids), checked by hand here.
TEST(AttentionLayoutPositions, PackedRestartPerSequence) {
  const AttentionLayout layout = AttentionLayout::packed({3, 1, 2});
  ASSERT_EQ(layout.position_ids.sizes(), (std::vector<int64_t>{1, 6}));
  const auto p = layout.position_ids.contiguous();
  EXPECT_EQ(std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + 6),
            (std::vector<int64_t>{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(layout.cu_seqlens, (std::vector<int64_t>{0, 3, 4, 6}));
}

TEST(AttentionLayoutPositions, PaddedCountRealTokensOnly) {
  const auto mask = torch::tensor({0, 0, 1, 1, 1, 1, 1, 1, 0, 0}, torch::kLong).view({2, 5});  // left, right padded
  const auto p = AttentionLayout::padded(mask).position_ids.contiguous();
  ASSERT_EQ(p.sizes(), (std::vector<int64_t>{2, 5}));
  // Row 0: two left pads (position 0), then 0 1 2. Row 1: 0 1 2; its right pads are never read.
  EXPECT_EQ(std::vector<int64_t>(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(p[0][3].item<int64_t>(), 1);
  EXPECT_EQ(p[0][4].item<int64_t>(), 2);
  EXPECT_EQ(p[1][0].item<int64_t>(), 0);
  EXPECT_EQ(p[1][1].item<int64_t>(), 1);
  EXPECT_EQ(p[1][2].item<int64_t>(), 2);
}

TEST(Rotary, Llama3ScalingKeepsShortSlowsLongAndInterpolatesBetween) {
  // Hand computation from the published rule (original_max 64, factor 8, low 1, high 4):
  // wavelengths 2*pi/inv_freq of theta=500000, d=16; < 16 kept, > 64 divided by 8, between
  // interpolated with smooth = (64/wavelen - 1) / 3.
  auto c = parse_model_config(grpo::core::read_file(fixture_dir("llama") + "/config.json"), "llama");
  RotaryEmbedding rope(c);
  auto inv = rope.inv_freq().to(torch::kFloat64);
  for (int64_t i = 0; i < 8; ++i) {
    const double base = 1.0 / std::pow(500000.0, 2.0 * i / 16.0);
    const double wavelen = 2 * M_PI / base;
    double expected = base;
    if (wavelen > 64) expected = base / 8;
    else if (wavelen >= 16) {
      const double smooth = (64 / wavelen - 1) / 3;
      expected = (1 - smooth) * base / 8 + smooth * base;
    }
    EXPECT_NEAR(inv[i].item<double>() / expected, 1.0, 1e-6) << "frequency " << i;
  }
}

TEST(Rotary, SwappedHalvesWithSignedSinEqualTransformersRotateHalfBitForBit) {
  // transformers' apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, rotate_half(x) =
  // cat(-x2, x1) over the halves of the last dim, written out here; our tables fold the sign
  // into sin and swap the halves instead. Negation is exact, so the two agree bit for bit: in
  // float32, with bf16 q times float32 tables (bf16-mixed: q_proj's output under autocast, the
  // residual stream in float32) and with both in bf16 (a bf16 model, as the engine runs it).
  auto gen = at::detail::createCPUGenerator(7);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const auto cos = torch::randn({B, T, D}, gen), sin = torch::randn({B, T, D}, gen);
  const RotaryTables tables = rotary_tables_from({cos, sin});
  ASSERT_EQ(tables.cos.sizes(), (std::vector<int64_t>{B, T, 1, D}));
  ASSERT_FALSE(tables.local_cos.defined());
  struct Case {
    torch::Dtype q, tables;
  };
  for (const Case c : {Case{torch::kFloat32, torch::kFloat32}, Case{torch::kBFloat16, torch::kFloat32},
                       Case{torch::kBFloat16, torch::kBFloat16}}) {
    const auto q = torch::randn({B, T, H, D}, gen).to(c.q);
    // As the attention casts the tables to the hidden states' dtype.
    const auto cos_c = cos.to(c.tables), sin_c = sin.to(c.tables);
    const auto rotate_half = torch::cat({-q.narrow(-1, D / 2, D / 2), q.narrow(-1, 0, D / 2)}, -1);
    const auto expected = q * cos_c.unsqueeze(2) + rotate_half * sin_c.unsqueeze(2);
    const auto got = apply_rotary(q, tables.cos.to(c.tables), tables.sin_signed.to(c.tables));
    ASSERT_EQ(got.scalar_type(), expected.scalar_type());
    EXPECT_TRUE(torch::equal(got, expected)) << "q " << c.q << ", tables " << c.tables << ": max |diff| "
                                             << max_abs_diff(got, expected);
  }
}
