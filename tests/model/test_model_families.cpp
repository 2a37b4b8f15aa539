// The families added over the shared blocks (core/model/families/): what each config.json turns
// on, the mixture-of-experts routing and load-balancing loss against the independent float64
// reference (tests/fixtures/models/generate_families.py), the sequence-classification head
// (reward models), LoRA over fused and expert projections, and the errors of bad configs.
// Logit parity, padded/packed/KV-cache decoding, greedy decoding and the save/load round trip of
// every family run in test_transformer.cpp and test_checkpoint.cpp over fixture_models().
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/model/lora.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"
#include "core/util/fs.h"
#include "tests/model/model_fixtures.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

using namespace grpo::core;
using grpo::testing::error_of;
using grpo::testing::case_model_dir;
using grpo::testing::case_reference;
using grpo::testing::fixture_cases;
using grpo::testing::fixture_dir;
using grpo::testing::fixture_reference;
using grpo::testing::FixtureCase;
using grpo::testing::Reference;
using grpo::testing::max_abs_diff;
using json = nlohmann::json;

namespace {

ModelConfig config_of(const std::string& fixture) {
  return parse_model_config(read_file(fixture_dir(fixture) + "/config.json"), fixture);
}

json config_json(const std::string& fixture) { return json::parse(read_file(fixture_dir(fixture) + "/config.json")); }

std::string error_for(const json& j) {
  return error_of<ModelConfigError>([&] { parse_model_config(j.dump(), "m/config.json"); });
}

std::vector<bool> bools(std::initializer_list<bool> v) { return v; }

}  // namespace

// ---- what each family's config.json turns on (values from generate_families.py's configs) ----

TEST(FamilyConfig, Mistral) {
  const ModelConfig c = config_of("mistral");
  EXPECT_EQ(c.architecture, ModelArchitecture::Mistral);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.sliding_layers, bools({true, true}));
  EXPECT_EQ(c.norm_placement, NormPlacement::kPreNorm);
  EXPECT_FALSE(c.qkv_bias);
}

TEST(FamilyConfig, Gemma2) {
  const ModelConfig c = config_of("gemma2");
  EXPECT_EQ(c.architecture, ModelArchitecture::Gemma2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.norm_placement, NormPlacement::kSandwich);
  EXPECT_EQ(c.rms_norm_kind, RmsNormKind::kOffsetInFloat32);
  EXPECT_EQ(c.hidden_act, Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(c.embedding_multiplier, 8.0);  // sqrt(64)
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(c.attn_logit_softcapping, 8.0);
  EXPECT_DOUBLE_EQ(c.final_logit_softcapping, 10.0);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.sliding_layers, bools({true, false}));  // layer 0 local, layer 1 global
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(FamilyConfig, Gemma2ClassDefaultsApplyOnlyToAbsentKeys) {
  json j = config_json("gemma2");
  j.erase("attn_logit_softcapping");
  j["final_logit_softcapping"] = nullptr;
  j.erase("layer_types");
  j.erase("tie_word_embeddings");
  const ModelConfig c = parse_model_config(j.dump(), "x");
  EXPECT_DOUBLE_EQ(c.attn_logit_softcapping, 50.0);  // Gemma2Config's default
  EXPECT_DOUBLE_EQ(c.final_logit_softcapping, 0.0);  // null: off
  EXPECT_EQ(c.sliding_layers, bools({true, false}));
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(FamilyConfig, Gemma3) {
  const ModelConfig c = config_of("gemma3");
  EXPECT_EQ(c.architecture, ModelArchitecture::Gemma3);
  EXPECT_EQ(c.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(c.sliding_layers, bools({true, true, false}));
  ASSERT_TRUE(c.local_rope.has_value());
  EXPECT_DOUBLE_EQ(c.local_rope->theta, 10000.0);
  EXPECT_EQ(c.local_rope->scaling.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.attn_logit_softcapping, 0.0);
  EXPECT_DOUBLE_EQ(c.final_logit_softcapping, 0.0);
}

TEST(FamilyConfig, Phi3) {
  const ModelConfig c = config_of("phi3");
  EXPECT_TRUE(c.fused_qkv);
  EXPECT_TRUE(c.fused_gate_up);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLongrope);
  EXPECT_EQ(c.rope_scaling.short_factor.size(), 8u);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);  // 256 / 64
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(FamilyConfig, Olmo2) {
  const ModelConfig c = config_of("olmo2");
  EXPECT_EQ(c.norm_placement, NormPlacement::kPostNorm);
  EXPECT_EQ(c.qk_norm, QkNorm::kAllHeads);
  EXPECT_EQ(c.rms_norm_kind, RmsNormKind::kScaleThenCast);
  const auto names = CausalLM(c)->named_parameters().keys();
  EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.0.input_layernorm.weight"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.0.post_feedforward_layernorm.weight"), 1);
}

