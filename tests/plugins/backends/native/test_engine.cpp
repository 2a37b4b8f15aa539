// The native engine against naive full-recompute generation and the trainer's log-probs,
// continuous batching, stop conditions and bad requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/algo/mismatch_correction.h"
#include "core/model/logprobs.h"
#include "grpo/sdk/utf8.h"
#include "tests/plugins/backends/native/rollout_fixtures.h"

using namespace grpo;
using grpo::native::Engine;
using grpo::native::EngineOptions;
using grpo::testing::make_engine;
using grpo::testing::mixed_prompts;
using grpo::testing::naive_greedy;
using grpo::testing::request;

namespace {

struct GreedyCase {
  std::string model;
  int batch;
  std::int64_t max_num_seqs;
};

std::string greedy_case_name(const ::testing::TestParamInfo<GreedyCase>& info) {
  return info.param.model + "_batch" + std::to_string(info.param.batch) + "_slots" + std::to_string(info.param.max_num_seqs);
}

class GreedyParity : public ::testing::TestWithParam<GreedyCase> {};

}  // namespace

// Token for token equal to recomputing the whole sequence at every step, with prompts of
// mixed lengths; with fewer slots than sequences, samples wait and take freed slots.
TEST_P(GreedyParity, EqualsNaiveFullRecompute) {
  const GreedyCase& c = GetParam();
  EngineOptions options;
  options.max_num_seqs = c.max_num_seqs;
  options.max_num_batched_tokens = 64;  // several prefill forwards
  Engine engine = make_engine(c.model, options);
  const auto& config = engine.model()->config();
  const auto prompts = mixed_prompts(c.batch, 2, 37, config.vocab_size, 11 + c.batch);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < c.batch; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 12 + (i % 5) * 3));
  const auto results = engine.generate(requests);
  ASSERT_EQ(results.size(), requests.size());
  int stopped = 0;
  for (int i = 0; i < c.batch; ++i) {
    ASSERT_TRUE(results[i].status.is_ok()) << results[i].status.message();
    ASSERT_EQ(results[i].request_id, requests[i].id);
    ASSERT_EQ(results[i].samples.size(), 1u);
    const auto& s = results[i].samples[0];
    const auto expected = naive_greedy(engine.model(), prompts[i], requests[i].sampling.max_new_tokens, config.eos_token_ids);
    EXPECT_EQ(s.token_ids, expected) << "prompt " << i << " of length " << prompts[i].size();
    const bool ended_on_eos = !expected.empty() &&
                              std::count(config.eos_token_ids.begin(), config.eos_token_ids.end(), expected.back()) > 0;
    stopped += ended_on_eos;
    EXPECT_EQ(s.finish_reason, ended_on_eos ? sdk::FinishReason::kStop : sdk::FinishReason::kLength);
    EXPECT_EQ(s.logprobs.size(), s.token_ids.size());
  }
  const auto& stats = engine.last_stats();
  EXPECT_EQ(stats.finished_stop, stopped);
  EXPECT_EQ(stats.finished_stop + stats.finished_length, c.batch);
  EXPECT_LE(stats.decode_tokens, stats.decode_steps * c.max_num_seqs);
}

INSTANTIATE_TEST_SUITE_P(Rollout, GreedyParity,
                         ::testing::Values(GreedyCase{"qwen3", 1, 32}, GreedyCase{"qwen3", 7, 32}, GreedyCase{"qwen3", 32, 32},
                                           GreedyCase{"qwen3", 32, 5}, GreedyCase{"qwen2", 7, 3}, GreedyCase{"qwen2", 32, 32},
                                           GreedyCase{"llama", 7, 32}, GreedyCase{"llama", 32, 8}),
                         greedy_case_name);

