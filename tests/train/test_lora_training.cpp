// LoRA end to end (model.lora, docs/lora.md): grpo-run trains adapters whose checkpoints are PEFT
// adapter folders and resume exactly; the KL reference is the base model (the policy with its
// adapters off); the rollout engine serves base + adapters (grpo-eval on the adapter and on the
// grpo-export --merge model reproduce the trainer's own evaluation); grpo-sft trains LoRA with the
// same keys; bad LoRA settings are configuration errors before training.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/model/safetensors_torch.h"
#include "tests/support/fixture_models.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/rollout_models.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"
#include "tests/train/digit_task_runs.h"
#include "tests/train/resume_check.h"
#include "tests/train/trainer_fixtures.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::testing;

const std::string kLora =
    " --set model.lora.r=4 --set model.lora.lora_alpha=8 --set model.lora.target_modules=all-linear"
    " --set train.learning_rate=2e-2";

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A killed LoRA run (dropout on, KL against the base) resumes to bit-identical adapters and
// metrics; its checkpoints are PEFT adapter folders plus the trainer state; the KL to the
// reference is exactly 0 at the first step (B = 0: the policy is the base) and grows after.
TEST(LoraTraining, KilledRunResumesToBitIdenticalAdapters) {
  const std::string dir = fresh_test_dir("lora");
  const std::string config = write_config(dir, dir + "/unused");
  const std::string common = "--config " + config + kLora +
                             " --set model.lora.lora_dropout=0.1 --set train.steps=6 --set checkpoint.save_freq=3"
                             " --set checkpoint.keep_last=0 --set rollout.num_unique_prompts=8"
                             " --set rollout.num_samples_per_prompt=4 --set eval.every=3 --set eval.max_prompts=20"
                             " --set algorithm.kl_estimator=k3 --set algorithm.kl_coef=0.05 --set train.num_mini_batches=2"
                             " --set train.lr_schedule=linear --set train.warmup_steps=2";
  int code = 0;
  const std::string full_dir = dir + "/full";
  std::string out = run_grpo(common + " --set run.output_dir=" + full_dir, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("reference model: the base weights with the LoRA adapters switched off"), std::string::npos) << out;
  EXPECT_EQ(out.find("reference model loaded (algorithm.kl_coef"), std::string::npos) << "a second copy of the weights was loaded";
  const auto metrics = read_metrics(full_dir);
  std::vector<double> kl;
  for (const auto& line : metrics)
    if (line.contains("objective/kl")) kl.push_back(line.at("objective/kl").get<double>());
  ASSERT_GE(kl.size(), 3u);
  // Up to float32 rounding: the reference pass and the training pass pack and reduce differently.
  EXPECT_LT(kl.front(), 1e-9) << "step 1's policy is the base model: its KL to the base must be 0";
  EXPECT_GT(kl.back(), 1e-5) << "the adapters did not move the policy away from the base";

  const std::string ckpt = full_dir + "/checkpoints/step_000006";
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "optimizer.pt", "rng.pt",
                        "trainer_state.json"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors")) << "a LoRA checkpoint holds the adapters, not the model";
  const auto adapter_config = nlohmann::json::parse(file_text(ckpt + "/adapter_config.json"));
  EXPECT_EQ(adapter_config.at("peft_type"), "LORA");
  EXPECT_EQ(adapter_config.at("base_model_name_or_path"), task_model());

  expect_killed_run_resumes_exactly(common, full_dir, dir + "/cut", 3, 6, "adapter_model.safetensors");

  // Resuming with another scale than the checkpoint's adapter_config.json is refused.
  out = run_grpo(common + " --set model.lora.lora_alpha=16 --set run.output_dir=" + full_dir + " --resume", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("differs from these adapters'"), std::string::npos) << out;

  // Resuming a LoRA run without model.lora is refused, naming why.
  out = run_grpo("--config " + config + " --set train.steps=6 --set run.output_dir=" + full_dir + " --resume", &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("holds LoRA adapters (adapter_config.json), but this run trains every weight"), std::string::npos) << out;
}

