// LoRA adapters (core/model/lora.h) against an independent reference and PEFT's format.
//
// tests/fixtures/lora/ (README.md there) was written by a separate float64 PyTorch script
// (generate_lora_reference.py, from PEFT v0.17.1's formulas, by someone who had not read this
// C++): two PEFT adapter folders with non-zero A and B over the qwen2 and llama fixture models,
// the adapted logits, the next-token loss, its gradient with respect to every adapter tensor, and
// the merged weights. Its adapter_config.json was checked against PEFT v0.17.1's own
// LoraConfig.save_pretrained (the README says how); key names follow
// src/peft/utils/save_and_load.py get_peft_model_state_dict (adapter name removed) and the
// "base_model.model." prefix of PeftModelForCausalLM.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/model/checkpoint.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/util/fs.h"
#include "tests/model/model_fixtures.h"
#include "tests/support/error_of.h"
#include "tests/support/file_damage.h"
#include "tests/support/test_dir.h"

using namespace grpo::core;
using namespace grpo::testing;

namespace {

std::string lora_fixture(const std::string& name) { return std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/lora/" + name; }

std::map<std::string, torch::Tensor> load_map(const std::string& path) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [k, t] : load_safetensors(path)) out[k] = t;
  return out;
}

// Logits [T, V] of one unpadded sequence.
torch::Tensor logits_of(CausalLM& model, const torch::Tensor& ids) {
  const torch::Tensor input = ids.view({1, -1});
  return model->forward(input, AttentionLayout::padded(torch::ones_like(input)))[0];
}

// Mean next-token cross-entropy over positions 0..T-2 (the fixture's loss).
torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(0);
  const torch::Tensor lp = torch::log_softmax(logits.narrow(0, 0, T - 1), -1);
  return -lp.gather(1, ids.narrow(0, 1, T - 1).view({-1, 1})).mean();
}

// "Within 1e-5" as torch.allclose(ours, reference, rtol=1e-5, atol=1e-5): |a - b| <= 1e-5 (1 + |b|).
// Logits reach |4.5| here, where float32's own spacing is 5e-7 and a float32 forward differs from
// the float64 reference by ~1e-5 in absolute terms (docs/model-fixtures.md: ~8e-6 for the base).
::testing::AssertionResult within_1e5(const torch::Tensor& ours, const torch::Tensor& reference) {
  const torch::Tensor a = ours.to(torch::kFloat64), b = reference.to(torch::kFloat64);
  const double excess = ((a - b).abs() - 1e-5 * (1.0 + b.abs())).max().item<double>();
  if (excess <= 0.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |diff| " << (a - b).abs().max().item<double>() << " exceeds 1e-5 (1 + |ref|) by "
                                       << excess;
}

struct Case {
  const char* folder;
  const char* model;
};
const Case kCases[] = {{"qwen2_all_linear", "qwen2"}, {"llama_rslora_qv", "llama"}};

}  // namespace

// The adapted forward and the adapter gradients equal the float64 reference within 1e-5
// (gradients: also in absolute terms, checked below).
TEST(Lora, LogitsAndAdapterGradientsMatchTheIndependentReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.folder);
    const std::string dir = lora_fixture(c.folder);
    LoadedModel base = load_model(fixture_dir(c.model));
    const PeftAdapterConfig config = read_peft_adapter_config(dir);
    LoraAdapters lora(base.model, config.settings, 7);
    lora.load_peft_folder(dir);
    const auto ref = load_map(dir + "/reference.safetensors");
    const torch::Tensor ids = ref.at("input_ids");

    const torch::Tensor logits = logits_of(base.model, ids);
    EXPECT_TRUE(within_1e5(logits, ref.at("logits")));
    const torch::Tensor loss = next_token_loss(logits, ids);
    EXPECT_NEAR(loss.item<double>(), ref.at("loss").item<double>(), 1e-5);
    loss.backward();

    const NamedTensorList names = lora.peft_state();
    const std::vector<torch::Tensor> params = lora.parameters();
    ASSERT_EQ(names.size(), params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      SCOPED_TRACE(names[i].first);
      ASSERT_TRUE(params[i].grad().defined());
      EXPECT_TRUE(within_1e5(params[i].grad(), ref.at("grad." + names[i].first)));
      EXPECT_LT(max_abs_diff(params[i].grad(), ref.at("grad." + names[i].first)), 1e-5);
    }
    for (const auto& p : base.model->named_parameters()) EXPECT_FALSE(p.value().grad().defined()) << p.key();

    // Without the adapters the model is the base: the reference's base logits.
    const AdaptersOff off(&lora);
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(within_1e5(logits_of(base.model, ids), ref.at("base_logits")));
  }
}