namespace {

// Teacher-forced log-probs of `completion` after `prompt`, as the trainer computes them: one
// padded forward over prompt + completion and core::token_logprobs on the completion.
std::vector<float> teacher_forced(core::CausalLM& model, const std::vector<std::int64_t>& prompt,
                                  const std::vector<std::int64_t>& completion) {
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = prompt;
  seq.insert(seq.end(), completion.begin(), completion.end());
  const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
  const auto hidden = model->hidden_states(ids, core::AttentionLayout::padded(torch::ones_like(ids)));
  const auto P = static_cast<int64_t>(prompt.size()), C = static_cast<int64_t>(completion.size());
  const auto lp = core::token_logprobs(hidden.narrow(1, P - 1, C), model->lm_head_weight(), ids.narrow(1, P, C)).logprobs;
  return std::vector<float>(lp.data_ptr<float>(), lp.data_ptr<float>() + C);
}

}  // namespace

// The engine's raw log-probs are the trainer's teacher-forced log-probs of the same tokens
// (fp32, max |diff| < 1e-5), and the mismatch metric the trainer logs reports that figure.
TEST(Rollout, RawLogprobsEqualTeacherForcedLogprobs) {
  for (const std::string name : {"qwen2", "qwen3", "llama"}) {
    Engine engine = make_engine(name);
    const auto prompts = mixed_prompts(6, 3, 30, engine.model()->config().vocab_size, 5);
    std::vector<sdk::GenerationRequest> requests;
    for (int i = 0; i < 6; ++i) {
      requests.push_back(request("r" + std::to_string(i), prompts[i], 20, /*temperature=*/1.0, /*n=*/3, /*seed=*/i));
      requests.back().sampling.top_p = 0.9;  // raw log-probs ignore the truncation
    }
    const auto results = engine.generate(requests);
    std::vector<at::Tensor> engine_rows, trainer_rows;
    double worst = 0;
    for (int i = 0; i < 6; ++i) {
      for (const auto& s : results[i].samples) {
        ASSERT_FALSE(s.token_ids.empty());
        const auto tf = teacher_forced(engine.model(), prompts[i], s.token_ids);
        for (std::size_t t = 0; t < tf.size(); ++t) worst = std::max(worst, std::abs(double(tf[t]) - s.logprobs[t]));
        at::Tensor e = torch::full({20}, 0.0f), tr = torch::full({20}, 0.0f);
        e.narrow(0, 0, static_cast<int64_t>(tf.size())).copy_(torch::tensor(s.logprobs));
        tr.narrow(0, 0, static_cast<int64_t>(tf.size())).copy_(torch::tensor(tf));
        engine_rows.push_back(e);
        trainer_rows.push_back(tr);
      }
    }
    EXPECT_LT(worst, 1e-5) << name;
    const auto trainer = torch::stack(trainer_rows), rollout = torch::stack(engine_rows);
    const auto mc = core::mismatch_correction(trainer, rollout, torch::ones_like(trainer), {});
    const auto metric = std::find_if(mc.metrics.begin(), mc.metrics.end(),
                                     [](const sdk::Metric& m) { return m.name == "sampling/sampling_logp_difference/max"; });
    ASSERT_NE(metric, mc.metrics.end());
    EXPECT_NEAR(metric->value.item<double>(), worst, 1e-7);
  }
}

// Processed log-probs are those of the distribution the token was drawn from: the
// teacher-forced logits divided by the temperature, truncated to the top k.
TEST(Rollout, ProcessedLogprobsFollowTemperatureAndTruncation) {
  EngineOptions options;
  options.logprobs_mode = native::LogprobsMode::kProcessed;
  Engine engine = make_engine("qwen3", options);
  const auto prompt = mixed_prompts(1, 9, 9, 300, 3)[0];
  auto r = request("p", prompt, 10, /*temperature=*/0.7, /*n=*/2, /*seed=*/9);
  r.sampling.top_k = 5;
  const auto results = engine.generate({r});
  torch::NoGradGuard no_grad;
  for (const auto& s : results[0].samples) {
    std::vector<std::int64_t> seq = prompt;
    for (std::size_t t = 0; t < s.token_ids.size(); ++t) {
      const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
      const auto logits = engine.model()->forward(ids, core::AttentionLayout::padded(torch::ones_like(ids)))[0][-1].to(torch::kDouble) / 0.7;
      const auto top = std::get<0>(logits.topk(5));
      const double kth = top[4].item<double>();
      const double tok = logits[s.token_ids[t]].item<double>();
      ASSERT_GE(tok, kth) << "token " << t << " is outside the top 5";
      const double expected = tok - torch::logsumexp(top, 0).item<double>();
      EXPECT_NEAR(s.logprobs[t], expected, 1e-5) << "token " << t;
      seq.push_back(s.token_ids[t]);
    }
  }
}

