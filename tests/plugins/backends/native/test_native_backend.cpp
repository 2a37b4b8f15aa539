// The `native` rollout_backend plugin as a run loads it: options, metrics, weight sync.
#include <gtest/gtest.h>

#include <grpo/sdk/torch.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/model/checkpoint.h"
#include "tests/plugins/backends/native/rollout_fixtures.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

using namespace grpo;
using grpo::testing::create_component;
using grpo::testing::error_of;
using grpo::testing::naive_greedy;
using grpo::testing::PluginOption;
using grpo::testing::request;
using grpo::testing::rollout_model_dir;

namespace {

std::shared_ptr<sdk::RolloutBackend> backend(std::vector<PluginOption> options) {
  return create_component<sdk::RolloutBackend>("native", options, "rollout.backend");
}

std::map<std::string, double> metric_map(const sdk::RolloutBackend& b) {
  std::map<std::string, double> out;
  for (const auto& m : b.metrics()) out[m.name] = m.value.item<double>();
  return out;
}

sdk::NamedTensors named_parameters(core::CausalLM& model) {
  sdk::NamedTensors out;
  for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

const std::vector<std::int64_t> kPrompt = {11, 42, 7, 199, 23, 5, 64};

}  // namespace

TEST(NativeBackend, GeneratesAndReportsMetrics) {
  auto b = backend({{"model", rollout_model_dir("qwen3"), true}, {"max_num_seqs", "4"}, {"ignore_eos", "true"}});
  const sdk::GenerationRequest r = request("sampled", kPrompt, 8, /*temperature=*/1.0, /*n=*/6);
  const auto results = b->generate({r});
  ASSERT_TRUE(results.at(0).status.is_ok());
  ASSERT_EQ(results[0].samples.size(), 6u);
  for (const auto& s : results[0].samples) {
    EXPECT_EQ(s.token_ids.size(), 8u);
    EXPECT_EQ(s.finish_reason, sdk::FinishReason::kLength);
    EXPECT_GT(s.timings.finish_s, 0.0);
    EXPECT_LE(s.timings.first_token_s, s.timings.finish_s);
  }
  const auto m = metric_map(*b);
  EXPECT_EQ(m.at("rollout/prefill_tokens"), 7);
  // 6 samples x 7 decode steps each (the first token comes from the prefill).
  EXPECT_EQ(m.at("rollout/decode_tokens"), 42);
  EXPECT_GT(m.at("rollout/batch_occupancy"), 0.5);
  EXPECT_LE(m.at("rollout/batch_occupancy"), 1.0);
  EXPECT_EQ(m.at("rollout/stop_rate"), 0.0);
  EXPECT_EQ(m.at("rollout/mean_length"), 8.0);
  EXPECT_EQ(m.at("rollout/max_length"), 8.0);
  EXPECT_GT(m.at("rollout/decode_tokens_per_s"), 0.0);
  EXPECT_GT(m.at("rollout/kv_cache_mb"), 0.0);
}

TEST(NativeBackend, OptionErrorsNameTheKey) {
  const std::string dir = rollout_model_dir("qwen2");
  EXPECT_NE(error_of<std::exception>([&] { backend({}); }).find("model"), std::string::npos);
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"logprobs", "sampled", true}}); })
                .find("rollout.backend.logprobs: expected one of raw, scaled, processed, got \"sampled\""),
            std::string::npos);
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"device", "tpu", true}}); }).find("rollout.backend.device"),
            std::string::npos);
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"max_num_seqs", "0"}}); })
                .find("rollout.backend.max_num_seqs: must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"max_model_len", "100000"}}); })
                .find("max_model_len must be in [1, 256]"),
            std::string::npos);
  const std::string missing = error_of<std::exception>([&] { backend({{"model", dir + "/nope", true}}); });
  EXPECT_NE(missing.find("rollout.backend.model"), std::string::npos) << missing;
  EXPECT_NE(missing.find("nope"), std::string::npos) << missing;
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"max_num_seq", "4"}}); }).find("max_num_seqs"),
            std::string::npos);  // unknown key: "did you mean"
  EXPECT_NE(error_of<std::exception>([&] { backend({{"model", dir, true}, {"decode_steps", "cuda", true}}); })
                .find("rollout.backend.decode_steps: expected one of auto, dynamic, bucketed, graphs, got \"cuda\""),
            std::string::npos);
}