// B = 0 at initialization (true and gaussian): the adapted model's logits are the base model's,
// bit for bit.
TEST(Lora, FreshAdaptersLeaveTheLogitsBitIdentical) {
  for (const std::string model : {"qwen2", "qwen3", "llama"})
    for (const LoraInit init : {LoraInit::kKaimingUniform, LoraInit::kGaussian}) {
      SCOPED_TRACE(model);
      LoadedModel m = load_model(fixture_dir(model));
      const torch::Tensor ids = torch::arange(3, 40, 3, torch::kLong);
      torch::Tensor before, after;
      {
        torch::NoGradGuard no_grad;
        before = logits_of(m.model, ids);
      }
      LoraSettings s;
      s.r = 8;
      s.lora_alpha = 16;
      s.target_modules = {"all-linear"};
      s.init = init;
      LoraAdapters lora(m.model, s, 1);
      EXPECT_GT(lora.parameters()[0].abs().sum().item<double>(), 0.0);  // A is initialized
      EXPECT_EQ(lora.parameters()[1].abs().sum().item<double>(), 0.0);  // B = 0
      after = logits_of(m.model, ids);  // with autograd on, as a training pass
      EXPECT_TRUE(torch::equal(before, after.detach()));
    }
}

// PEFT's initializations: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)) or
// N(0, 1/r) (gaussian), seeded: the same seed gives the same A.
TEST(Lora, InitializationFollowsPeft) {
  LoadedModel m = load_model(fixture_dir("qwen2"));
  LoraSettings s;
  s.r = 4;
  s.target_modules = {"down_proj"};  // in_features = intermediate_size = 128
  torch::Tensor first;
  {
    LoraAdapters a(m.model, s, 3);
    const torch::Tensor A = a.parameters()[0];
    EXPECT_LE(A.abs().max().item<double>(), 1.0 / std::sqrt(128.0));
    EXPECT_GT(A.abs().max().item<double>(), 0.8 / std::sqrt(128.0));  // 512 draws fill the range
    first = A.detach().clone();
  }
  {
    LoraAdapters again(m.model, s, 3);
    EXPECT_TRUE(torch::equal(again.parameters()[0], first));
  }
  s.init = LoraInit::kGaussian;
  s.target_modules = {"all-linear"};
  LoraAdapters g(m.model, s, 3);
  torch::Tensor all = torch::cat([&] {
    std::vector<torch::Tensor> As;
    const auto p = g.parameters();
    for (std::size_t i = 0; i < p.size(); i += 2) As.push_back(p[i].flatten());
    return As;
  }());
  EXPECT_NEAR(all.std().item<double>(), 1.0 / 4.0, 0.02);  // 14 adapters x 4 x 64..128 draws
}

