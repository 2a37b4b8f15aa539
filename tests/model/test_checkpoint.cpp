// Hugging Face model folders: load, save, round trip, sharding, errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/model/checkpoint.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "model_fixtures.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

using namespace grpo::core;
using grpo::testing::error_of;
using grpo::testing::fixture_dir;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A path (not yet existing) inside the test's fresh scratch folder.
std::string scratch(const std::string& name) {
  return grpo::testing::fresh_test_dir("checkpoint") + "/" + name;
}

// A copy of a fixture folder whose weights are replaced by `tensors`.
std::string fixture_with_tensors(const std::string& fixture, const std::string& name, const NamedTensorList& tensors) {
  const std::string dir = scratch(name);
  fs::create_directories(dir);
  fs::copy_file(fixture_dir(fixture) + "/config.json", dir + "/config.json");
  save_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

class CheckpointRoundTrip : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(CheckpointRoundTrip, SaveThenLoadIsBitIdenticalAndNamedLikeTransformers) {
  const std::string name = GetParam();
  auto original = load_model(fixture_dir(name));
  const std::string out = scratch("roundtrip-" + name);
  save_model(out, original.model);

  // Tensor names and bytes equal the transformers-named fixture file (lm_head absent when tied).
  auto fixture_tensors = load_safetensors(fixture_dir(name) + "/model.safetensors");
  auto saved_tensors = load_safetensors(out + "/model.safetensors");
  std::map<std::string, torch::Tensor> saved(saved_tensors.begin(), saved_tensors.end());
  ASSERT_EQ(saved.size(), fixture_tensors.size());
  for (const auto& [key, tensor] : fixture_tensors) {
    ASSERT_TRUE(saved.count(key)) << key;
    EXPECT_TRUE(torch::equal(saved[key], tensor)) << key;
  }
  // config.json equals the transformers-written one.
  EXPECT_EQ(json::parse(read_file(out + "/config.json")), json::parse(read_file(fixture_dir(name) + "/config.json")));
  auto gen = json::parse(read_file(out + "/generation_config.json"));
  const auto config = json::parse(read_file(fixture_dir(name) + "/config.json"));
  EXPECT_EQ(gen["eos_token_id"], config["eos_token_id"]);
  EXPECT_EQ(gen["bos_token_id"], config["bos_token_id"]);

  auto reloaded = load_model(out);
  auto a = original.model->named_parameters();
  auto b = reloaded.model->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
}

TEST_P(CheckpointRoundTrip, ShardedSaveWritesAnIndexAndLoadsBack) {
  const std::string name = GetParam();
  auto original = load_model(fixture_dir(name));
  const std::string out = scratch("sharded-" + name);
  SaveOptions opts;
  opts.max_shard_bytes = 100 * 1000;
  save_model(out, original.model, opts);
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  auto index = json::parse(read_file(out + "/model.safetensors.index.json"));
  std::set<std::string> shards;
  for (auto& [tensor, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  for (const auto& f : shards) EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  auto reloaded = load_model(out);
  for (const auto& item : original.model->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), reloaded.model->named_parameters()[item.key()])) << item.key();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckpointRoundTrip, ::testing::ValuesIn(grpo::testing::fixture_models()));

TEST(Checkpoint, Bfloat16SaveRecordsTheDtype) {
  auto model = load_model(fixture_dir("qwen3"), torch::kBFloat16).model;
  const std::string out = scratch("bf16");
  save_model(out, model);
  EXPECT_EQ(json::parse(read_file(out + "/config.json"))["torch_dtype"], "bfloat16");
  auto tensors = load_safetensors(out + "/model.safetensors");
  for (const auto& [key, t] : tensors) EXPECT_EQ(t.scalar_type(), torch::kBFloat16) << key;
  auto reloaded = load_model(out, torch::kBFloat16).model;
  for (const auto& item : model->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), reloaded->named_parameters()[item.key()])) << item.key();
}

