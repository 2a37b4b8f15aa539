// RolloutBackend: generates completions for prompts and receives the trainer's weights.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
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
  // Sample j of the request draws from a stream of (seed, j): equal seeds give equal samples.
  // Unset: the backend picks a seed that differs per request and per call (a trainer that
  // sends a group as n requests of n = 1 must not get n identical samples).
  std::optional<std::uint64_t> seed;
};

// A sampling field out of range, e.g. {"top_p", "must be in (0, 1], got 1.5"}.
struct SamplingProblem {
  std::string field;  // n, temperature, top_p, top_k, min_p, max_new_tokens, stop_strings, stop_token_ids
  std::string message;
};

// The ranges every backend enforces (and front ends check up front): n >= 1; temperature
// finite and >= 0; top_p in (0, 1]; top_k -1 (off) or >= 1; min_p in [0, 1];
// max_new_tokens >= 1; stop strings non-empty; stop token ids >= 0. Whether a token id is in
// the vocabulary is the backend's to check.
inline std::vector<SamplingProblem> sampling_problems(const SamplingParams& s, std::int64_t n) {
  auto text = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  std::vector<SamplingProblem> out;
  if (n < 1) out.push_back({"n", "must be >= 1, got " + std::to_string(n)});
  if (!std::isfinite(s.temperature) || s.temperature < 0.0)
    out.push_back({"temperature", "must be a finite number >= 0 (0 = greedy), got " + text(s.temperature)});
  if (!(s.top_p > 0.0 && s.top_p <= 1.0)) out.push_back({"top_p", "must be in (0, 1], got " + text(s.top_p)});
  if (s.top_k != -1 && s.top_k < 1) out.push_back({"top_k", "must be -1 (off) or >= 1, got " + std::to_string(s.top_k)});
  if (!(s.min_p >= 0.0 && s.min_p <= 1.0)) out.push_back({"min_p", "must be in [0, 1], got " + text(s.min_p)});
  if (s.max_new_tokens < 1) out.push_back({"max_new_tokens", "must be >= 1, got " + std::to_string(s.max_new_tokens)});
  for (std::size_t i = 0; i < s.stop_strings.size(); ++i)
    if (s.stop_strings[i].empty()) out.push_back({"stop_strings", "stop string " + std::to_string(i + 1) + " is empty"});
  for (std::int64_t id : s.stop_token_ids)
    if (id < 0) out.push_back({"stop_token_ids", "token ids are >= 0, got " + std::to_string(id)});
  return out;
}

// kStop: a stop token (kept as the last token id) or a stop string (cut from the text);
// kLength: max_new_tokens reached, or the model's context is full.
enum class FinishReason : int { kStop = 0, kLength = 1 };

// Seconds, measured by the backend.
struct SampleTimings {
  double prefill_s = 0.0;      // the prompt's prefill (shared by the request's n samples)
  double first_token_s = 0.0;  // from the start of generate() to this sample's first token
  double finish_s = 0.0;       // from the start of generate() to its last token
};

struct GeneratedSample {
  std::vector<std::int64_t> token_ids;
  std::string text;  // decoded, special tokens skipped, cut before a matched stop string
  // One per token id: the log-prob of the sampled token, "raw" (log_softmax of the logits,
  // what a teacher-forced trainer forward computes) or "processed" (after temperature and
  // truncation), as the backend documents and configures.
  std::vector<float> logprobs;
  FinishReason finish_reason = FinishReason::kStop;
  SampleTimings timings;
};

struct GenerationResult {
  std::string request_id;
  Status status;  // a bad request fails alone; the others still complete
  std::vector<GeneratedSample> samples;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// ---- Multi-turn generation (ABI 1.2): tools in the loop.
//
// A turn ends where a sample would otherwise finish (a stop token or string, or its turn's
// length limit). The backend reports it to the TurnController and parks the sample, keeping
// its state (the native engine keeps its KV cache); the other samples go on decoding. The
// controller decides, possibly later (it runs a tool meanwhile), whether the sample finishes
// or resumes after `append_ids`: tokens fed to the model as if it had read them (a tool's
// observation), which were not sampled.

struct TurnEnd {
  std::size_t request = 0;  // index into generate_turns()' requests
  std::int64_t sample = 0;  // index of the sample within its request
  std::int64_t turn = 0;    // 0 for the first turn of the sample
  // This turn's sampled tokens (token_ids, logprobs; text is empty: the controller decodes),
  // its finish reason and timings.
  const GeneratedSample* output = nullptr;
};

struct TurnContinuation {
  std::size_t request = 0;
  std::int64_t sample = 0;
  bool finish = true;  // true: the sample ends with this turn
  // finish == false: fed before generation resumes (the sample's last sampled token first,
  // then these); the next turn samples at most max_new_tokens tokens. The request's
  // sampling.max_new_tokens bounds the whole trajectory after the prompt, appended tokens
  // included: a continuation that leaves no room for one sampled token finishes the sample
  // with FinishReason::kLength.
  std::vector<std::int64_t> append_ids;
  std::int64_t max_new_tokens = 0;
};

// Implemented by the host. Called on the backend's generating thread only.
class TurnController {
 public:
  // Must return promptly (start slow work elsewhere); `end` is valid during the call only.
  virtual void turn_ended(const TurnEnd& end) = 0;
  // The continuations decided since the last call, in any order; each parked sample gets
  // exactly one per turn end. `wait`: block until at least one is ready (the backend has
  // nothing else to do).
  virtual std::vector<TurnContinuation> continuations(bool wait) = 0;

 protected:
  ~TurnController() = default;
};

// Thread safety: one thread at a time (the trainer's rollout thread); update_weights is
// never called concurrently with generate.
class RolloutBackend {
 public:
  virtual ~RolloutBackend() = default;
  virtual std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests) = 0;
  // Hugging Face parameter names (model.layers.0.self_attn.q_proj.weight, ...). Every
  // parameter, or a subset: the ones not named keep their values (a LoRA run sends only the
  // weights its adapters change, merged: W + scaling B A). An unknown name, a duplicate or a
  // wrong shape is an error that leaves the weights as they were.
  virtual void update_weights(const NamedTensors& weights) = 0;
  // Scalar metrics of the last generate() and update_weights() calls (throughput, batch
  // occupancy, stop rate, weight-sync seconds, ...); names and meaning are the backend's.
  virtual std::vector<Metric> metrics() const { return {}; }

  // ---- ABI 1.2. Appended after metrics() so that 1.1 vtables are a prefix of 1.2 ones; the
  // host calls these only on backends of plugins built for ABI minor >= 2.

  // Whether generate_turns() is implemented. A backend without it still serves tool
  // rollouts: the host then re-sends prompt + trajectory as a new request after every tool
  // call (the prefix is recomputed, not kept).
  virtual bool supports_turns() const { return false; }
  // generate() with turns: every turn end goes to `controller`, and a sample finishes only when
  // the controller says so. The results' samples hold whole trajectories: token_ids are every
  // token after the prompt (sampled and appended), logprobs one per token (0 for appended
  // tokens), text the decoded trajectory, finish_reason the last turn's.
  virtual std::vector<GenerationResult> generate_turns(const std::vector<GenerationRequest>& requests,
                                                       TurnController& controller) {
    (void)requests;
    (void)controller;
    throw std::logic_error("this rollout backend does not implement generate_turns (supports_turns() is false)");
  }
};

template <>
struct ComponentTraits<RolloutBackend> {
  static constexpr ComponentKind kind = ComponentKind::kRolloutBackend;
  static const char* torch_version() { return detail::compiled_torch_version(); }
};

GRPO_SDK_NAMESPACE_END