// Training touches only the adapters: base weights bit-identical after optimizer steps, both A
// and B moved (A's gradient is 0 while B = 0, so it moves from the second step on).
TEST(Lora, OnlyAdaptersReceiveGradientsAndChange) {
  LoadedModel m = load_model(fixture_dir("llama"));
  std::map<std::string, torch::Tensor> base_before;
  for (const auto& p : m.model->named_parameters()) base_before[p.key()] = p.value().detach().clone();
  LoraSettings s;
  s.r = 4;
  s.target_modules = {"all-linear"};
  LoraAdapters lora(m.model, s, 5);
  std::vector<torch::Tensor> start;
  for (const auto& p : lora.parameters()) start.push_back(p.detach().clone());
  OptimizerSettings o;
  o.learning_rate = 1e-2;
  auto adam = make_adamw(lora.parameters(), o);
  const torch::Tensor ids = torch::tensor({5, 17, 99, 3, 250, 41, 8, 77}, torch::kLong);
  for (int step = 0; step < 2; ++step) {
    adam->zero_grad();
    next_token_loss(logits_of(m.model, ids), ids).backward();
    for (const auto& p : m.model->named_parameters()) {
      EXPECT_FALSE(p.value().requires_grad()) << p.key();
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
    }
    adam->step();
  }
  for (const auto& p : m.model->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), base_before.at(p.key()))) << p.key();
  const auto after = lora.parameters();
  for (std::size_t i = 0; i < after.size(); ++i) EXPECT_FALSE(torch::equal(after[i], start[i])) << "adapter tensor " << i;
}

// Merging: W + scaling B A equals the reference's merged weights, and the merged model's logits
// equal the adapted model's within 1e-5; the merged weights a rollout engine gets are the same.
TEST(Lora, MergedModelEqualsBasePlusAdapters) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.folder);
    const std::string dir = lora_fixture(c.folder);
    const auto ref = load_map(dir + "/reference.safetensors");
    LoadedModel m = load_model(fixture_dir(c.model));
    LoraAdapters lora(m.model, read_peft_adapter_config(dir).settings, 0);
    lora.load_peft_folder(dir);
    torch::NoGradGuard no_grad;
    const torch::Tensor adapted = logits_of(m.model, ref.at("input_ids"));
    const auto merged = lora.merged_weights();
    std::size_t expected = 0;
    for (const auto& [k, t] : ref)
      if (k.rfind("merged.", 0) == 0) ++expected;
    ASSERT_EQ(merged.size(), expected);
    for (const auto& [name, w] : merged) EXPECT_LT(max_abs_diff(w, ref.at("merged." + name)), 1e-6) << name;
    const auto bf16 = lora.merged_weights(torch::kBFloat16);
    EXPECT_EQ(bf16.front().second.scalar_type(), torch::kBFloat16);
    lora.merge_into_base();
    const torch::Tensor after = logits_of(m.model, ref.at("input_ids"));
    EXPECT_TRUE(within_1e5(after, adapted));
    EXPECT_TRUE(within_1e5(after, ref.at("logits")));
    for (const auto& p : m.model->parameters()) EXPECT_TRUE(p.requires_grad());  // detached: trainable again
  }
}

// Switching adapters off gives the base model exactly, and on again the adapted one.
TEST(Lora, AdaptersOffIsTheBaseModel) {
  const std::string dir = lora_fixture("qwen2_all_linear");
  LoadedModel m = load_model(fixture_dir("qwen2"));
  const torch::Tensor ids = torch::tensor({1, 2, 3, 4, 5}, torch::kLong);
  torch::NoGradGuard no_grad;
  const torch::Tensor base = logits_of(m.model, ids);
  LoraAdapters lora(m.model, read_peft_adapter_config(dir).settings, 0);
  lora.load_peft_folder(dir);
  const torch::Tensor adapted = logits_of(m.model, ids);
  EXPECT_GT(max_abs_diff(adapted, base), 0.1);
  {
    const AdaptersOff off(&lora);
    EXPECT_TRUE(torch::equal(logits_of(m.model, ids), base));
    const AdaptersOff nested(&lora);
  }
  EXPECT_TRUE(torch::equal(logits_of(m.model, ids), adapted));
  const AdaptersOff no_adapters(nullptr);  // a no-op
}

