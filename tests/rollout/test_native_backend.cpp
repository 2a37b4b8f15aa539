// The `native` rollout_backend plugin as a run loads it: options, metrics, weight sync.
#include <gtest/gtest.h>

#include <grpo/sdk/torch.h>

#include <map>

#include "core/model/checkpoint.h"
#include "tests/rollout/rollout_fixtures.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"

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
                .find("rollout.backend.logprobs: expected one of raw, processed, got \"sampled\""),
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

TEST(NativeBackend, WeightSyncErrors) {
  const std::string dir = rollout_model_dir("qwen3");
  auto b = backend({{"model", dir, true}, {"weight_sync", "share", true}});
  core::LoadedModel trainer = core::load_model(dir);
  auto weights = named_parameters(trainer.model);
  auto missing = weights;
  missing.pop_back();
  EXPECT_NE(error_of<std::invalid_argument>([&] { b->update_weights(missing); }).find("is missing"), std::string::npos);
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