TEST(FamilyConfig, QwenMoe) {
  const ModelConfig a = config_of("qwen2_moe");
  EXPECT_EQ(a.num_experts, 4);
  EXPECT_EQ(a.num_experts_per_tok, 2);
  EXPECT_FALSE(a.norm_topk_prob);
  EXPECT_EQ(a.shared_expert_intermediate_size, 64);
  EXPECT_EQ(a.moe_layers, bools({true, false, true}));  // mlp_only_layers [1]
  EXPECT_TRUE(a.qkv_bias);
  const ModelConfig b = config_of("qwen3_moe");
  EXPECT_EQ(b.num_experts, 8);
  EXPECT_TRUE(b.norm_topk_prob);
  EXPECT_EQ(b.shared_expert_intermediate_size, 0);
  EXPECT_EQ(b.moe_layers, bools({true, true}));
  EXPECT_EQ(b.rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(b.rope_scaling.factor, 4.0);
}

TEST(FamilyConfig, QwenMoeExpertCountUnderTransformers5sName) {
  // transformers 5 saves Qwen3MoeConfig's num_experts as num_local_experts.
  json j = config_json("qwen3_moe");
  j["num_local_experts"] = j["num_experts"];
  j.erase("num_experts");
  EXPECT_EQ(parse_model_config(j.dump(), "m/config.json").num_experts, 8);
  j["num_experts"] = 4;  // both, disagreeing
  EXPECT_NE(error_for(j).find("num_local_experts: is 8, but num_experts is 4"), std::string::npos) << error_for(j);
}

// ---- RoPE scalings by hand from the published formulas ----

TEST(Rotary, YarnFrequenciesAndAttentionFactorFollowThePaper) {
  // head_dim 32, theta 1e6, factor 4, original context 64, beta 32/1 (qwen3_moe's config).
  const ModelConfig c = config_of("qwen3_moe");
  RotaryEmbedding rope(c);
  const double d = 32, theta = 1e6, original = 64;
  auto corr = [&](double rotations) { return d * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(theta)); };
  const double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), d - 1);
  auto inv = rope.inv_freq().to(torch::kFloat64);
  for (int i = 0; i < 16; ++i) {
    const double base = 1.0 / std::pow(theta, 2.0 * i / d);
    const double ramp = std::min(std::max((i - low) / (high - low), 0.0), 1.0);
    const double expected = base / 4 * ramp + base * (1 - ramp);
    EXPECT_NEAR(inv[i].item<double>() / expected, 1.0, 1e-6) << i;
  }
  EXPECT_NEAR(rope.attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-12);
  auto [cos, sin] = rope.cos_sin(torch::zeros({1, 1}, torch::kLong));
  EXPECT_NEAR(cos[0][0][0].item<double>(), rope.attention_factor(), 1e-6);  // cos(0) scaled
}

TEST(Rotary, DynamicNtkGrowsTheBaseOnlyForLongCalls) {
  const ModelConfig c = config_of("llama_dynamic");  // theta 1e4, factor 2, max_position_embeddings 64
  RotaryEmbedding rope(c);
  EXPECT_TRUE(torch::equal(rope.inv_freq(64), rope.inv_freq()));
  const double d = static_cast<double>(c.head_dim);
  const double base = 10000.0 * std::pow(2.0 * 100 / 64 - 1, d / (d - 2));
  auto inv = rope.inv_freq(100).to(torch::kFloat64);
  for (int i = 0; i < c.head_dim / 2; ++i)
    EXPECT_NEAR(inv[i].item<double>() * std::pow(base, 2.0 * i / d), 1.0, 1e-5) << i;
}

TEST(Rotary, LongropeSwitchesFactorsPastTheOriginalContext) {
  const ModelConfig c = config_of("phi3");
  RotaryEmbedding rope(c);
  const auto& s = c.rope_scaling;
  const double d = static_cast<double>(c.head_dim);
  for (int64_t len : {64, 65}) {
    const auto& factors = len > 64 ? s.long_factor : s.short_factor;
    auto inv = rope.inv_freq(len).to(torch::kFloat64);
    for (int i = 0; i < c.head_dim / 2; ++i)
      EXPECT_NEAR(inv[i].item<double>() * factors[static_cast<std::size_t>(i)] * std::pow(c.rope_theta, 2.0 * i / d), 1.0, 1e-6);
  }
  EXPECT_NEAR(rope.attention_factor(), std::sqrt(1 + std::log(4.0) / std::log(64.0)), 1e-12);
}

