// grpo-sft, run the way a user runs it: its loss is the token-mean cross-entropy of the
// completion tokens only (checked against an independent full-logits forward), it learns, its
// checkpoints are Hugging Face folders that grpo-run's model.path can name by run directory,
// and bad input stops it with the file, line and key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/file_damage.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using grpo::testing::fresh_test_dir;
using grpo::testing::read_metrics;
using grpo::testing::run_command;

// A tiny Qwen2-shaped model folder without weights (sft.init: random): config.json and the
// byte-level demo tokenizer (<|endoftext|> = 256 is the EOS).
std::string write_model_folder(const std::string& dir) {
  const std::string m = dir + "/model";
  fs::create_directories(m);
  std::ofstream(m + "/config.json") << R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "vocab_size": 259, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "initializer_range": 0.2,
    "eos_token_id": 256, "torch_dtype": "float32"})";
  const auto tokenizer = grpo::core::Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  grpo::core::TokenizerFilesOptions options;
  options.chat_templates = std::vector<grpo::core::NamedChatTemplate>{{"default", grpo::core::chat_template_jinja("none")}};
  grpo::core::write_tokenizer_files(m, tokenizer, options);
  return m;
}

const std::vector<std::pair<std::string, std::string>> kRows = {
    {"2+2=", "4"}, {"Say hi: ", "hi there"}, {"7-3=", "4"}, {"abc", "defgh"}, {"x", "y"}, {"One more: ", "ok."}};

std::string write_rows(const std::string& dir) {
  const std::string path = dir + "/sft.jsonl";
  std::ofstream out(path);
  for (const auto& [p, c] : kRows) out << nlohmann::json{{"prompt", p}, {"completion", c}}.dump() << "\n";
  return path;
}

std::string sft_command(const std::string& dir, const std::string& model, const std::string& data,
                        const std::string& extra) {
  return std::string(GRPO_SFT_BINARY) + " --set run.output_dir=" + dir + "/run --set model.path=" + model +
         " --set tokenizer.chat_template=none --set data.train=[" + data +
         "] --set sft.init=random --set run.seed=5 --set data.shuffle=false --set train.pack_length=32"
         " --set train.per_device_train_batch_size=2 " + extra + " 2>&1";
}

