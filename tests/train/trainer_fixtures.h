// The synthetic verifiable task the trainer tests learn: a prompt of three digits ("482")
// whose answer is the last digit spelled as a letter, 0 = a ... 9 = j ("c"), scored by
// exact_match. (Letters, not digits: with relative (rotary) positions only, a tiny model
// cannot tell "the prompt's last digit" from "an answer digit" to decide when to stop.) The policy is a
// tiny Qwen2-shaped model with the demo byte-level tokenizer (259 ids), warm-started by a short
// supervised phase on RANDOM letters a..j: it learns the answer format (one letter, then EOS)
// but not which letter, so greedy decoding starts near 10% correct and only the RL signal can
// raise it.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/tiny_byte_model.h"

namespace grpo::testing {

// A tiny random Qwen2-shaped model (vocab 64, hidden 32, 2 layers, GQA 4/2) for unit tests of
// packing and the update; init std 0.2 keeps its distributions far from uniform.
inline core::CausalLM tiny_test_model(std::uint64_t seed) {
  core::ModelConfig c;
  c.architecture = core::ModelArchitecture::Qwen2;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.qkv_bias = true;
  core::CausalLM model(c);
  model->init_weights(0.2, seed);
  return model;
}

inline std::string digit_task_prompt(std::mt19937_64& rng) {
  std::string p;
  for (int i = 0; i < 3; ++i) p += static_cast<char>('0' + rng() % 10);
  return p;
}

inline std::string digit_task_answer(const std::string& prompt) {
  return std::string(1, static_cast<char>('a' + (prompt.back() - '0')));
}

// Writes train.jsonl (n_train rows) and eval.jsonl (n_eval rows, prompts not in train) in
// TRL form: {"prompt": "482", "ground_truth": "c"}.
inline void write_digit_task(const std::string& dir, int n_train, int n_eval, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> seen;
  auto row = [](const std::string& p) {
    return std::string("{\"prompt\": \"") + p + "\", \"ground_truth\": \"" + digit_task_answer(p) + "\"}\n";
  };
  std::ofstream train(dir + "/train.jsonl"), eval(dir + "/eval.jsonl");
  for (int i = 0; i < n_train; ++i) {
    const std::string p = digit_task_prompt(rng);
    seen.push_back(p);
    train << row(p);
  }
  for (int i = 0; i < n_eval;) {
    const std::string p = digit_task_prompt(rng);
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    seen.push_back(p);
    eval << row(p);
    ++i;
  }
}

// The configuration keys every run on the digit task shares (YAML, one key per line): seed 1
// (and run.output_dir when `run_dir` is not empty), the model, no chat template, the plugins of
// `plugin_dir`, exact_match, the task's train data and, when `with_eval`, its eval split. Callers
// append their own algorithm / rollout / train / eval keys.
inline std::string digit_task_config_head(const std::string& task_dir, const std::string& model_dir, const std::string& plugin_dir,
                                          bool with_eval, const std::string& run_dir = "") {
  std::string yaml = run_dir.empty() ? "run: {seed: 1}\n" : "run: {output_dir: " + run_dir + ", seed: 1}\n";
  yaml += "model: {path: " + model_dir + "}\n";
  yaml += "tokenizer: {chat_template: none}\n";
  yaml += "plugins: {paths: [" + plugin_dir + "]}\n";
  yaml += "verifiers: [exact_match]\n";
  yaml += "data: {train: [" + task_dir + "/train.jsonl]" + (with_eval ? ", eval: [" + task_dir + "/eval.jsonl]" : std::string()) + "}\n";
  return yaml;
}

// Saves the warm-started task model (with tokenizer files) to `dir`.
inline void make_digit_task_model(const std::string& dir, std::uint64_t seed, int sft_steps = 60) {
  using namespace grpo::core;
  const Tokenizer tokenizer = Tokenizer::from_json(make_byte_level_tokenizer_json());
  const int eos = *tokenizer.token_to_id("<|endoftext|>");
  CausalLM model(tiny_byte_model_config(tokenizer.vocab_size(), eos, 64));
  model->init_weights(0.05, seed);

  // Supervised warm start on random letters: 64 prompts per step, target "<letter><eos>".
  torch::manual_seed(static_cast<std::uint64_t>(seed));
  std::mt19937_64 rng(seed + 1);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < sft_steps; ++step) {
    std::vector<std::int64_t> ids;
    const int B = 64, L = 5;
    for (int b = 0; b < B; ++b) {
      const std::string p = digit_task_prompt(rng);
      for (char ch : p) ids.push_back(tokenizer.encode(std::string(1, ch)).at(0));
      ids.push_back(tokenizer.encode(std::string(1, static_cast<char>('a' + rng() % 10))).at(0));
      ids.push_back(eos);
    }
    const torch::Tensor input = torch::tensor(ids).view({B, L});
    const torch::Tensor hidden = model->hidden_states(input.narrow(1, 0, L - 1), AttentionLayout::padded(torch::ones({B, L - 1}, torch::kLong)));
    // Positions 2 and 3 predict the letter and the EOS.
    const torch::Tensor h = hidden.narrow(1, 2, 2);
    const torch::Tensor targets = input.narrow(1, 3, 2);
    const torch::Tensor loss = -token_logprobs(h, model->lm_head_weight(), targets).logprobs.mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  SaveOptions options;
  options.tokenizer = &tokenizer;
  options.chat_templates = std::vector<grpo::core::NamedChatTemplate>{{"default", grpo::core::chat_template_jinja("none")}};
  save_model(dir, model, options);
}

}  // namespace grpo::testing