// lora_dropout applies to training passes only: log-probs under no-grad are deterministic.
TEST(Lora, DropoutOnlyInTrainingPasses) {
  const std::string dir = lora_fixture("qwen2_all_linear");
  LoadedModel m = load_model(fixture_dir("qwen2"));
  LoraSettings s = read_peft_adapter_config(dir).settings;
  s.lora_dropout = 0.5;
  LoraAdapters lora(m.model, s, 0);
  lora.load_peft_folder(dir);
  m.model->train();
  const torch::Tensor ids = torch::tensor({9, 8, 7, 6, 5, 4}, torch::kLong);
  const torch::Tensor a = logits_of(m.model, ids).detach(), b = logits_of(m.model, ids).detach();
  EXPECT_FALSE(torch::equal(a, b));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(logits_of(m.model, ids), logits_of(m.model, ids)));
}

// PEFT's on-disk format: adapter_config.json with PEFT v0.17.1's keys and values, and the
// tensor names and shapes of adapter_model.safetensors, equal the committed PEFT-format example
// (tests/fixtures/lora/qwen2_all_linear, checked against PEFT's LoraConfig.save_pretrained);
// the files round-trip.
TEST(Lora, AdapterFolderMatchesPeftsFormat) {
  const std::string example = lora_fixture("qwen2_all_linear");
  const std::string out = fresh_test_dir("lora");
  LoadedModel m = load_model(fixture_dir("qwen2"));
  LoraSettings s;
  s.r = 4;
  s.lora_alpha = 8;
  s.target_modules = {"all-linear"};
  LoraAdapters lora(m.model, s, 11);
  lora.save_peft_files(out, "tests/fixtures/models/qwen2");

  auto theirs = nlohmann::json::parse(read_file(example + "/adapter_config.json"));
  auto ours = nlohmann::json::parse(read_file(out + "/adapter_config.json"));
  auto as_set = [](nlohmann::json& j) {
    auto v = j["target_modules"].get<std::vector<std::string>>();  // a Python set in PEFT: any order
    j["target_modules"] = std::set<std::string>(v.begin(), v.end());
  };
  as_set(theirs);
  as_set(ours);
  std::set<std::string> their_keys, our_keys;
  for (auto& [k, v] : theirs.items()) their_keys.insert(k);
  for (auto& [k, v] : ours.items()) our_keys.insert(k);
  EXPECT_EQ(our_keys, their_keys);
  EXPECT_EQ(ours, theirs) << ours.dump(2);
  // As PEFT writes it: sorted keys, two-space indent, no trailing newline.
  const std::string text = read_file(out + "/adapter_config.json");
  EXPECT_EQ(text.substr(0, 26), "{\n  \"alpha_pattern\": {},\n ");
  EXPECT_NE(text.back(), '\n');

  std::map<std::string, std::string> our_meta, their_meta;
  std::map<std::string, std::vector<int64_t>> our_shapes, their_shapes;
  for (auto& [k, t] : load_safetensors(out + "/adapter_model.safetensors", &our_meta)) our_shapes[k] = t.sizes().vec();
  for (auto& [k, t] : load_safetensors(example + "/adapter_model.safetensors", &their_meta)) their_shapes[k] = t.sizes().vec();
  EXPECT_EQ(our_shapes, their_shapes);
  EXPECT_EQ(our_meta, their_meta);
  EXPECT_TRUE(our_shapes.count("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));

  // Round trip into fresh adapters of another seed.
  LoadedModel m2 = load_model(fixture_dir("qwen2"));
  LoraAdapters again(m2.model, s, 99);
  again.load_peft_folder(out);
  const auto a = lora.peft_state(), b = again.peft_state();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
}

// Bad targets and bad adapters: errors that say what the model has.
TEST(Lora, ErrorsNameTheModelsModules) {
  LoadedModel qwen2 = load_model(fixture_dir("qwen2"));  // tied embeddings
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  LoraSettings s;
  s.r = 4;
  s.target_modules = {"q_proj", "c_attn"};
  std::string e = error_of([&] { LoraAdapters a(qwen2.model, s, 0); });
  EXPECT_NE(e.find("'c_attn' is not a linear module of this Qwen2ForCausalLM model"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"), std::string::npos) << e;
  s.target_modules = {"lm_head"};
  e = error_of([&] { LoraAdapters a(qwen2.model, s, 0); });
  EXPECT_NE(e.find("ties lm_head to the input embeddings"), std::string::npos) << e;
  LoadedModel llama = load_model(fixture_dir("llama"));  // untied: lm_head is a projection of its own
  e = error_of([&] { LoraAdapters a(llama.model, s, 0); });
  EXPECT_NE(e.find("computed from its weight in chunks"), std::string::npos) << e;
  s.target_modules = {"q_proj"};
  s.r = 0;
  e = error_of([&] { LoraAdapters a(qwen2.model, s, 0); });
  EXPECT_NE(e.find("expected >= 1"), std::string::npos) << e;

  // An adapter for another shape: llama's q/v adapter (q_proj out 4 heads x head_dim 16 = 64)
  // on qwen3, whose explicit head_dim 32 makes q_proj [128, 64].
  LoadedModel qwen3 = load_model(fixture_dir("qwen3"));
  const std::string llama_adapter = lora_fixture("llama_rslora_qv");
  LoraAdapters on_qwen3(qwen3.model, read_peft_adapter_config(llama_adapter).settings, 0);
  e = error_of([&] { on_qwen3.load_peft_folder(llama_adapter); });
  EXPECT_NE(e.find("has shape [64, 2] but this Qwen3ForCausalLM model"), std::string::npos) << e;
  EXPECT_NE(e.find("needs [128, 2]"), std::string::npos) << e;
  // An adapter whose targets are not the adapters' (qwen2 all-linear into a q/v set-up).
  LoraSettings qv = read_peft_adapter_config(llama_adapter).settings;
  LoraAdapters on_qwen2(qwen2.model, qv, 0);
  e = error_of([&] { on_qwen2.load_peft_folder(lora_fixture("qwen2_all_linear")); });
  EXPECT_NE(e.find("r is 4 but these adapters have r = 2"), std::string::npos) << e;
  // Tensors that belong to no target are named.
  NamedTensorList extra = on_qwen2.peft_state();
  extra.emplace_back("base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", torch::zeros({2, 64}));
  e = error_of([&] { on_qwen2.load_peft_state(extra, "x.safetensors"); });
  EXPECT_NE(e.find("not LoRA adapters of this Qwen2ForCausalLM model's targets (q_proj, v_proj)"), std::string::npos) << e;
}

// A narrowed target ("layers.0.self_attn.q_proj") adapts that module only and is saved as
// configured, as PEFT saves target_modules, so the folder loads back onto the same modules.
TEST(Lora, NarrowTargetsAreSavedAsConfigured) {
  const std::string out = fresh_test_dir("lora");
  LoadedModel m = load_model(fixture_dir("qwen2"));
  LoraSettings s;
  s.r = 2;
  s.target_modules = {"layers.0.self_attn.q_proj"};
  LoraAdapters lora(m.model, s, 1);
  ASSERT_EQ(lora.targets().size(), 1u);
  EXPECT_EQ(lora.targets()[0].module, "model.layers.0.self_attn.q_proj");
  lora.save_peft_files(out, "base");
  const auto j = nlohmann::json::parse(read_file(out + "/adapter_config.json"));
  EXPECT_EQ(j.at("target_modules"), nlohmann::json({"layers.0.self_attn.q_proj"}));
  LoadedModel m2 = load_model(fixture_dir("qwen2"));
  LoraAdapters again(m2.model, read_peft_adapter_config(out).settings, 2);
  again.load_peft_folder(out);
  EXPECT_EQ(again.targets().size(), 1u);
  // One set of adapters per model.
  try {
    LoraAdapters twice(m2.model, s, 3);
    ADD_FAILURE() << "a second LoraAdapters attached";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("attached already"), std::string::npos) << e.what();
  }
}

// adapter_config.json features grpo-cpp does not implement are refused, naming the file.
TEST(Lora, UnsupportedPeftFeaturesAreRefused) {
  const std::string dir = fresh_test_dir("lora");
  auto j = nlohmann::json::parse(read_file(lora_fixture("llama_rslora_qv") + "/adapter_config.json"));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"use_dora", true}, {"bias", "all"}, {"peft_type", "IA3"}, {"modules_to_save", {"lm_head"}}}) {
    auto bad = j;
    bad[key] = value;
    atomic_write_file(dir + "/adapter_config.json", bad.dump());
    try {
      read_peft_adapter_config(dir);
      ADD_FAILURE() << key << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(dir + "/adapter_config.json"), std::string::npos) << e.what();
    }
  }
}