// The rollout engine serves base + adapters: grpo-eval of the base with the final adapter, and
// of the model grpo-export --merge writes, reproduce the trainer's last evaluation metric for
// metric (the trainer's evaluation ran on the engine after its weight sync).
TEST(LoraTraining, EngineServesTheAdaptedModelAndTheMergedExportMatches) {
  const std::string dir = fresh_test_dir("lora");
  const std::string run_dir = dir + "/run";
  const std::string config = write_config(dir, run_dir);
  const std::string eval_settings = " --set eval.max_prompts=40";
  int code = 0;
  std::string out = run_grpo("--config " + config + kLora + " --set train.steps=3" + eval_settings, &code);
  ASSERT_EQ(code, 0) << out;
  const auto last = read_metrics(run_dir).back();
  const std::string ckpt = run_dir + "/checkpoints/step_000003";

  const std::string merged = dir + "/merged";
  auto r = run_command(std::string(GRPO_EXPORT_BINARY) + " --merge " + run_dir + " --output " + merged + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + merged), std::string::npos) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(merged + "/" + f)) << f;

  // The base (the config's model.path) with the adapter, then the merged folder.
  std::vector<nlohmann::json> results;
  for (const std::string& which : {" --set model.lora.adapter_path=" + ckpt, " --model " + merged}) {
    const std::string json = dir + "/eval.json";
    r = run_command(std::string(GRPO_EVAL_BINARY) + " --config " + config + eval_settings + which + " --output " + json + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    results.push_back(nlohmann::json::parse(in).at(0));
  }
  std::size_t compared = 0;
  for (const auto& result : results)
    for (auto it = result.at("metrics").begin(); it != result.at("metrics").end(); ++it) {
      if (it.key().rfind("time/", 0) == 0) continue;
      ASSERT_TRUE(last.contains(it.key())) << it.key();
      EXPECT_EQ(it.value(), last.at(it.key())) << result.at("model") << ": " << it.key();
      ++compared;
    }
  EXPECT_GT(compared, 20u);
}

