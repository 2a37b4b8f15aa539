// Sequence packing (core/train/packing.h): the first-fit-decreasing plan against hand-worked
// examples, packed response log-probs against an independent right-padded forward (and a
// full-logits log_softmax for one sequence), and the acceptance test: a loss computed from
// packed micro-batches under global denominators has the loss and gradients of the unpacked
// (one sequence per row) computation, to 1e-5.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "core/algo/loss_aggregation.h"
#include "core/model/logprobs.h"
#include "core/model/transformer.h"
#include "core/train/packing.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"
#include "tests/train/trainer_fixtures.h"

namespace {

using grpo::core::AttentionLayout;
using grpo::core::CausalLM;
using grpo::core::LogProbOptions;
using grpo::core::LossAggregation;
using grpo::core::PackingPlan;
using grpo::core::SequenceTokens;
using grpo::testing::error_of;
using Rows = std::vector<std::vector<std::size_t>>;

// ---------------------------------------------------------------------------------------
// The plan

TEST(PackingPlan, FirstFitDecreasingHandWorked) {
  // pack 10, lengths [5, 3, 7, 2, 4, 1]. Decreasing: 7(#2) 5(#0) 4(#4) 3(#1) 2(#3) 1(#5).
  //   7 -> new row A (room 3); 5 -> A too small, new row B (room 5); 4 -> A no, B (room 1);
  //   3 -> A (room 0); 2 -> A no, B no, new row C (room 8); 1 -> A no, B (room 0).
  // Rows sorted by index: A {1, 2}, B {0, 4, 5}, C {3}.
  const PackingPlan plan = grpo::core::plan_packing({5, 3, 7, 2, 4, 1}, 10);
  EXPECT_EQ(plan.rows, (Rows{{1, 2}, {0, 4, 5}, {3}}));
  EXPECT_EQ(plan.pack_length, 10);
  EXPECT_EQ(plan.tokens, 22);
  EXPECT_EQ(plan.sequences(), 6u);
  EXPECT_DOUBLE_EQ(plan.packed_ratio(), 3.0 / 6.0);
  EXPECT_DOUBLE_EQ(plan.utilization(), 22.0 / 30.0);
}

TEST(PackingPlan, TiesGoByIndex) {
  // pack 8, lengths [3, 5, 3, 5]: order 5(#1) 5(#3) 3(#0) 3(#2):
  //   #1 -> A (room 3); #3 -> B (room 3); #0 -> A (room 0); #2 -> B (room 0).
  EXPECT_EQ(grpo::core::plan_packing({3, 5, 3, 5}, 8).rows, (Rows{{0, 1}, {2, 3}}));
  // Equal lengths: index order, two per row.
  EXPECT_EQ(grpo::core::plan_packing({4, 4, 4, 4}, 8).rows, (Rows{{0, 1}, {2, 3}}));
  // Exactly full rows, one sequence each.
  EXPECT_EQ(grpo::core::plan_packing({8, 8}, 8).rows, (Rows{{0}, {1}}));
}

TEST(PackingPlan, EmptyInputHasNoRows) {
  const PackingPlan plan = grpo::core::plan_packing({}, 16);
  EXPECT_TRUE(plan.rows.empty());
  EXPECT_EQ(plan.packed_ratio(), 0.0);
  EXPECT_EQ(plan.utilization(), 0.0);
}

TEST(PackingPlan, TooLongSequenceNamesIndexAndLength) {
  const std::string e = error_of<std::invalid_argument>([] { grpo::core::plan_packing({3, 12, 4}, 10); });
  EXPECT_NE(e.find("sequence 1"), std::string::npos) << e;
  EXPECT_NE(e.find("12 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("pack_length 10"), std::string::npos) << e;
  const std::string z = error_of<std::invalid_argument>([] { grpo::core::plan_packing({1}, 0); });
  EXPECT_NE(z.find("pack_length must be >= 1"), std::string::npos) << z;
}

TEST(PackingPlan, MicroBatchesAreConsecutiveRows) {
  const PackingPlan plan = grpo::core::plan_packing({5, 3, 7, 2, 4, 1}, 10);  // rows {1,2} {0,4,5} {3}
  EXPECT_EQ(grpo::core::micro_batches(plan, 2), (Rows{{1, 2, 0, 4, 5}, {3}}));
  EXPECT_EQ(grpo::core::micro_batches(plan, 1), (Rows{{1, 2}, {0, 4, 5}, {3}}));
  EXPECT_EQ(grpo::core::micro_batches(plan, 8), (Rows{{1, 2, 0, 4, 5, 3}}));
  EXPECT_THROW(grpo::core::micro_batches(plan, 0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------
// Log-probs

CausalLM tiny_model(std::uint64_t seed) { return grpo::testing::tiny_test_model(seed); }

struct Seq {
  std::vector<std::int64_t> prompt, response;
};

// Prompts of 2-9 tokens, responses of 1-7 (the lengths cycle so every value occurs).
std::vector<Seq> mixed_sequences(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Seq> out;
  for (int i = 0; i < n; ++i) {
    Seq s;
    for (int t = 0; t < 2 + (i * 5) % 8; ++t) s.prompt.push_back(static_cast<std::int64_t>(rng() % 64));
    for (int t = 0; t < 1 + (i * 3) % 7; ++t) s.response.push_back(static_cast<std::int64_t>(rng() % 64));
    out.push_back(s);
  }
  return out;
}

std::vector<SequenceTokens> tokens_of(const std::vector<Seq>& seqs, const std::vector<std::size_t>& which) {
  std::vector<SequenceTokens> out;
  for (std::size_t i : which) out.push_back({&seqs[i].prompt, &seqs[i].response});
  return out;
}

std::vector<std::size_t> all_indices(std::size_t n) {
  std::vector<std::size_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

LogProbOptions lp_options(double temperature, bool entropy, std::int64_t chunk = 1024) {
  LogProbOptions o;
  o.temperature = temperature;
  o.with_entropy = entropy;
  o.chunk_tokens = chunk;
  return o;
}

TEST(PackingLogProbs, PackedEqualsPaddedAtTemperatures) {
  CausalLM model = tiny_model(3);
  torch::NoGradGuard no_grad;
  std::vector<Seq> seqs = mixed_sequences(8, 11);
  seqs.push_back({{5, 6, 7}, {}});  // no response: an all-padding row, left out of the forward
  const auto tokens = tokens_of(seqs, all_indices(seqs.size()));
  const std::int64_t width = 9;  // wider than the longest response (7): the tail stays 0
  for (double temperature : {1.0, 0.7}) {
    // A small chunk so that several token_logprobs chunks are exercised.
    const auto packed = grpo::core::packed_response_logprobs(model, tokens, width, lp_options(temperature, true, 5));
    const auto padded = grpo::core::padded_response_logprobs(model, tokens, width, lp_options(temperature, true));
    ASSERT_EQ(packed.logprobs.sizes(), (std::vector<std::int64_t>{9, width}));
    EXPECT_LT(max_abs_diff(packed.logprobs, padded.logprobs), 1e-5) << "T " << temperature;
    EXPECT_LT(max_abs_diff(packed.entropy, padded.entropy), 1e-5) << "T " << temperature;
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const auto r = static_cast<std::int64_t>(seqs[s].response.size());
      EXPECT_EQ(packed.logprobs[static_cast<std::int64_t>(s)].narrow(0, r, width - r).abs().sum().item<double>(), 0.0);
      if (r > 0) {
        EXPECT_LT(packed.logprobs[static_cast<std::int64_t>(s)].narrow(0, 0, r).max().item<double>(), 0.0);
      }
    }
  }
}

TEST(PackingLogProbs, ResponseTokenJIsPredictedAtPromptEndPlusJ) {
  // Independent of both paths: full logits of the sequence alone, log_softmax(logits / T),
  // the entry of response token j at position P - 1 + j.
  CausalLM model = tiny_model(4);
  torch::NoGradGuard no_grad;
  const std::vector<Seq> seqs = mixed_sequences(4, 12);
  const double temperature = 0.7;
  const auto packed = grpo::core::packed_response_logprobs(model, tokens_of(seqs, all_indices(4)), 7, lp_options(temperature, false));
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    std::vector<std::int64_t> ids = seqs[s].prompt;
    ids.insert(ids.end(), seqs[s].response.begin(), seqs[s].response.end());
    const auto n = static_cast<std::int64_t>(ids.size());
    const torch::Tensor logits = model->forward(torch::tensor(ids).view({1, n}), AttentionLayout::padded(torch::ones({1, n}, torch::kLong)));
    const torch::Tensor logsm = torch::log_softmax(logits[0].to(torch::kDouble) / temperature, -1);
    const auto p = static_cast<std::int64_t>(seqs[s].prompt.size());
    for (std::size_t j = 0; j < seqs[s].response.size(); ++j) {
      const double expected = logsm[p - 1 + static_cast<std::int64_t>(j)][seqs[s].response[j]].item<double>();
      EXPECT_NEAR(packed.logprobs[static_cast<std::int64_t>(s)][static_cast<std::int64_t>(j)].item<double>(), expected, 1e-5);
    }
  }
}

TEST(PackingLogProbs, BadInputIsRejected) {
  CausalLM model = tiny_model(5);
  const std::vector<std::int64_t> empty, prompt{1, 2}, response{3, 4, 5};
  const std::string w = error_of<std::invalid_argument>(
      [&] { grpo::core::packed_response_logprobs(model, {{&prompt, &response}}, 2, lp_options(1.0, false)); });
  EXPECT_NE(w.find("more than width 2"), std::string::npos) << w;
  const std::string p = error_of<std::invalid_argument>(
      [&] { grpo::core::padded_response_logprobs(model, {{&empty, &response}}, 3, lp_options(1.0, false)); });
  EXPECT_NE(p.find("empty prompt"), std::string::npos) << p;
  // An id the model has no row for, in a response or a prompt: named with its place and the
  // vocabulary, before any device work (both ways of computing).
  const std::int64_t vocab = model->config().vocab_size;
  for (const std::int64_t bad : {vocab, std::int64_t{-1}}) {
    const std::vector<std::int64_t> outside{3, bad};
    const std::string v = error_of<std::invalid_argument>(
        [&] { grpo::core::packed_response_logprobs(model, {{&prompt, &outside}}, 2, lp_options(1.0, false)); });
    EXPECT_NE(v.find("sequence 0: response token 1 is id " + std::to_string(bad) + ", outside the model's vocabulary [0, " +
                     std::to_string(vocab) + ")"),
              std::string::npos)
        << v;
    const std::string q = error_of<std::invalid_argument>(
        [&] { grpo::core::padded_response_logprobs(model, {{&prompt, &response}, {&outside, &response}}, 3, lp_options(1.0, false)); });
    EXPECT_NE(q.find("sequence 1: prompt token 1 is id " + std::to_string(bad)), std::string::npos) << q;
  }
}

// ---------------------------------------------------------------------------------------
// Acceptance: packed loss and gradients equal unpacked to 1e-5.

std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// [rows, width] from per-sequence vectors (padding 0).
torch::Tensor rows_of(const std::vector<std::vector<float>>& per_seq, const std::vector<std::size_t>& which, std::int64_t width) {
  torch::Tensor t = torch::zeros({static_cast<std::int64_t>(which.size()), width});
  for (std::size_t k = 0; k < which.size(); ++k)
    for (std::size_t j = 0; j < per_seq[which[k]].size(); ++j)
      t[static_cast<std::int64_t>(k)][static_cast<std::int64_t>(j)] = per_seq[which[k]][j];
  return t;
}

std::int64_t width_of(const std::vector<Seq>& seqs, const std::vector<std::size_t>& which) {
  std::int64_t w = 1;
  for (std::size_t i : which) w = std::max<std::int64_t>(w, static_cast<std::int64_t>(seqs[i].response.size()));
  return w;
}

struct LossAndGrads {
  double loss = 0.0;
  std::vector<torch::Tensor> grads;
};

TEST(PackingAcceptance, PackedLossAndGradientsEqualUnpacked) {
  CausalLM model = tiny_model(6);
  const auto ppo = grpo::testing::create_component<grpo::sdk::PolicyLoss>("ppo_clip", {}, "algorithm.policy_loss");
  const std::vector<Seq> seqs = mixed_sequences(12, 21);
  const std::size_t S = seqs.size();
  // Old log-probs = current ones + noise of up to +-0.3 (ratios in ~[0.74, 1.35]: both clip
  // branches and the unclipped one occur); advantages random in [-1, 1] per token.
  std::mt19937_64 rng(7);
  std::vector<std::vector<float>> advantages(S), old(S);
  {
    torch::NoGradGuard no_grad;
    const auto all = all_indices(S);
    const torch::Tensor lp = grpo::core::padded_response_logprobs(model, tokens_of(seqs, all), width_of(seqs, all), lp_options(0.7, false)).logprobs;
    for (std::size_t s = 0; s < S; ++s) {
      advantages[s] = random_floats(seqs[s].response.size(), rng, -1.0f, 1.0f);
      const auto noise = random_floats(seqs[s].response.size(), rng, -0.3f, 0.3f);
      for (std::size_t j = 0; j < noise.size(); ++j)
        old[s].push_back(lp[static_cast<std::int64_t>(s)][static_cast<std::int64_t>(j)].item<float>() + noise[j]);
    }
  }
  auto mask_of = [&](const std::vector<std::size_t>& which, std::int64_t width) {
    torch::Tensor m = torch::zeros({static_cast<std::int64_t>(which.size()), width});
    for (std::size_t k = 0; k < which.size(); ++k) m[static_cast<std::int64_t>(k)].narrow(0, 0, static_cast<std::int64_t>(seqs[which[k]].response.size())).fill_(1.0);
    return m;
  };
  // The per-token loss pipeline on a set of sequences, its share of the global loss backpropagated.
  auto run = [&](const grpo::core::ResponseLogProbs& fwd, const std::vector<std::size_t>& which, std::int64_t width,
                 LossAggregation mode, const grpo::core::AggregationScale& scale) {
    grpo::sdk::PolicyLossInput in;
    in.batch.response_mask = mask_of(which, width);
    in.batch.group_ids = torch::zeros({static_cast<std::int64_t>(which.size())}, torch::kLong);
    in.logp = fwd.logprobs;
    in.old_logp = rows_of(old, which, width);
    in.advantages = rows_of(advantages, which, width);
    const torch::Tensor loss = grpo::core::aggregate_loss(ppo->compute(in).per_token_loss, in.batch.response_mask, mode, scale);
    loss.backward();
    return loss.item<double>();
  };
  auto grads = [&] {
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const LogProbOptions options = lp_options(0.7, false, 8);

  for (LossAggregation mode : {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean}) {
    // Packed: rows of 16 tokens (sequences are 3-16 long), two rows per micro-batch.
    std::vector<std::int64_t> lengths;
    for (const Seq& s : seqs) lengths.push_back(static_cast<std::int64_t>(s.prompt.size() + s.response.size()));
    const PackingPlan plan = grpo::core::plan_packing(lengths, 16);
    const auto micro = grpo::core::micro_batches(plan, 2);
    ASSERT_GE(micro.size(), 3u);
    std::vector<at::Tensor> masks;
    for (const auto& mb : micro) masks.push_back(mask_of(mb, width_of(seqs, mb)));
    const auto packed_scale = grpo::core::aggregation_scale(masks, 7);
    model->zero_grad();
    LossAndGrads packed;
    for (const auto& mb : micro) {
      const std::int64_t w = width_of(seqs, mb);
      packed.loss += run(grpo::core::packed_response_logprobs(model, tokens_of(seqs, mb), w, options), mb, w, mode, packed_scale);
    }
    packed.grads = grads();

    // Unpacked: one right-padded forward, one sequence per row.
    const auto all = all_indices(S);
    const std::int64_t w = width_of(seqs, all);
    const auto scale = grpo::core::aggregation_scale({mask_of(all, w)}, 7);
    model->zero_grad();
    LossAndGrads padded;
    padded.loss = run(grpo::core::padded_response_logprobs(model, tokens_of(seqs, all), w, options), all, w, mode, scale);
    padded.grads = grads();

    const char* name = grpo::core::to_string(mode);
    EXPECT_NEAR(packed.loss, padded.loss, 1e-5) << name;
    EXPECT_GT(std::abs(padded.loss), 1e-3) << name << ": a loss near 0 would compare nothing";
    const auto named = model->named_parameters();
    for (std::size_t i = 0; i < padded.grads.size(); ++i) {
      EXPECT_LT(max_abs_diff(packed.grads[i], padded.grads[i]), 1e-5) << name << " " << named[i].key();
      EXPECT_GT(padded.grads[i].abs().max().item<double>(), 0.0) << name << " " << named[i].key();
    }
  }
}

}  // namespace
