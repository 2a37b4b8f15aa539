// Scripted stand-ins for the rollout stage's collaborators (no model, no plugin): a backend
// whose answers depend on the prompt and the sample index, a verifier that accepts "yes", and
// plain-text prompt rows for the demo byte-level tokenizer.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/data/example.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "grpo/sdk/torch/rollout_backend.h"
#include "grpo/sdk/verifier.h"

namespace grpo::testing {

using grpo::core::Example;
using grpo::core::Tokenizer;

inline Example row(const std::string& text, int line) {
  Example ex;
  ex.source = "train.jsonl";
  ex.line = static_cast<std::size_t>(line);
  ex.text = text;  // a plain-text prompt: used as is
  ex.targets.push_back({"", "\"yes\""});
  return ex;
}

inline const Tokenizer& byte_tokenizer() {
  static const Tokenizer t = Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  return t;
}

// Scores 1 for the completion "yes", 0 otherwise.
class YesVerifier : public grpo::sdk::Verifier {
 public:
  grpo::sdk::VerifierResult verify(const grpo::sdk::VerifierInput& in) const override { return {in.completion == "yes" ? 1.0 : 0.0, ""}; }
};

// Sample j of a request answers "yes" when j is even, "no" when odd; a prompt starting with
// "same" gets "yes" every time (a zero-std group). Records what it was asked.
class ScriptedBackend : public grpo::sdk::RolloutBackend {
 public:
  std::vector<grpo::sdk::GenerationResult> generate(const std::vector<grpo::sdk::GenerationRequest>& requests) override {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<grpo::sdk::GenerationResult> out;
    for (const auto& r : requests) {
      seeds.push_back(r.seed.value_or(0));
      sampling.push_back(r.sampling);
      grpo::sdk::GenerationResult res;
      res.request_id = r.id;
      const bool same = r.prompt_ids.front() == byte_tokenizer().encode("s").at(0);
      for (std::int64_t j = 0; j < r.n; ++j) {
        grpo::sdk::GeneratedSample g;
        const bool yes = same || j % 2 == 0;
        g.text = yes ? "yes" : "no";
        g.token_ids = yes ? std::vector<std::int64_t>{1, 2, 3} : std::vector<std::int64_t>{4};
        g.logprobs.assign(g.token_ids.size(), -0.5f);
        res.samples.push_back(g);
      }
      out.push_back(res);
    }
    return out;
  }
  void update_weights(const grpo::sdk::NamedTensors& weights) override {
    std::lock_guard<std::mutex> lock(mutex);
    loaded_versions.push_back(static_cast<std::int64_t>(weights.at(0).second.item<float>()));
  }

  std::mutex mutex;
  std::vector<std::uint64_t> seeds;             // one per request, in call order
  std::vector<grpo::sdk::SamplingParams> sampling;     // one per request
  std::vector<std::int64_t> loaded_versions;     // the value of the first weight tensor, per update_weights
};

inline std::shared_ptr<const grpo::sdk::NamedTensors> weights_of_version(std::int64_t v) {
  return std::make_shared<const grpo::sdk::NamedTensors>(grpo::sdk::NamedTensors{{"w", torch::full({1}, static_cast<float>(v))}});
}

}  // namespace grpo::testing
