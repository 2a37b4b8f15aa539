// The tiny reference checkpoints of tests/fixtures/models with a tokenizer (the demo
// byte-level tokenizer plus merges, 300 ids = the models' vocabulary), and the naive
// generation the engine is checked against.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "plugins/backends/native/engine.h"

namespace grpo::testing {

inline std::string fixture_model_dir(const std::string& name) {
  return std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// tokenizer.json text with exactly 300 ids: 256 bytes, 3 specials, 41 merges.
inline std::string rollout_tokenizer_json() {
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz";
  for (char c : letters) merges.push_back({std::string(1, ' '), std::string(1, c)});  // " e", " t", ...
  for (std::size_t i = 0; merges.size() < 41; ++i) merges.push_back({std::string(1, letters[i]), std::string(1, letters[i + 1])});
  return core::make_byte_level_tokenizer_json(core::default_demo_special_tokens(), merges);
}

// A copy of fixture `name` with tokenizer.json beside it (made once per test program).
inline std::string rollout_model_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GRPO_TEST_TMP_DIR) / "rollout-models" / name;
  if (!fs::exists(dir / "tokenizer.json")) {
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(fs::path(fixture_model_dir(name)) / f, dir / f, fs::copy_options::overwrite_existing);
    core::atomic_write_file((dir / "tokenizer.json").string(), rollout_tokenizer_json());
  }
  return dir.string();
}

inline native::Engine make_engine(const std::string& name, native::EngineOptions options = {}) {
  const std::string dir = rollout_model_dir(name);
  core::LoadedModel loaded = core::load_model(dir);
  return native::Engine(loaded.model, core::Tokenizer::load(dir), loaded.config.eos_token_ids, options);
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