// adapter_config.json with a value of the wrong type: the error names the file, the key and
// what was expected (nlohmann's own type_error names neither).
TEST(Lora, AdapterConfigOfTheWrongTypeNamesTheKey) {
  const std::string dir = fresh_test_dir("lora");
  const std::string file = dir + "/adapter_config.json";
  const auto good = nlohmann::json::parse(read_file(lora_fixture("llama_rslora_qv") + "/adapter_config.json"));
  struct Case {
    const char* key;
    nlohmann::json value;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {"r", "eight", file + ": r: expected an integer >= 1 (the adapters' rank), got \"eight\""},
           {"r", 2.5, file + ": r: expected an integer >= 1 (the adapters' rank), got 2.5"},
           {"lora_alpha", "sixteen", file + ": lora_alpha: expected a number, got \"sixteen\""},
           {"lora_dropout", nullptr, file + ": lora_dropout: expected a number in [0, 1), got null"},
           {"use_rslora", "yes", file + ": use_rslora: expected true or false, got \"yes\""},
           {"target_modules", 7, file + ": target_modules: expected a list of module names or \"all-linear\", got 7"},
           {"target_modules", nlohmann::json::array({"q_proj", 3}),
            file + ": target_modules: expected a list of module names or \"all-linear\", got [\"q_proj\",3]"},
           {"peft_type", 1, file + ": peft_type: expected \"LORA\", got 1"}}) {
    SCOPED_TRACE(c.key);
    auto bad = good;
    bad[c.key] = c.value;
    atomic_write_file(file, bad.dump());
    EXPECT_EQ(error_of<std::runtime_error>([&] { read_peft_adapter_config(dir); }), c.expected);
  }
  // A whole number written as a float (another tool's JSON) is still the rank.
  auto whole = good;
  whole["r"] = 2.0;
  atomic_write_file(file, whole.dump());
  EXPECT_EQ(read_peft_adapter_config(dir).settings.r, 2);
}

// An adapter whose lora_A is NaN (a diverged run's save) fits every shape check; loading it is
// an error naming the file and the tensor, and the adapters are left as they were.
TEST(Lora, NonFiniteAdapterIsRefusedNamingFileAndTensor) {
  const std::string dir = fresh_test_dir("lora");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    std::filesystem::copy_file(lora_fixture("llama_rslora_qv") + "/" + f, dir + "/" + f);
  const std::string tensor = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";  // [r 2, hidden 64]
  fill_tensor_with_nan(dir + "/adapter_model.safetensors", tensor);
  LoadedModel m = load_model(fixture_dir("llama"));
  LoraAdapters lora(m.model, read_peft_adapter_config(dir).settings, 5);
  const auto before = lora.peft_state();
  const std::string msg = error_of<std::runtime_error>([&] { lora.load_peft_folder(dir); });
  EXPECT_NE(msg.find("'" + dir + "/adapter_model.safetensors': tensor '" + tensor +
                     "': 128 of its 128 values are not finite (the first, at [0, 0], is NaN)"),
            std::string::npos)
      << msg;
  const auto after = lora.peft_state();
  ASSERT_EQ(before.size(), after.size());
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i].second, after[i].second)) << before[i].first;
}