// A fixed seed reproduces the samples; sample j of a request is the same whether the request
// runs alone or among others; another seed gives other samples.
TEST(Rollout, SeedsMakeRunsReproducible) {
  Engine engine = make_engine("qwen2");
  const auto prompts = mixed_prompts(4, 4, 20, 300, 21);
  std::vector<sdk::GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(request("r" + std::to_string(i), prompts[i], 16, 1.0, 4, 100 + i));
  const auto first = engine.generate(requests);
  const auto again = engine.generate(requests);
  const auto alone = engine.generate({requests[2]});
  auto other_seed = requests[2];
  other_seed.seed = 999;
  const auto other = engine.generate({other_seed});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(first[i].samples[j].token_ids, again[i].samples[j].token_ids) << i << "/" << j;
  int same_as_other = 0;
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(alone[0].samples[j].token_ids, first[2].samples[j].token_ids) << j;
    EXPECT_EQ(alone[0].samples[j].logprobs.size(), first[2].samples[j].logprobs.size());
    same_as_other += other[0].samples[j].token_ids == first[2].samples[j].token_ids;
  }
  EXPECT_EQ(same_as_other, 0);
  // The n samples of one request differ from each other (their own streams).
  EXPECT_NE(first[0].samples[0].token_ids, first[0].samples[1].token_ids);
}