TEST(Checkpoint, TokenizerFilesAreWrittenAndLoadBack) {
  auto model = load_model(fixture_dir("qwen2")).model;
  auto tokenizer = Tokenizer::from_json(make_byte_level_tokenizer_json());
  SaveOptions opts;
  opts.tokenizer = &tokenizer;
  opts.chat_templates = std::vector<grpo::core::NamedChatTemplate>{{"default", grpo::core::chat_template_jinja("chatml")}};
  const std::string out = scratch("with-tokenizer");
  save_model(out, model, opts);
  auto config = json::parse(read_file(out + "/tokenizer_config.json"));
  EXPECT_EQ(config["chat_template"], grpo::core::chat_template_jinja("chatml"));
  EXPECT_EQ(Tokenizer::load(out).chat_template_source(), std::optional<std::string>(grpo::core::chat_template_jinja("chatml")));
  auto reloaded = Tokenizer::load(out);
  EXPECT_EQ(reloaded.encode("hello <|im_end|>"), tokenizer.encode("hello <|im_end|>"));
}

TEST(Checkpoint, SaveReplacesAnExistingFolderAndAFailedSaveKeepsIt) {
  auto model = load_model(fixture_dir("qwen2")).model;
  const std::string out = scratch("replace");
  fs::create_directories(out);
  atomic_write_file(out + "/stale.txt", "from an older save");
  save_model(out, model);
  EXPECT_FALSE(fs::exists(out + "/stale.txt"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));

  const std::string before = read_file(out + "/config.json");
  SaveOptions bad;
  bad.dtype = torch::kFloat64;  // not a dtype a checkpoint may be saved in
  EXPECT_THROW(save_model(out, model, bad), CheckpointError);
  EXPECT_EQ(read_file(out + "/config.json"), before);
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  for (const auto& entry : fs::directory_iterator(fs::path(out).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find("replace.tmp-"), std::string::npos) << "staging left behind";
}

TEST(Checkpoint, MissingUnexpectedAndMisshapenTensorsAreErrors) {
  auto tensors = load_safetensors(fixture_dir("qwen3") + "/model.safetensors");

  NamedTensorList missing(tensors.begin() + 1, tensors.end());
  auto dir = fixture_with_tensors("qwen3", "missing", missing);
  auto msg = error_of<CheckpointError>([&] { load_model(dir); });
  EXPECT_NE(msg.find("missing tensors: " + tensors.front().first), std::string::npos) << msg;

  NamedTensorList extra = tensors;
  extra.emplace_back("model.layers.0.self_attn.q_proj.bias", torch::zeros({128}));
  dir = fixture_with_tensors("qwen3", "unexpected", extra);
  msg = error_of<CheckpointError>([&] { load_model(dir); });
  EXPECT_NE(msg.find("not parameters of Qwen3ForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << msg;

  NamedTensorList misshapen = tensors;
  for (auto& [key, t] : misshapen)
    if (key == "model.norm.weight") t = torch::ones({65});
  dir = fixture_with_tensors("qwen3", "misshapen", misshapen);
  msg = error_of<CheckpointError>([&] { load_model(dir); });
  EXPECT_NE(msg.find("'model.norm.weight' has shape [65] but config.json implies [64]"), std::string::npos) << msg;

  msg = error_of<CheckpointError>([&] { load_model(scratch("does-not-exist")); });
  EXPECT_NE(msg.find("not a model folder"), std::string::npos) << msg;
}

TEST(Checkpoint, FreshModelInitFollowsTransformers) {
  auto config = parse_model_config(read_file(fixture_dir("qwen3") + "/config.json"), "qwen3");
  CausalLM model(config);
  model->init_weights(0.02, 7);
  auto params = model->named_parameters();
  EXPECT_TRUE(torch::equal(params["model.norm.weight"], torch::ones({64})));
  EXPECT_TRUE(torch::equal(params["model.layers.0.self_attn.q_norm.weight"], torch::ones({32})));
  auto w = params["model.layers.1.mlp.down_proj.weight"];
  EXPECT_NEAR(w.std().item<float>(), 0.02, 0.002);
  EXPECT_NEAR(w.mean().item<float>(), 0.0, 0.002);
  // Same seed, same weights.
  CausalLM again(config);
  again->init_weights(0.02, 7);
  EXPECT_TRUE(torch::equal(again->named_parameters()["model.embed_tokens.weight"], params["model.embed_tokens.weight"]));
}
