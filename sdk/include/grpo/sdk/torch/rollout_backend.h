// RolloutBackend: generates completions for prompts and receives the trainer's weights.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grpo/sdk/torch/component.h"

GRPO_SDK_NAMESPACE_BEGIN

struct SamplingParams {
  double temperature = 1.0;  // 0 means greedy
  double top_p = 1.0;        // in (0, 1]
  std::int64_t top_k = -1;   // -1 disables
  double min_p = 0.0;
  std::int64_t max_new_tokens = 256;
  std::vector<std::int64_t> stop_token_ids;
  std::vector<std::string> stop_strings;
};

struct GenerationRequest {
  std::string id;
  std::vector<std::int64_t> prompt_ids;
  std::int64_t n = 1;  // samples per prompt
  SamplingParams sampling;
  std::uint64_t seed = 0;
};

enum class FinishReason : int { kStop = 0, kLength = 1 };

struct GeneratedSample {
  std::vector<std::int64_t> token_ids;
  std::string text;
  std::vector<float> logprobs;  // one per generated token
  FinishReason finish_reason = FinishReason::kStop;
};

struct GenerationResult {
  std::string request_id;
  Status status;  // a bad request fails alone; the others still complete
  std::vector<GeneratedSample> samples;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Thread safety: one thread at a time (the trainer's rollout thread); update_weights is
// never called concurrently with generate.
class RolloutBackend {
 public:
  virtual ~RolloutBackend() = default;
  virtual std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests) = 0;
  virtual void update_weights(const NamedTensors& weights) = 0;
};

template <>
struct ComponentTraits<RolloutBackend> {
  static constexpr ComponentKind kind = ComponentKind::kRolloutBackend;
  static const char* torch_version() { return detail::compiled_torch_version(); }
};

GRPO_SDK_NAMESPACE_END
