// A task where the policy calls a tool, for the tool-rollout tests: prompts "A+B=" (two-digit
// numbers), ground truth the sum, and a tiny byte-level model warm-started to answer
// "<calc>A+B</calc>" then, after the observation "<output>\nS\n</output>\n", "\boxed{S}":
// open-instruct's legacy tool format with the tool called `calc`. The warm start is short: the
// model learns the call's shape, and copies the observation only roughly (enough for rewards
// with spread).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/logprobs.h"
#include "core/model/transformer.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/tiny_byte_model.h"

namespace grpo::testing {

struct ToolTaskProblem {
  int a = 0, b = 0;
  std::string prompt() const { return std::to_string(a) + "+" + std::to_string(b) + "="; }
  std::string answer() const { return std::to_string(a + b); }
  // The teacher's completion, observation included.
  std::string completion() const {
    return "<calc>" + std::to_string(a) + "+" + std::to_string(b) + "</calc><output>\n" + answer() + "\n</output>\n\\boxed{" +
           answer() + "}";
  }
};

inline ToolTaskProblem tool_task_problem(std::mt19937_64& rng) {
  return {static_cast<int>(10 + rng() % 90), static_cast<int>(10 + rng() % 90)};
}

// train.jsonl and eval.jsonl: TRL rows {"prompt", "ground_truth"}.
inline void write_tool_task(const std::string& dir, int n_train, int n_eval, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream train(dir + "/train.jsonl"), eval(dir + "/eval.jsonl");
  for (int i = 0; i < n_train + n_eval; ++i) {
    const ToolTaskProblem p = tool_task_problem(rng);
    (i < n_train ? train : eval) << "{\"prompt\": \"" << p.prompt() << "\", \"ground_truth\": \"" << p.answer() << "\"}\n";
  }
}

inline const core::Tokenizer& tool_task_tokenizer() {
  static const core::Tokenizer t = core::Tokenizer::from_json(core::make_byte_level_tokenizer_json());
  return t;
}

// Trains the tiny model on teacher completions (every token a target) and saves it with its
// tokenizer to `dir`.
inline void make_tool_task_model(const std::string& dir, std::uint64_t seed, int sft_steps = 150) {
  using namespace grpo::core;
  const Tokenizer& tokenizer = tool_task_tokenizer();
  const int eos = *tokenizer.token_to_id("<|endoftext|>");
  CausalLM model(tiny_byte_model_config(tokenizer.vocab_size(), eos, 96));
  model->init_weights(0.05, seed);
  torch::manual_seed(seed);
  std::mt19937_64 rng(seed + 1);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < sft_steps; ++step) {
    const int B = 32;
    std::vector<std::vector<std::int64_t>> rows;
    std::size_t L = 0;
    for (int b = 0; b < B; ++b) {
      const ToolTaskProblem p = tool_task_problem(rng);
      std::vector<std::int64_t> ids;
      for (int id : tokenizer.encode(p.prompt() + p.completion())) ids.push_back(id);
      ids.push_back(eos);
      L = std::max(L, ids.size());
      rows.push_back(std::move(ids));
    }
    std::vector<std::int64_t> flat, mask;
    for (auto& r : rows) {
      const std::size_t n = r.size();
      r.resize(L, eos);
      flat.insert(flat.end(), r.begin(), r.end());
      for (std::size_t i = 0; i < L; ++i) mask.push_back(i < n ? 1 : 0);
    }
    const auto T = static_cast<std::int64_t>(L);
    const torch::Tensor input = torch::tensor(flat).view({B, T});
    const torch::Tensor m = torch::tensor(mask).view({B, T});
    const torch::Tensor hidden = model->hidden_states(input.narrow(1, 0, T - 1), AttentionLayout::padded(m.narrow(1, 0, T - 1)));
    const torch::Tensor lp = token_logprobs(hidden, model->lm_head_weight(), input.narrow(1, 1, T - 1)).logprobs;
    const torch::Tensor w = m.narrow(1, 1, T - 1).to(torch::kFloat);
    const torch::Tensor loss = -(lp * w).sum() / w.sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  SaveOptions options;
  options.tokenizer = &tokenizer;
  options.chat_templates = std::vector<NamedChatTemplate>{{"default", chat_template_jinja("none")}};
  save_model(dir, model, options);
}

}  // namespace grpo::testing
