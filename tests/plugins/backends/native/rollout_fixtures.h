// Engines over the tiny reference checkpoints (tests/support/rollout_models.h), and the naive
// generation the engine is checked against.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/tokenizer/tokenizer.h"
#include "plugins/backends/native/engine.h"
#include "tests/support/rollout_models.h"

namespace grpo::testing {

inline native::Engine make_engine(const std::string& name, native::EngineOptions options = {}) {
  const std::string dir = rollout_model_dir(name);
  core::LoadedModel loaded = core::load_model(dir);
  return native::Engine(loaded.model, core::Tokenizer::load(dir), loaded.config.eos_token_ids, options);
}

// A request with the sampling fields the tests vary (temperature 0 = greedy).
inline sdk::GenerationRequest request(const std::string& id, std::vector<std::int64_t> prompt,
                                      std::int64_t max_new_tokens, double temperature = 0.0,
                                      std::int64_t n = 1, std::uint64_t seed = 0) {
  sdk::GenerationRequest r;
  r.id = id;
  r.prompt_ids = std::move(prompt);
  r.n = n;
  r.seed = seed;
  r.sampling.temperature = temperature;
  r.sampling.max_new_tokens = max_new_tokens;
  return r;
}

// Greedy decoding by full recomputation: every step runs the whole sequence through the
// model without a cache and takes the argmax of the last position.
inline std::vector<std::int64_t> naive_greedy(core::CausalLM& model, const std::vector<std::int64_t>& prompt,
                                              std::int64_t max_new_tokens, const std::vector<std::int64_t>& eos) {
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> seq = prompt, out;
  for (std::int64_t i = 0; i < max_new_tokens; ++i) {
    const auto ids = torch::tensor(seq, torch::kLong).view({1, -1});
    const auto logits = model->forward(ids, core::AttentionLayout::padded(torch::ones_like(ids)));
    const std::int64_t next = logits[0][-1].argmax().item<std::int64_t>();
    out.push_back(next);
    seq.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
  }
  return out;
}

// `count` prompts of lengths spread over [min_len, max_len], ids in [3, vocab).
inline std::vector<std::vector<std::int64_t>> mixed_prompts(int count, int min_len, int max_len, std::int64_t vocab,
                                                            std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<std::vector<std::int64_t>> prompts;
  for (int i = 0; i < count; ++i) {
    const int len = min_len + (count > 1 ? (i * 7919) % (max_len - min_len + 1) : 0);
    const auto t = at::randint(3, vocab, {len}, gen, torch::kLong);
    prompts.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
  }
  return prompts;
}

}  // namespace grpo::testing