// First-token frequencies over many samples of one prompt match the model's distribution
// after temperature and top-p (from a teacher-forced forward and the nucleus definition):
// chi-square at the 0.1% level, fixed seed.
TEST(Rollout, FirstTokenFrequenciesMatchTheModel) {
  Engine engine = make_engine("llama");
  const auto prompt = mixed_prompts(1, 12, 12, 300, 8)[0];
  auto r = request("p", prompt, 1, /*temperature=*/0.6, /*n=*/6000, /*seed=*/4);
  r.sampling.top_p = 0.9;
  const auto results = engine.generate({r});
  std::vector<int> counts(300, 0);
  for (const auto& s : results[0].samples) ++counts[s.token_ids.at(0)];

  torch::NoGradGuard no_grad;
  const auto ids = torch::tensor(prompt, torch::kLong).view({1, -1});
  const auto z = (engine.model()->forward(ids, core::AttentionLayout::padded(torch::ones_like(ids)))[0][-1].to(torch::kDouble) / 0.6);
  const auto p = torch::softmax(z, 0);
  auto [sorted, order] = p.sort(0, /*descending=*/true);
  std::vector<double> target(300, 0.0);
  double mass = 0, kept_mass = 0;
  for (int64_t rnk = 0; rnk < 300 && mass < 0.9; ++rnk) {
    target[order[rnk].item<int64_t>()] = sorted[rnk].item<double>();
    mass += sorted[rnk].item<double>();
  }
  for (double x : target) kept_mass += x;
  double chi2 = 0;
  int kept = 0, pooled_count = 0;
  double pooled_expected = 0;
  for (int i = 0; i < 300; ++i) {
    if (target[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the nucleus";
      continue;
    }
    const double e = target[i] / kept_mass * 6000;
    if (e < 5) {  // pool rare tokens so that every cell expects >= 5
      pooled_expected += e;
      pooled_count += counts[i];
      continue;
    }
    ++kept;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  if (pooled_expected > 0) {
    ++kept;
    chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
  }
  ASSERT_GE(kept, 5);
  const double z999 = 3.0902, k = kept - 1, a = 2.0 / (9.0 * k);
  EXPECT_LT(chi2, k * std::pow(1.0 - a + z999 * std::sqrt(a), 3.0)) << kept << " cells";
}

// Continuous batching: with 2 slots, one long sample and four short ones, the short ones
// cycle through the second slot while the long one decodes: 29 steps in all (static batches
// of two would need 29 + 2 + 2), and the outputs equal those of an engine with a slot each.
TEST(Rollout, FinishedSequencesFreeTheirSlotAtOnce) {
  EngineOptions two;
  two.max_num_seqs = 2;
  two.ignore_eos = true;
  EngineOptions many = two;
  many.max_num_seqs = 8;
  Engine small = make_engine("qwen3", two), wide = make_engine("qwen3", many);
  const auto prompts = mixed_prompts(5, 5, 15, 300, 2);
  std::vector<sdk::GenerationRequest> requests = {request("long", prompts[0], 30)};
  for (int i = 1; i < 5; ++i) requests.push_back(request("short" + std::to_string(i), prompts[i], 3));
  const auto a = small.generate(requests);
  const auto b = wide.generate(requests);
  // Each sample's first token comes from its prompt's prefill; the rest from decode steps.
  EXPECT_EQ(small.last_stats().decode_steps, 29);
  EXPECT_EQ(small.last_stats().decode_tokens, 29 + 4 * 2);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i].samples[0].token_ids, b[i].samples[0].token_ids) << i;
    EXPECT_EQ(a[i].samples[0].finish_reason, sdk::FinishReason::kLength);
  }
  EXPECT_EQ(a[0].samples[0].token_ids.size(), 30u);
  // The short samples finished long before the long one.
  for (int i = 1; i < 5; ++i) EXPECT_LT(a[i].samples[0].timings.finish_s, a[0].samples[0].timings.finish_s);
}

// Many samples of one prompt with few slots: each prompt is prefilled once and its prefix
// reused by every sample, including those that start after others finished.
TEST(Rollout, OnePrefillServesAllSamples) {
  EngineOptions options;
  options.max_num_seqs = 3;
  Engine engine = make_engine("qwen2", options);
  const auto prompts = mixed_prompts(2, 17, 17, 300, 6);
  const auto results = engine.generate({request("a", prompts[0], 6, 1.0, 10, 1), request("b", prompts[1], 6, 1.0, 10, 2)});
  EXPECT_EQ(engine.last_stats().prefill_tokens, 34);
  // The first prompt's 10 samples more than fill the 3 slots, so the second prompt is
  // prefilled only once they have all started: two forwards, one per prompt.
  EXPECT_EQ(engine.last_stats().prefill_forwards, 2);
  ASSERT_EQ(results[0].samples.size(), 10u);
  // Late samples saw the same prefix: their log-probs equal the teacher-forced ones.
  const auto& late = results[1].samples[9];
  const auto tf = teacher_forced(engine.model(), prompts[1], late.token_ids);
  for (std::size_t t = 0; t < tf.size(); ++t) EXPECT_NEAR(late.logprobs[t], tf[t], 1e-5);
}