TEST(Sft, FirstStepLossIsTheTokenMeanCrossEntropyOfCompletionTokensOnly) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  // All six rows in one step, packed into rows of 32 tokens, two rows per micro-batch: several
  // micro-batches share one denominator.
  const auto r = run_command(sft_command(dir, model, write_rows(dir), "--set sft.steps=1 --set sft.batch_size=6"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = read_metrics(dir + "/run");
  ASSERT_EQ(metrics.size(), 1u);
  const double loss = metrics[0].at("train/loss").get<double>();

  // Reference: the same random initialization, one unpacked full-logits forward per row,
  // log_softmax over the vocabulary, -log p of each completion token and of the EOS after it
  // (never of a prompt token), averaged over all of them.
  const auto config = grpo::core::load_model_config(model + "/config.json");
  grpo::core::CausalLM reference(config);
  reference->init_weights(0.2, 5);
  const auto tokenizer = grpo::core::Tokenizer::load(model);
  torch::Tensor nll = torch::zeros({}, torch::kDouble);
  std::int64_t tokens = 0;
  for (const auto& [p, c] : kRows) {
    std::vector<std::int64_t> ids;
    for (int t : tokenizer.encode(p)) ids.push_back(t);
    const std::size_t prompt_len = ids.size();
    for (int t : tokenizer.encode(c)) ids.push_back(t);
    ids.push_back(256);
    const auto n = static_cast<std::int64_t>(ids.size());
    const torch::Tensor input = torch::tensor(ids).view({1, n});
    const torch::Tensor logp =
        torch::log_softmax(reference->forward(input, grpo::core::AttentionLayout::padded(torch::ones({1, n}, torch::kLong))), -1);
    for (std::int64_t t = static_cast<std::int64_t>(prompt_len); t < n; ++t) {
      nll = nll - logp[0][t - 1][ids[static_cast<std::size_t>(t)]].to(torch::kDouble);
      ++tokens;
    }
  }
  const torch::Tensor mean_nll = nll / static_cast<double>(tokens);
  EXPECT_NEAR(loss, mean_nll.item<double>(), 1e-5);
  EXPECT_EQ(metrics[0].at("train/completion_tokens").get<double>(), static_cast<double>(tokens));
  // The gradient is that of the token mean (not the sum, not per-micro-batch means): its global
  // L2 norm, before clipping, is what optimizer/grad_norm reports.
  mean_nll.backward();
  double square_sum = 0.0;
  for (const auto& p : reference->parameters())
    if (p.grad().defined()) square_sum += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
  const double grad_norm = std::sqrt(square_sum);
  EXPECT_NEAR(metrics[0].at("optimizer/grad_norm").get<double>(), grad_norm, 1e-4 * grad_norm);
}

// One denominator for the whole step: the update is the same whether the six sequences are one
// micro-batch or several (rows of 20 tokens hold one to three of them; per-micro-batch means
// would weight the tokens of small micro-batches more).
TEST(Sft, UpdateDoesNotDependOnTheMicroBatchSplit) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  const std::string data = write_rows(dir);
  std::vector<grpo::core::LoadedModel> after;
  for (const char* rows : {"1", "16"}) {
    const std::string sub = dir + "/mb" + rows;
    const auto r = run_command(sft_command(sub, model, data,
                                           // adam_eps 1: the first update is ~ lr * g, linear in the gradient;
                                           // with a tiny eps it is lr * sign(g), and summation-order noise in
                                           // near-zero entries would flip signs.
                                           std::string("--set sft.steps=1 --set sft.batch_size=6 --set train.learning_rate=1e-2"
                                                       " --set train.adam_eps=1.0"
                                                       " --set train.pack_length=20 --set train.per_device_train_batch_size=") + rows));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    after.push_back(grpo::core::load_model(sub + "/run/checkpoints/step_000001"));
  }
  const auto a = after[0].model->named_parameters(), b = after[1].model->named_parameters();
  const auto initial = [&] {
    grpo::core::CausalLM m(grpo::core::load_model_config(model + "/config.json"));
    m->init_weights(0.2, 5);
    return m;
  }();
  const auto start = initial->named_parameters();
  double moved = 0;
  for (const auto& p : a) {
    EXPECT_TRUE(torch::allclose(p.value(), b[p.key()], 1e-5, 1e-6)) << p.key();
    moved += (p.value() - start[p.key()]).abs().max().item<double>();
  }
  EXPECT_GT(moved, 1e-3);  // the step did change the weights
}

TEST(Sft, LearnsAndItsRunDirectoryIsAModelPathForGrpoRun) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  const auto r = run_command(sft_command(dir, model, write_rows(dir),
                                         "--set sft.steps=60 --set sft.batch_size=6 --set train.learning_rate=1e-2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto metrics = read_metrics(dir + "/run");
  ASSERT_EQ(metrics.size(), 60u);
  const double first = metrics.front().at("train/loss").get<double>();
  const double last = metrics.back().at("train/loss").get<double>();
  EXPECT_LT(last, 0.2 * first) << "first " << first << ", last " << last;  // memorizes six completions

  // The run directory: a Hugging Face checkpoint, the effective config, TensorBoard events, curves.
  const std::string ckpt = dir + "/run/checkpoints/step_000060";
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  EXPECT_TRUE(fs::exists(dir + "/run/effective_config.yaml"));
  EXPECT_TRUE(fs::exists(dir + "/run/curves.png"));
  bool events = false;
  for (const auto& e : fs::directory_iterator(dir + "/run"))
    events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(events);
  const auto loaded = grpo::core::load_model(ckpt);
  EXPECT_EQ(loaded.config.hidden_size, 32);

  // grpo-run takes the run directory as model.path: its newest checkpoint.
  const auto v = run_command(std::string(GRPO_RUN_BINARY) + " --validate-fragment --set model.path=" + dir +
                             "/run --set tokenizer.chat_template=none 2>&1");
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("model: " + ckpt + " (Qwen2ForCausalLM)"), std::string::npos) << v.output;
}