// ---- mixture of experts ----

// Float64/* against the committed reference, Transformers/* against transformers' router logits
// and load_balancing_loss_func (tests/reference/models).
class MoeRouting : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(MoeRouting, DecisionsAndLoadBalancingLossEqualTheReference) {
  auto model = load_model(case_model_dir(GetParam())).model;
  model->eval();
  const auto ref = case_reference(GetParam());
  const ModelConfig& c = model->config();
  torch::NoGradGuard no_grad;
  model->set_record_router_logits(true);
  std::vector<int64_t> moe_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) moe_layers.push_back(l);
  for (int k = 0; k < 4; ++k) {
    const std::string seq = "seq." + std::to_string(k);
    auto x = ref.at(seq + ".input_ids").unsqueeze(0);
    model(x, AttentionLayout::padded(torch::ones_like(x)));
    const auto logits = model->router_logits();
    ASSERT_EQ(logits.size(), moe_layers.size());
    for (std::size_t i = 0; i < moe_layers.size(); ++i) {
      const auto chosen = std::get<1>(torch::topk(torch::softmax(logits[i], -1), c.num_experts_per_tok, -1));
      const auto expected = ref.at(seq + ".router." + std::to_string(moe_layers[i]) + ".experts");
      EXPECT_TRUE(torch::equal(chosen, expected)) << seq << " layer " << moe_layers[i];
    }
    const double aux = load_balancing_loss(logits, c.num_experts, c.num_experts_per_tok).item<double>();
    EXPECT_NEAR(aux, ref.at(seq + ".router_aux_loss").item<double>(), 1e-5) << seq;
  }
  model->set_record_router_logits(false);
  auto x = ref.at("seq.0.input_ids").unsqueeze(0);
  model(x, AttentionLayout::padded(torch::ones_like(x)));
  EXPECT_TRUE(model->router_logits().empty());
}

INSTANTIATE_TEST_SUITE_P(Float64, MoeRouting,
                         ::testing::ValuesIn(fixture_cases(Reference::kFloat64, grpo::testing::moe_fixture_models())),
                         grpo::testing::fixture_case_name);
INSTANTIATE_TEST_SUITE_P(Transformers, MoeRouting,
                         ::testing::ValuesIn(fixture_cases(Reference::kTransformers, grpo::testing::moe_fixture_models())),
                         grpo::testing::fixture_case_name);

TEST(MoeLoss, MaskedTokensDoNotCount) {
  // Two tokens, two experts, top-1: token 0 strongly prefers expert 0, token 1 expert 1.
  auto logits = torch::tensor({{4.0, 0.0}, {0.0, 4.0}});
  const double p = 1.0 / (1.0 + std::exp(-4.0));
  // Both: f = (1/2, 1/2), P = (1/2, 1/2) -> 2 * (1/4 + 1/4) = 1.
  EXPECT_NEAR(load_balancing_loss({logits}, 2, 1).item<double>(), 1.0, 1e-6);
  // Token 1 masked: f = (1, 0), P = (p, 1 - p) -> 2 p.
  EXPECT_NEAR(load_balancing_loss({logits}, 2, 1, torch::tensor({1, 0})).item<double>(), 2 * p, 1e-6);
}

// ---- sequence classification (reward models) ----