// Stop strings are found in the decoded text even when they span token boundaries; the
// text is cut before the stop string and the token that completed it is the last token.
TEST(Rollout, StopStringsSpanningTokensStop) {
  EngineOptions options;
  options.ignore_eos = true;
  Engine engine = make_engine("qwen3", options);
  const auto& tok = *engine.tokenizer();
  const auto prompt = mixed_prompts(1, 6, 6, 300, 12)[0];
  const auto free_run = engine.generate({request("free", prompt, 40)})[0].samples[0];
  // Byte offsets where each token's text ends (special tokens add no text).
  std::vector<std::size_t> ends;
  std::string text;
  for (auto id : free_run.token_ids) {
    core::DecodeOptions skip;
    skip.skip_special_tokens = true;
    text += tok.decode_bytes({static_cast<int>(id)}, skip);
    ends.push_back(text.size());
  }
  // A stop string covering the end of token 9's text and the start of token 11's.
  ASSERT_GT(ends[9], ends[8]);    // token 9 has text
  ASSERT_GT(ends[11], ends[10]);  // token 11 has text
  const std::size_t from = ends[9] - 1, to = ends[10] + 1;  // spans tokens 9, 10, 11
  const std::string stop = text.substr(from, to - from);
  const std::size_t first = text.find(stop);
  std::size_t completing = 0;
  while (ends[completing] < first + stop.size()) ++completing;

  auto r = request("stop", prompt, 40);
  r.sampling.stop_strings = {"never-appears-\x01", stop};
  const auto s = engine.generate({r})[0].samples[0];
  EXPECT_EQ(s.finish_reason, sdk::FinishReason::kStop);
  EXPECT_EQ(s.token_ids, std::vector<std::int64_t>(free_run.token_ids.begin(), free_run.token_ids.begin() + completing + 1));
  EXPECT_EQ(s.text, grpo::sdk::to_valid_utf8(text.substr(0, first)));
  EXPECT_EQ(s.logprobs.size(), s.token_ids.size());

  // A stop token id ends the sample with that token kept.
  auto t = request("stop-token", prompt, 40);
  t.sampling.stop_token_ids = {free_run.token_ids[6]};
  const auto st = engine.generate({t})[0].samples[0];
  const auto at = std::find(free_run.token_ids.begin(), free_run.token_ids.end(), free_run.token_ids[6]);
  EXPECT_EQ(st.token_ids, std::vector<std::int64_t>(free_run.token_ids.begin(), at + 1));
  EXPECT_EQ(st.finish_reason, sdk::FinishReason::kStop);
}

// Bad requests fail alone with messages naming the field; the good ones complete.
TEST(Rollout, BadRequestsFailAlone) {
  EngineOptions options;
  options.max_model_len = 64;
  Engine engine = make_engine("qwen2", options);
  const std::vector<std::int64_t> prompt = {5, 6, 7, 8};
  auto good = request("good", prompt, 5);
  auto empty = request("empty", {}, 5);
  auto too_long = request("too-long", std::vector<std::int64_t>(64, 9), 5);
  auto zero_n = request("zero-n", prompt, 5, 1.0, 0);
  auto top_p_zero = request("top-p-0", prompt, 5, 1.0);
  top_p_zero.sampling.top_p = 0.0;
  auto top_p_big = request("top-p-1.5", prompt, 5, 1.0);
  top_p_big.sampling.top_p = 1.5;
  auto bad_id = request("bad-id", {5, 300}, 5);
  auto negative_temperature = request("temperature", prompt, 5, -0.5);
  auto bad_top_k = request("top-k", prompt, 5, 1.0);
  bad_top_k.sampling.top_k = 0;
  const auto results = engine.generate({empty, good, too_long, zero_n, top_p_zero, top_p_big, bad_id, negative_temperature, bad_top_k});
  const std::map<std::string, std::string> expected = {
      {"empty", "prompt_ids is empty"},      {"too-long", "the prompt has 64 tokens; max_model_len is 64"},
      {"zero-n", "n must be >= 1, got 0"},   {"top-p-0", "sampling.top_p must be in (0, 1]"},
      {"top-p-1.5", "sampling.top_p must be in (0, 1], got 1.5"},
      {"bad-id", "prompt_ids[1] = 300 is outside the model's vocabulary [0, 300)"},
      {"temperature", "sampling.temperature must be a finite number >= 0"},
      {"top-k", "sampling.top_k must be -1 (off) or >= 1, got 0"}};
  for (const auto& r : results) {
    if (r.request_id == "good") {
      ASSERT_TRUE(r.status.is_ok());
      EXPECT_EQ(r.samples.at(0).token_ids.size(), 5u);
      continue;
    }
    EXPECT_FALSE(r.status.is_ok()) << r.request_id;
    EXPECT_TRUE(r.samples.empty());
    EXPECT_NE(r.status.message().find("request '" + r.request_id + "': " + expected.at(r.request_id)), std::string::npos)
        << r.status.message();
  }
  EXPECT_EQ(engine.last_stats().failed_requests, 8);
}