// decode_steps: bucketed reports its padded rows (3 samples decode in a bucket of 4) and no graph
// replays on the CPU; the default (auto: dynamic on a CPU) reports neither.
TEST(NativeBackend, BucketedDecodeStepsReportTheirPadding) {
  const sdk::GenerationRequest r = request("sampled", kPrompt, 5, /*temperature=*/1.0, /*n=*/3, /*seed=*/9);
  auto bucketed = backend({{"model", rollout_model_dir("qwen3"), true}, {"max_num_seqs", "4"}, {"ignore_eos", "true"},
                           {"decode_steps", "bucketed", true}});
  auto dynamic = backend({{"model", rollout_model_dir("qwen3"), true}, {"max_num_seqs", "4"}, {"ignore_eos", "true"}});
  const auto a = bucketed->generate({r}), b = dynamic->generate({r});
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(a.at(0).samples.at(j).token_ids, b.at(0).samples.at(j).token_ids);
  const auto m = metric_map(*bucketed);
  EXPECT_EQ(m.at("rollout/decode_padded_rows"), 4);  // 4 decode steps, one padding row each
  EXPECT_EQ(m.at("rollout/cuda_graph_replays"), 0);
  EXPECT_EQ(m.at("rollout/cuda_graphs_captured"), 0);
  EXPECT_EQ(metric_map(*dynamic).count("rollout/decode_padded_rows"), 0u);
}

// Copy mode: the engine takes the trainer's values at sync time; later in-place changes of
// the trainer's tensors do not reach it.
TEST(NativeBackend, CopySyncTakesTheTrainersWeights) {
  const std::string dir = rollout_model_dir("qwen2");
  auto b = backend({{"model", dir, true}, {"weight_sync", "copy", true}, {"ignore_eos", "true"}});
  core::LoadedModel trainer = core::load_model(dir);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model->parameters()) p.mul_(1.3);
  }
  const auto before = b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids;
  b->update_weights(named_parameters(trainer.model));
  const auto synced = b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids;
  const auto expected = naive_greedy(trainer.model, kPrompt, 10, {});
  EXPECT_EQ(synced, expected);
  EXPECT_NE(before, expected) << "the scaled weights should change the greedy output";
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model->parameters()) p.mul_(0.5);
  }
  EXPECT_EQ(b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids, synced);
  const auto m = metric_map(*b);
  EXPECT_EQ(m.at("rollout/weight_sync_shared_tensors"), 0.0);
  EXPECT_GT(m.at("rollout/weight_sync_copied_mb"), 0.0);
  EXPECT_GE(m.at("rollout/weight_sync_s"), 0.0);
}

// Share mode (colocated): the engine aliases the trainer's tensors, so an optimizer's
// in-place update is what the next generation uses, with no copy.
TEST(NativeBackend, ShareSyncAliasesTheTrainersTensors) {
  const std::string dir = rollout_model_dir("llama");
  auto b = backend({{"model", dir, true}, {"weight_sync", "share", true}, {"ignore_eos", "true"}});
  core::LoadedModel trainer = core::load_model(dir);
  b->update_weights(named_parameters(trainer.model));
  const auto m = metric_map(*b);
  EXPECT_EQ(m.at("rollout/weight_sync_shared_tensors"), static_cast<double>(trainer.model->parameters().size()));
  EXPECT_EQ(m.at("rollout/weight_sync_copied_mb"), 0.0);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model->parameters()) p.mul_(1.4);
  }
  const auto expected = naive_greedy(trainer.model, kPrompt, 10, {});
  EXPECT_EQ(b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids, expected);
}

// A sync may name a subset of the parameters (LoRA sends only its merged weights): those
// change, the others keep the values the engine had.
TEST(NativeBackend, SubsetSyncChangesOnlyTheNamedTensors) {
  const std::string dir = rollout_model_dir("qwen2");
  auto b = backend({{"model", dir, true}, {"weight_sync", "copy", true}, {"ignore_eos", "true"}});
  core::LoadedModel trainer = core::load_model(dir);
  sdk::NamedTensors subset;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : trainer.model->named_parameters())
      if (item.key().find("self_attn.q_proj.weight") != std::string::npos) {
        item.value().mul_(-1.5);  // the trainer's model now differs from the file in q_proj only
        subset.emplace_back(item.key(), item.value());
      }
  }
  ASSERT_EQ(subset.size(), static_cast<std::size_t>(trainer.config.num_hidden_layers));
  b->update_weights(subset);
  const auto expected = naive_greedy(trainer.model, kPrompt, 10, {});
  EXPECT_EQ(b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids, expected);
  // And the file's weights generate something else: the subset took effect.
  core::LoadedModel original = core::load_model(dir);
  EXPECT_NE(naive_greedy(original.model, kPrompt, 10, {}), expected);
}