// The reward head against both references (Transformers/*: transformers'
// Qwen2ForSequenceClassification on the head as transformers saves it).
class RewardHeadParity : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(RewardHeadParity, ScoresEqualTheReference) {
  auto loaded = load_model(case_model_dir(GetParam()));
  auto model = loaded.model;
  model->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(model->config().head, ModelHead::kSequenceClassification);
  EXPECT_EQ(model->config().num_labels, 1);
  const auto ref = case_reference(GetParam());
  auto scores = model->sequence_scores(ref.at("rm.input_ids"), ref.at("rm.attention_mask"));
  ASSERT_EQ(scores.sizes(), (std::vector<int64_t>{4, 1}));
  EXPECT_LT(max_abs_diff(scores.squeeze(1), ref.at("rm.scores")), 1e-5) << scores;
  for (int k = 0; k < 4; ++k) {
    const std::string seq = "seq." + std::to_string(k);
    auto x = ref.at(seq + ".input_ids").unsqueeze(0);
    EXPECT_LT(max_abs_diff(model->sequence_scores(x, torch::ones_like(x))[0], ref.at(seq + ".scores")), 1e-5) << seq;
  }
  // Left padding: the same score (the last token is the last real one).
  auto ids = ref.at("rm.input_ids")[1].narrow(0, 0, 9);
  auto left = torch::cat({torch::zeros({5}, torch::kLong), ids}).unsqueeze(0);
  auto mask = torch::cat({torch::zeros({5}, torch::kLong), torch::ones({9}, torch::kLong)}).unsqueeze(0);
  EXPECT_LT(max_abs_diff(model->sequence_scores(left, mask)[0][0], ref.at("rm.scores")[1]), 1e-5);
  EXPECT_THROW(model->logits(torch::zeros({1, 64})), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Float64, RewardHeadParity,
                         ::testing::ValuesIn(fixture_cases(Reference::kFloat64, {"qwen2_rm"})),
                         grpo::testing::fixture_case_name);
INSTANTIATE_TEST_SUITE_P(Transformers, RewardHeadParity,
                         ::testing::ValuesIn(fixture_cases(Reference::kTransformers, {"qwen2_rm"})),
                         grpo::testing::fixture_case_name);

TEST(SequenceClassification, SavesAndLoadsWithItsHead) {
  auto model = load_model(fixture_dir("qwen2_rm")).model;
  const std::string out = grpo::testing::fresh_test_dir("families") + "/rm";
  save_model(out, model);
  EXPECT_EQ(json::parse(read_file(out + "/config.json"))["architectures"][0], "Qwen2ForSequenceClassification");
  auto again = load_model(out).model;
  EXPECT_TRUE(torch::equal(again->score->weight, model->score->weight));
}

// ---- LoRA over every family's projections ----

TEST(FamilyLora, AllLinearAttachesToEveryProjectionAndStartsAsTheBaseModel) {
  for (const std::string& name : grpo::testing::fixture_models()) {
    auto model = load_model(fixture_dir(name)).model;
    model->eval();
    auto x = fixture_reference(name).at("seq.1.input_ids").unsqueeze(0);
    torch::NoGradGuard no_grad;
    const auto base = model(x, AttentionLayout::padded(torch::ones_like(x)));
    LoraSettings settings;
    settings.r = 2;
    settings.target_modules = {"all-linear"};
    LoraAdapters lora(model, settings, 7);
    int64_t projections = 0;
    for (const auto& m : model->modules())
      if (const auto* p = dynamic_cast<const ProjectionImpl*>(m.get()); p && p->spec().role != ProjectionRole::kLmHead)
        ++projections;
    EXPECT_EQ(static_cast<int64_t>(lora.targets().size()), projections) << name;
    EXPECT_TRUE(torch::allclose(model(x, AttentionLayout::padded(torch::ones_like(x))), base)) << name;  // B = 0
  }
  LoraSettings fused;
  fused.r = 2;
  auto phi3 = load_model(fixture_dir("phi3")).model;
  LoraAdapters lora(phi3, fused, 1);  // PEFT's default for phi3: qkv_proj
  ASSERT_EQ(lora.targets().size(), 2u);
  EXPECT_EQ(lora.targets()[0].module, "model.layers.0.self_attn.qkv_proj");
}

// ---- every family trains: a few AdamW steps of next-token loss lower it ----

TEST(FamilyTraining, AdamWStepsLowerTheNextTokenLossOfEveryFamily) {
  for (const std::string& name : grpo::testing::fixture_models()) {
    auto model = load_model(fixture_dir(name)).model;
    model->train();
    const auto seq = fixture_reference(name).at("seq.3.input_ids");  // 40 tokens: past the sliding windows
    const int64_t n = seq.size(0);
    auto x = seq.narrow(0, 0, n - 1).unsqueeze(0);
    auto targets = seq.narrow(0, 1, n - 1);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
    auto loss_of = [&] {
      auto h = model->hidden_states(x, AttentionLayout::padded(torch::ones_like(x)))[0];
      return -token_logprobs(h, model->lm_head_weight(), targets, model->logprob_options({})).logprobs.mean();
    };
    const double before = loss_of().item<double>();
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      auto loss = loss_of();
      loss.backward();
      for (const auto& p : model->named_parameters())  // (an expert no token chose has none)
        if (p.key().find(".experts.") == std::string::npos)
          ASSERT_TRUE(p.value().grad().defined()) << name << ": " << p.key() << " got no gradient";
      opt.step();
    }
    EXPECT_LT(loss_of().item<double>(), before - 0.05) << name;
  }
}