// A completion stops with `length` when the context is full, before max_new_tokens.
TEST(Rollout, ContextBoundEndsWithLength) {
  EngineOptions options;
  options.max_model_len = 40;
  options.ignore_eos = true;
  Engine engine = make_engine("llama", options);
  const auto s = engine.generate({request("p", std::vector<std::int64_t>(34, 7), 100)})[0].samples.at(0);
  EXPECT_EQ(s.token_ids.size(), 6u);
  EXPECT_EQ(s.finish_reason, sdk::FinishReason::kLength);
  EXPECT_THROW(make_engine("llama", [] { EngineOptions o; o.max_model_len = 257; return o; }()), std::invalid_argument);
}

// One engine, calls of growing lengths: the slot cache is regrown and the results stay those
// of naive recomputation.
TEST(Rollout, CacheGrowsAcrossCalls) {
  EngineOptions options;
  options.max_num_seqs = 3;
  options.ignore_eos = true;
  Engine engine = make_engine("qwen2", options);
  for (const int length : {4, 120, 200}) {
    const auto prompts = mixed_prompts(3, length, length + 20, 300, static_cast<std::uint64_t>(length));
    std::vector<sdk::GenerationRequest> requests;
    for (int i = 0; i < 3; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 30));
    const auto results = engine.generate(requests);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(results[i].samples.at(0).token_ids, naive_greedy(engine.model(), prompts[i], 30, {})) << length << "/" << i;
  }
}

// The engine's greedy output (prefill into KVCache rows, then slot decoding with continuous
// batching) is the same with every attention backend as with eager, the reference
// (core/model/attention/): same tokens, log-probs within float32 rounding.
TEST(Rollout, GreedyOutputIsTheSameWithEveryAttentionBackend) {
  for (const std::string model : {"qwen3", "qwen2", "llama"}) {
    EngineOptions options;
    options.max_num_seqs = 5;  // fewer slots than requests: samples join and leave the batch
    options.max_num_batched_tokens = 64;
    Engine engine = make_engine(model, options);
    const auto prompts = mixed_prompts(9, 2, 37, engine.model()->config().vocab_size, 5);
    std::vector<sdk::GenerationRequest> requests;
    for (int i = 0; i < 9; ++i) requests.push_back(request("p" + std::to_string(i), prompts[i], 10 + (i % 4) * 4));
    engine.model()->set_attention_backend(core::AttentionBackend::kEager);
    const auto eager = engine.generate(requests);
    for (auto backend : {core::AttentionBackend::kSdpa, core::AttentionBackend::kFlashVarlen, core::AttentionBackend::kAuto}) {
      engine.model()->set_attention_backend(backend);
      const auto results = engine.generate(requests);
      ASSERT_EQ(results.size(), eager.size());
      for (std::size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].status.is_ok()) << results[i].status.message();
        const auto& got = results[i].samples.at(0);
        const auto& want = eager[i].samples.at(0);
        EXPECT_EQ(got.token_ids, want.token_ids) << model << " " << core::attention_backend_name(backend) << " prompt " << i;
        ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
        for (std::size_t t = 0; t < got.logprobs.size(); ++t)
          EXPECT_NEAR(got.logprobs[t], want.logprobs[t], 1e-5) << model << " " << core::attention_backend_name(backend);
      }
    }
  }
}