// grpo-sft trains LoRA with the same keys: every checkpoint folder is a PEFT adapter folder
// (adapter_config.json with peft_type LORA, r, lora_alpha, target_modules and
// base_model_name_or_path; adapter_model.safetensors with PEFT's tensor names); from random
// weights (sft.init: random) the frozen base is written once to RUN_DIR/base_model.
TEST(LoraTraining, GrpoSftWritesPeftAdapterCheckpoints) {
  const std::string dir = fresh_test_dir("lora");
  const std::string data = dir + "/sft.jsonl";
  {
    std::ofstream rows(data);
    for (int a = 10; a < 40; ++a)
      rows << nlohmann::json{{"prompt", std::to_string(a) + "+" + std::to_string(a + 7) + "="}, {"completion", std::to_string(2 * a + 7)}}.dump()
           << "\n";
  }
  const std::string source = GRPO_SOURCE_DIR;
  const auto r = run_command(std::string(GRPO_SFT_BINARY) + " --config " + source + "/configs/quickstart-sft.yaml --set model.path=" +
                             source + "/configs/quickstart/model --set run.output_dir=" + dir + "/run --set data.train=[" + data +
                             "] --set data.eval=[] --set sft.steps=4 --set sft.batch_size=8 --set checkpoint.save_freq=2"
                             " --set checkpoint.keep_last=0 --set model.lora.r=8 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::regex peft_name(R"(base_model\.model\.model\.layers\.\d+\.(self_attn|mlp)\.[a-z_]+_proj\.lora_[AB]\.weight)");
  for (const char* step : {"step_000002", "step_000004"}) {
    const std::string ckpt = dir + "/run/checkpoints/" + step;
    const auto c = nlohmann::json::parse(file_text(ckpt + "/adapter_config.json"));
    EXPECT_EQ(c.at("peft_type"), "LORA");
    EXPECT_EQ(c.at("r"), 8);
    EXPECT_EQ(c.at("lora_alpha"), 8);
    EXPECT_EQ(c.at("target_modules"), nlohmann::json({"q_proj", "v_proj"}));  // PEFT's default for qwen2
    EXPECT_EQ(c.at("base_model_name_or_path"), dir + "/run/base_model");
    const auto tensors = grpo::core::load_safetensors(ckpt + "/adapter_model.safetensors");
    EXPECT_FALSE(tensors.empty());
    for (const auto& [name, t] : tensors) EXPECT_TRUE(std::regex_match(name, peft_name)) << name;
  }
  EXPECT_TRUE(fs::exists(dir + "/run/base_model/model.safetensors"));
}

// Bad LoRA settings are configuration errors (exit 3) before anything trains, naming the key.
TEST(LoraTraining, BadSettingsAreConfigurationErrors) {
  const std::string dir = fresh_test_dir("lora");
  const std::string config = write_config(dir, dir + "/run", rollout_model_dir("qwen2"));
  auto validate = [&](const std::string& sets) {
    return run_command(std::string(GRPO_RUN_BINARY) + " --validate --config " + config + " " + sets + " 2>&1");
  };
  struct Case {
    std::string sets, expected;
  };
  const std::string llama_adapter = std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/lora/llama_rslora_qv";
  const std::vector<Case> cases = {
      {"--set model.lora.r=0", "model.lora.r: rank 0: a LoRA adapter needs r >= 1"},
      {"--set model.lora.r=8 --set model.lora.target_modules=[q_proj,attn.c_proj]",
       "model.lora.target_modules: 'attn.c_proj' is not a linear module of this Qwen2ForCausalLM model; its linear "
       "modules are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"},
      {"--set model.lora.r=8 --set model.lora.target_modules=[c_attn,c_fc]", "'c_attn' is not a linear module"},
      {"--set model.lora.r=8 --set model.lora.target_modules=[lm_head]", "ties lm_head to the input embeddings"},
      {"--set model.lora.lora_alpha=32", "model.lora.lora_alpha: is set, but LoRA is off: set model.lora.r"},
      {"--set model.lora.r=8 --set model.lora.lora_dropout=1.5", "model.lora.lora_dropout: must be in [0, 1)"},
      {"--set model.lora.adapter_path=" + dir + "/none", "model.lora.adapter_path: " + dir + "/none: not a folder"},
      // The qwen2 adapter on qwen3 (explicit head_dim 32: q_proj is [128, 64] there).
      {"--set model.lora.adapter_path=" + std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/lora/qwen2_all_linear --set model.path=" +
           rollout_model_dir("qwen3"),
       "an adapter for another model shape or rank"},
      {"--set model.lora.adapter_path=" + llama_adapter + " --set model.lora.r=16",
       "model.lora.r: is 16 but the adapter being continued"},
      {"--set model.lora.adapter_path=" + llama_adapter + " --set model.path=" + rollout_model_dir("llama") +
           " --set model.lora.target_modules=all-linear",
       "model.lora.target_modules: [all-linear] selects other modules than the adapter being continued"},
      {"--set model.lora.r=8 --set train.ref_update_freq=2 --set algorithm.kl_coef=0.1 --set algorithm.kl_estimator=k3",
       "train.ref_update_freq: Polyak updates of the reference are not available with LoRA"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sets);
    const auto r = validate(c.sets);
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
  // A run's effective configuration (every default spelled out, model.lora.r: null included)
  // loads back, with LoRA and without.
  for (const std::string sets : {"", " --set model.lora.r=4"}) {
    const auto printed = run_command(std::string(GRPO_RUN_BINARY) + " --print-config --config " + config + sets + " 2>/dev/null");
    ASSERT_EQ(printed.exit_code, 0) << printed.output;
    {
      std::ofstream(dir + "/effective.yaml") << printed.output;
    }
    const auto again = run_command(std::string(GRPO_RUN_BINARY) + " --validate --config " + dir + "/effective.yaml 2>&1");
    EXPECT_EQ(again.exit_code, 0) << sets << "\n" << again.output;
    EXPECT_EQ(again.output.find("lora:") != std::string::npos, !sets.empty()) << again.output;
  }
  // A correct adapter of this model validates.
  const auto ok = validate("--set model.path=" + rollout_model_dir("llama") + " --set model.lora.adapter_path=" + llama_adapter);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("lora: r 2, scaling 11.3137"), std::string::npos) << ok.output;
  // all-linear names the same modules as the qwen2 adapter's expanded list.
  const auto same = validate("--set model.lora.target_modules=all-linear --set model.lora.adapter_path=" +
                             std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/lora/qwen2_all_linear");
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

}  // namespace
