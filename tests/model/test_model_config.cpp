#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/model/model_config.h"
#include "core/util/fs.h"
#include "model_fixtures.h"
#include "tests/support/error_of.h"

using grpo::core::ModelArchitecture;
using grpo::core::ModelConfigError;
using grpo::core::parse_model_config;
using grpo::testing::error_of;
using json = nlohmann::json;

namespace {

json fixture_config(const std::string& name) {
  return json::parse(grpo::core::read_file(grpo::testing::fixture_dir(name) + "/config.json"));
}

std::string error_for(const json& j) {
  return error_of<ModelConfigError>([&] { parse_model_config(j.dump(), "m/config.json"); });
}

}  // namespace

TEST(ModelConfig, ParsesTheThreeArchitectures) {
  auto q2 = parse_model_config(fixture_config("qwen2").dump(), "qwen2");
  EXPECT_EQ(q2.architecture, ModelArchitecture::Qwen2);
  EXPECT_EQ(q2.head_dim, 16);  // hidden 64 / 4 heads: no head_dim key
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.o_proj_bias);
  EXPECT_TRUE(q2.tie_word_embeddings);
  EXPECT_EQ(q2.qk_norm, grpo::core::QkNorm::kNone);

  auto q3 = parse_model_config(fixture_config("qwen3").dump(), "qwen3");
  EXPECT_EQ(q3.architecture, ModelArchitecture::Qwen3);
  EXPECT_EQ(q3.head_dim, 32);  // explicit head_dim wins over hidden/heads
  EXPECT_EQ(q3.qk_norm, grpo::core::QkNorm::kPerHead);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.num_kv_groups(), 2);

  auto ll = parse_model_config(fixture_config("llama").dump(), "llama");
  EXPECT_EQ(ll.architecture, ModelArchitecture::Llama);
  ASSERT_EQ(ll.rope_scaling.type, grpo::core::RopeType::kLlama3);
  EXPECT_EQ(ll.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(ll.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(ll.rms_norm_eps, 1e-5);
  EXPECT_EQ(ll.eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfig, EosMayBeAList) {
  auto j = fixture_config("llama");
  j["eos_token_id"] = {128001, 8};
  j["vocab_size"] = 128256;
  EXPECT_EQ(parse_model_config(j.dump(), "x").eos_token_ids, (std::vector<int64_t>{128001, 8}));
}

TEST(ModelConfig, UnsupportedArchitectureNamesFileKeyAndSuggestion) {
  auto j = fixture_config("qwen2");
  j["architectures"] = {"Qwen2ForCausalLm"};
  auto msg = error_for(j);
  EXPECT_NE(msg.find("m/config.json: architectures"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'Qwen2ForCausalLM'"), std::string::npos) << msg;
  j["architectures"] = {"FalconForCausalLM"};
  EXPECT_NE(error_for(j).find("supported: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, MistralForCausalLM, "
                              "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, Olmo2ForCausalLM, "
                              "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM"),
            std::string::npos)
      << error_for(j);
  j.erase("architectures");
  j["model_type"] = "falcon";
  EXPECT_NE(error_for(j).find("model_type: unsupported model_type 'falcon'; supported: qwen2, qwen3, llama, mistral, "
                              "gemma2, gemma3_text, phi3, olmo2, qwen2_moe, qwen3_moe"),
            std::string::npos)
      << error_for(j);
}

TEST(ModelConfig, SemanticsChangingFieldsAreErrors) {
  auto j = fixture_config("llama");
  j["use_sliding_window"] = true;
  EXPECT_NE(error_for(j).find("use_sliding_window: Llama has no sliding-window attention"), std::string::npos)
      << error_for(j);

  j = fixture_config("llama");
  j["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 4.0}};
  EXPECT_NE(error_for(j).find("rope_scaling.rope_type: RoPE scaling type 'mrope' is not supported"), std::string::npos);
  j["rope_scaling"] = {{"rope_type", "linear"}};
  EXPECT_NE(error_for(j).find("rope_scaling.factor: missing: RoPE scaling 'linear' needs it"), std::string::npos)
      << error_for(j);

  j = fixture_config("llama");
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_for(j).find("hidden_act: 'gelu' is not supported"), std::string::npos);

  j = fixture_config("llama");
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(error_for(j).find("layer_types[1]: Llama layers are \"full_attention\""), std::string::npos) << error_for(j);

  j = fixture_config("qwen3");  // its sliding_window is null
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(error_for(j).find("sliding_window: missing: layers use sliding-window attention"), std::string::npos)
      << error_for(j);

  j = fixture_config("qwen3");
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_for(j).find("num_key_value_heads: num_attention_heads (4) must be a multiple"), std::string::npos);

  j = fixture_config("qwen3");
  j["attention_dropout"] = 0.1;
  EXPECT_NE(error_for(j).find("attention_dropout"), std::string::npos);
}

TEST(ModelConfig, TypeErrorsNameTheKey) {
  auto j = fixture_config("qwen3");
  j["hidden_size"] = "64";
  EXPECT_NE(error_for(j).find("m/config.json: hidden_size: expected a positive integer"), std::string::npos);
  j = fixture_config("qwen3");
  j.erase("vocab_size");
  EXPECT_NE(error_for(j).find("vocab_size: missing"), std::string::npos);
  EXPECT_NE(error_of<ModelConfigError>([] { parse_model_config("{not json", "c.json"); }).find("c.json: not valid JSON"),
            std::string::npos);
}

TEST(ModelConfig, RopeParametersOfTransformers5AreRead) {
  auto j = fixture_config("llama");
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  auto c = parse_model_config(j.dump(), "x");
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, grpo::core::RopeType::kLlama3);
}

TEST(ModelConfig, SavedJsonKeepsUnknownKeysAndRoundTrips) {
  for (const auto& name : grpo::testing::fixture_models()) {
    auto src = fixture_config(name);
    auto c = parse_model_config(src.dump(), "x");
    auto written = json::parse(grpo::core::model_config_to_json(c, "bfloat16"));
    EXPECT_EQ(written["torch_dtype"], "bfloat16");
    EXPECT_EQ(written["initializer_range"], src["initializer_range"]);  // carried over untouched
    written["torch_dtype"] = "float32";
    EXPECT_EQ(written, src) << name;  // nothing else changed for a transformers-written config
  }
}

TEST(ModelConfig, FreshConfigJsonHasTheKeysTransformersWrites) {
  // A config built without a source file (a model created from scratch).
  auto c = parse_model_config(fixture_config("qwen3").dump(), "x");
  c.source_json.clear();
  auto written = json::parse(grpo::core::model_config_to_json(c, "float32"));
  for (const char* key : {"architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                          "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                          "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                          "hidden_act", "torch_dtype", "attention_bias", "bos_token_id", "eos_token_id"})
    EXPECT_TRUE(written.contains(key)) << key;
  EXPECT_EQ(parse_model_config(written.dump(), "again").head_dim, 32);
}

TEST(ModelConfig, HeadDimDefaultsFollowEachConfigClass) {
  // Qwen3Config defaults head_dim to 128; Qwen2/Llama derive it from hidden_size / heads.
  auto j = fixture_config("qwen3");
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j.dump(), "x").head_dim, 128);
  j = fixture_config("llama");
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j.dump(), "x").head_dim, 16);
}

TEST(ModelConfig, Transformers5DtypeKeyIsUpdatedOnSave) {
  auto j = fixture_config("qwen3");
  j["dtype"] = "bfloat16";
  auto written = json::parse(grpo::core::model_config_to_json(parse_model_config(j.dump(), "x"), "float32"));
  EXPECT_EQ(written["dtype"], "float32");
  EXPECT_EQ(written["torch_dtype"], "float32");
}

TEST(ModelConfig, DeeplyNestedJsonIsAnErrorNotACrash) {
  auto j = fixture_config("qwen3");
  std::string text = j.dump();
  text.insert(text.size() - 1, ", \"deep\": " + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_NE(error_of<ModelConfigError>([&] { parse_model_config(text, "c.json"); }).find("c.json: JSON nested deeper than 64 levels"),
            std::string::npos);
}