// train.gradient_checkpointing recomputes each layer in backward: the same losses step by step
// (its gradients equal the plain pass's: tests/model/test_activation_checkpoint.cpp).
TEST(Sft, ActivationCheckpointingTrainsTheSameRun) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  const std::string data = write_rows(dir);
  const std::string args = "--set sft.steps=8 --set sft.batch_size=3 --set train.learning_rate=1e-2";
  auto plain = run_command(sft_command(dir, model, data, args + " --set run.output_dir=" + dir + "/plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto ckpt = run_command(sft_command(dir, model, data, args + " --set run.output_dir=" + dir + "/ckpt --set train.gradient_checkpointing=true"));
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.output;
  EXPECT_NE(ckpt.output.find("activation checkpointing: on"), std::string::npos) << ckpt.output;
  EXPECT_EQ(plain.output.find("activation checkpointing"), std::string::npos) << plain.output;
  const auto a = read_metrics(dir + "/plain"), b = read_metrics(dir + "/ckpt");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double la = a[i].at("train/loss").get<double>(), lb = b[i].at("train/loss").get<double>();
    EXPECT_NEAR(la, lb, 1e-5 * (1.0 + std::abs(la))) << "step " << i + 1;
  }
}

// --resume-from STEP picks that checkpoint (newer ones notwithstanding); a step below 1 is a bad
// command line.
TEST(Sft, ResumeFromChoosesTheStep) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  const std::string data = write_rows(dir);
  auto r = run_command(sft_command(dir, model, data, "--set sft.steps=3 --set sft.batch_size=2 --set checkpoint.save_freq=1 --set checkpoint.keep_last=0"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(sft_command(dir, model, data, "--set sft.steps=3 --set sft.batch_size=2 --set checkpoint.save_freq=1 --set checkpoint.keep_last=0 --resume-from 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + dir + "/run/checkpoints/step_000001 (step 1"), std::string::npos) << r.output;
  EXPECT_EQ(read_metrics(dir + "/run").size(), 3u);
  r = run_command(sft_command(dir, model, data, "--resume-from 0"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--resume-from takes a checkpoint's step >= 1, got 0"), std::string::npos) << r.output;
}

TEST(Sft, BadInputNamesFileLineAndKey) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  const std::string data = dir + "/bad.jsonl";
  std::ofstream(data) << "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"c\", \"answer\": \"d\"}\n";
  auto r = run_command(sft_command(dir, model, data, "--set sft.steps=1"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:2: no completion to train on"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.jsonl"));

  r = run_command(sft_command(dir, model, write_rows(dir), "--set sft.init=zeros"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("sft.init"), std::string::npos) << r.output;

  r = run_command(sft_command(dir, model, write_rows(dir), "--set sft.batch_size=0"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("sft.batch_size: expected an integer >= 1, got 0"), std::string::npos) << r.output;
}

// sft.init: pretrained from weights with NaN in them (a diverged run's save), or without a
// tensor config.json implies: a configuration error naming model.path, the file and the tensor,
// before anything trains (not an internal error, not a run that diverges at once).
TEST(Sft, BadWeightsAreConfigurationErrorsNamingFileAndTensor) {
  const std::string dir = fresh_test_dir("sft");
  const std::string model = write_model_folder(dir);
  grpo::core::CausalLM weights(grpo::core::load_model_config(model + "/config.json"));
  weights->init_weights(0.2, 5);
  grpo::core::save_checkpoint_tensors(model, grpo::core::model_state_tensors(weights), 1ULL << 30);
  const std::string tensor = "model.layers.1.self_attn.o_proj.weight";  // [hidden 32, heads 4 x head_dim 8]
  grpo::testing::fill_tensor_with_nan(model + "/model.safetensors", tensor);
  std::string command = sft_command(dir, model, write_rows(dir), "--set sft.steps=1");
  command.replace(command.find("sft.init=random"), 15, "sft.init=pretrained");
  const auto r = run_command(command);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("model.path: safetensors file '" + model + "/model.safetensors': tensor '" + tensor +
                          "': 1024 of its 1024 values are not finite (the first, at [0, 0], is NaN)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.jsonl"));

  auto without_norm = grpo::core::model_state_tensors(weights);
  without_norm.erase(std::remove_if(without_norm.begin(), without_norm.end(),
                                    [](const auto& named) { return named.first == "model.norm.weight"; }),
                     without_norm.end());
  grpo::core::save_checkpoint_tensors(model, without_norm, 1ULL << 30);
  const auto missing = run_command(command);
  EXPECT_EQ(missing.exit_code, 3) << missing.output;
  EXPECT_NE(missing.output.find("model.path: " + model + ": missing tensors: model.norm.weight"), std::string::npos)
      << missing.output;
}

}  // namespace