TEST(NativeBackend, WeightSyncErrors) {
  const std::string dir = rollout_model_dir("qwen3");
  auto b = backend({{"model", dir, true}, {"weight_sync", "share", true}});
  core::LoadedModel trainer = core::load_model(dir);
  auto weights = named_parameters(trainer.model);
  EXPECT_NE(error_of<std::invalid_argument>([&] { b->update_weights({}); }).find("no tensors given"), std::string::npos);
  auto unknown = weights;
  unknown.emplace_back("model.layers.9.mlp.up_proj.weight", torch::zeros({1}));
  EXPECT_NE(error_of<std::invalid_argument>([&] { b->update_weights(unknown); })
                .find("'model.layers.9.mlp.up_proj.weight' is not a parameter of this Qwen3ForCausalLM model"),
            std::string::npos);
  auto wrong_shape = weights;
  wrong_shape[0].second = torch::zeros({3, 3});
  EXPECT_NE(error_of<std::invalid_argument>([&] { b->update_weights(wrong_shape); }).find("has shape [3, 3]"), std::string::npos);
  sdk::NamedTensors bf16;
  for (auto& [name, t] : weights) bf16.emplace_back(name, t.to(torch::kBFloat16));
  EXPECT_NE(error_of<std::invalid_argument>([&] { b->update_weights(bf16); }).find("use weight_sync: copy or auto"),
            std::string::npos);
  // auto copies what it cannot share (and converts the dtype).
  auto a = backend({{"model", dir, true}, {"weight_sync", "auto", true}});
  a->update_weights(bf16);
  EXPECT_EQ(metric_map(*a).at("rollout/weight_sync_shared_tensors"), 0.0);
}

// A sync that fails (here: one tensor of the wrong shape, sent with otherwise new weights)
// changes nothing: the engine keeps generating with the weights it had.
TEST(NativeBackend, FailedSyncLeavesTheWeightsAlone) {
  const std::string dir = rollout_model_dir("qwen2");
  auto b = backend({{"model", dir, true}, {"weight_sync", "copy", true}, {"ignore_eos", "true"}});
  const auto before = b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids;
  core::LoadedModel trainer = core::load_model(dir);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model->parameters()) p.mul_(1.3);
  }
  auto weights = named_parameters(trainer.model);
  auto& last = weights.back();  // checked last in any order that walks the list
  last.second = torch::zeros({last.second.numel() + 1});
  EXPECT_THROW(b->update_weights(weights), std::invalid_argument);
  EXPECT_EQ(b->generate({request("greedy", kPrompt, 10)})[0].samples[0].token_ids, before);
}

// After a shared sync, a sync that must copy (other dtype) takes storage of its own instead
// of writing into the tensors it was sharing: the trainer's parameters stay untouched.
TEST(NativeBackend, CopyAfterShareDoesNotWriteIntoTheTrainer) {
  const std::string dir = rollout_model_dir("qwen3");
  auto b = backend({{"model", dir, true}, {"weight_sync", "auto", true}});
  core::LoadedModel trainer = core::load_model(dir);
  b->update_weights(named_parameters(trainer.model));
  EXPECT_GT(metric_map(*b).at("rollout/weight_sync_shared_tensors"), 0.0);
  std::vector<at::Tensor> snapshot;
  for (auto& p : trainer.model->parameters()) snapshot.push_back(p.detach().clone());
  sdk::NamedTensors other;
  for (auto& [name, t] : named_parameters(trainer.model)) other.emplace_back(name, (t * 0.5).to(torch::kBFloat16));
  b->update_weights(other);
  EXPECT_EQ(metric_map(*b).at("rollout/weight_sync_shared_tensors"), 0.0);
  std::size_t i = 0;
  for (auto& p : trainer.model->parameters()) EXPECT_TRUE(torch::equal(p.detach(), snapshot[i++]));
}