// ---- bad input ----

TEST(FamilyConfig, AKeyTheFamilyNeedsIsNamed) {
  json j = config_json("qwen2_moe");
  j.erase("num_experts");
  EXPECT_NE(error_for(j).find("m/config.json: num_experts: missing"), std::string::npos) << error_for(j);
  j = config_json("qwen2_moe");
  j.erase("shared_expert_intermediate_size");
  EXPECT_NE(error_for(j).find("shared_expert_intermediate_size: missing"), std::string::npos) << error_for(j);
  j = config_json("qwen3_moe");
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(error_for(j).find("num_experts_per_tok: is 9, more than num_experts (8)"), std::string::npos) << error_for(j);
  j = config_json("phi3");
  j["rope_scaling"].erase("long_factor");
  EXPECT_NE(error_for(j).find("rope_scaling.long_factor: expected a list of 8 numbers"), std::string::npos) << error_for(j);
  j = config_json("phi3");
  j["rope_scaling"]["short_factor"] = {1.0, 2.0};
  EXPECT_NE(error_for(j).find("rope_scaling.short_factor: has 2 entries; head_dim 16 needs 8"), std::string::npos)
      << error_for(j);
  j = config_json("gemma3");
  j["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  EXPECT_NE(error_for(j).find("layer_types[1]: expected \"full_attention\" or \"sliding_attention\""), std::string::npos)
      << error_for(j);
  j = config_json("mistral");
  j["hidden_act"] = "relu";
  EXPECT_NE(error_for(j).find("hidden_act: 'relu' is not supported (supported: silu, gelu_pytorch_tanh)"), std::string::npos);
  j = config_json("olmo2");
  j["use_sliding_window"] = true;
  EXPECT_NE(error_for(j).find("use_sliding_window: OLMo 2 has no sliding-window attention"), std::string::npos);
  j = config_json("qwen2_moe");
  j["mlp_only_layers"] = {5};
  EXPECT_NE(error_for(j).find("mlp_only_layers[0]: expected an integer in [0, 3)"), std::string::npos) << error_for(j);
}

TEST(FamilyConfig, Transformers5RopeParametersByLayerType) {
  // Gemma 3 as transformers 5 writes it: no rope_theta / rope_local_base_freq at the top level.
  json j = config_json("gemma3");
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("rope_local_base_freq");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  const ModelConfig c = parse_model_config(j.dump(), "x");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  ASSERT_TRUE(c.local_rope.has_value());
  EXPECT_DOUBLE_EQ(c.local_rope->theta, 5000.0);
  EXPECT_EQ(c.local_rope->scaling.type, RopeType::kDefault);
  j["rope_parameters"]["chunked_attention"] = {{"rope_type", "default"}};
  EXPECT_NE(error_for(j).find("rope_parameters.chunked_attention: unknown layer type"), std::string::npos) << error_for(j);
}

TEST(FamilyConfig, MistralWindowDefaultsLikeMistralConfig) {
  json j = config_json("mistral");
  j.erase("sliding_window");
  EXPECT_EQ(parse_model_config(j.dump(), "x").sliding_window, 4096);  // MistralConfig's default
  j["sliding_window"] = nullptr;
  const ModelConfig full = parse_model_config(j.dump(), "x");
  EXPECT_EQ(full.sliding_window, 0);
  EXPECT_FALSE(full.is_sliding(0));
}

TEST(FamilyConfig, RopeTypeMustBeAString) {
  json j = config_json("llama");
  j["rope_scaling"]["rope_type"] = 3;
  EXPECT_NE(error_for(j).find("rope_scaling.rope_type: expected a string"), std::string::npos) << error_for(j);
  j = config_json("qwen3_moe");
  j["use_sliding_window"] = true;
  EXPECT_NE(error_for(j).find("use_sliding_window: sliding windows of Qwen3-MoE are not implemented"), std::string::npos)
      << error_for(j);
}

TEST(FamilyConfig, QwenSlidingWindowsFollowMaxWindowLayers) {
  json j = config_json("qwen2");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 8;
  j["max_window_layers"] = 1;
  const ModelConfig c = parse_model_config(j.dump(), "x");
  EXPECT_EQ(c.sliding_layers, bools({false, true}));
  EXPECT_EQ(c.sliding_window, 8);
}