// Diverged weights (NaN) make generate() throw instead of returning arbitrary tokens; after
// good weights are synced back the engine generates exactly as before: nothing the bad step
// left in the KV cache leaks into later sequences.
TEST(NativeBackend, NonFiniteWeightsFailLoudlyAndLeaveNoTrace) {
  const std::string dir = rollout_model_dir("llama");
  auto b = backend({{"model", dir, true}, {"weight_sync", "copy", true}, {"ignore_eos", "true"}, {"max_num_seqs", "2"}});
  const std::vector<sdk::GenerationRequest> batch = {request("a", kPrompt, 12), request("b", {9, 8, 7}, 12)};
  const auto before = b->generate(batch);
  core::LoadedModel good = core::load_model(dir), bad = core::load_model(dir);
  {
    torch::NoGradGuard no_grad;
    bad.model->model->layers[0]->as<core::DecoderLayer>()->mlp->down_proj->weight.fill_(NAN);  // layer 1 caches NaN
  }
  b->update_weights(named_parameters(bad.model));
  // The bad run leaves NaN keys/values in slot 1 up to position 30; "b" later takes slot 1
  // with 3 tokens while "a" in slot 0 makes the step attend over 8 positions of every row.
  const std::vector<sdk::GenerationRequest> bad_batch = {request("x", {4, 5, 6}, 12),
                                                         request("long", std::vector<std::int64_t>(30, 17), 12)};
  EXPECT_NE(error_of<std::runtime_error>([&] { b->generate(bad_batch); }).find("non-finite logits"), std::string::npos);
  b->update_weights(named_parameters(good.model));
  const auto after = b->generate(batch);
  for (std::size_t i = 0; i < batch.size(); ++i) EXPECT_EQ(after[i].samples[0].token_ids, before[i].samples[0].token_ids);
}

// bfloat16 weights and cache: generation runs and its raw log-probs are those of a bf16
// teacher-forced forward, to bf16 precision.
TEST(NativeBackend, Bfloat16Generates) {
  const std::string dir = rollout_model_dir("qwen3");
  auto b = backend({{"model", dir, true}, {"dtype", "bfloat16", true}, {"ignore_eos", "true"}});
  const auto s = b->generate({request("bf16", kPrompt, 8)})[0].samples.at(0);
  ASSERT_EQ(s.token_ids.size(), 8u);
  core::LoadedModel ref = core::load_model(dir, torch::kBFloat16);
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = kPrompt;
  seq.insert(seq.end(), s.token_ids.begin(), s.token_ids.end());
  const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
  const auto logp = torch::log_softmax(ref.model->forward(ids, core::AttentionLayout::padded(torch::ones_like(ids))).to(torch::kFloat), -1);
  for (std::size_t t = 0; t < s.token_ids.size(); ++t) {
    const double expected = logp[0][static_cast<int64_t>(kPrompt.size() + t - 1)][s.token_ids[t]].item<double>();
    EXPECT_TRUE(std::isfinite(s.logprobs[t]));
    EXPECT_NEAR(s.logprobs[t], expected, 0.05) << t;
  }
}

// Requests without a seed get distinct streams per request and per call, so a group sent as
// n requests of n = 1 is not n copies of one sample.
TEST(NativeBackend, UnseededRequestsDiffer) {
  auto b = backend({{"model", rollout_model_dir("qwen2"), true}, {"ignore_eos", "true"}});
  std::vector<sdk::GenerationRequest> group;
  for (int i = 0; i < 4; ++i) {
    group.push_back(request("g" + std::to_string(i), kPrompt, 12, /*temperature=*/1.0));
    group.back().seed.reset();
  }
  const auto first = b->generate(group);
  const auto second = b->generate(group);
  std::set<std::vector<std::int64_t>> distinct;
  for (const auto& r : first) distinct.insert(r.samples.at(0).token_ids);
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_NE(first[0].samples[0].token_ids, second[0].samples[0].token_ids);
}

// A model vocabulary larger than the tokenizer's (padded embeddings, as in Qwen2.5): ids the
// tokenizer lacks decode to nothing instead of failing the sample.
TEST(NativeBackend, IdsBeyondTheTokenizerDecodeToNothing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(grpo::testing::fresh_test_dir("rollout")) / "small-tokenizer";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(rollout_model_dir("qwen3")) / f, dir / f);
  core::atomic_write_file((dir / "tokenizer.json").string(), core::make_byte_level_tokenizer_json());  // 259 ids
  auto b = backend({{"model", dir.string(), true}, {"ignore_eos", "true"}});
  const auto results = b->generate({request("wide", kPrompt, 40, /*temperature=*/1.5, /*n=*/8, /*seed=*/3)});
  const auto tok = core::Tokenizer::load(dir.string());
  int beyond = 0;
  for (const auto& s : results.at(0).samples) {
    std::vector<int> known;
    for (auto id : s.token_ids) (id < tok.vocab_size() ? known.push_back(static_cast<int>(id)) : void(++beyond));
    core::DecodeOptions skip;
    skip.skip_special_tokens = true;
    EXPECT_EQ(s.text, tok.decode(known, skip));
  }
  EXPECT_GT(beyond, 0) << "the samples should include ids 259..299";
}
