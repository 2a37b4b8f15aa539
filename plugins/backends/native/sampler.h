// Token selection for the native rollout engine: the logits processing chain, sampling with
// per-sample random streams, and the log-probs the engine returns.
//
// Processing, in vLLM's order (docs/rollout.md):
//   1. temperature: logits / T (greedy rows, T < 1e-5 as in vLLM, use T = 1 and take the
//      argmax);
//   2. min-p: drop tokens whose probability is below min_p * (the top token's probability);
//   3. top-k: keep the tokens whose logit reaches the k-th largest (ties at the k-th value
//      are kept, as in Hugging Face and vLLM);
//   4. top-p: keep the smallest set of highest-ranked tokens whose mass reaches top_p, i.e.
//      drop a token when the tokens ranked above it already hold >= top_p of the mass
//      (vLLM's `probs_sum <= 1 - p` on the ascending cumulative sum, the same set).
//   "processed" log-probs = log_softmax of the result (-inf outside the kept set).
//   "raw" log-probs = log_softmax(logits): temperature 1, no truncation, the quantity a
//   trainer's teacher-forced forward computes at temperature 1.
//   "scaled" log-probs = log_softmax(logits / T), no truncation: what a trainer that divides
//   its logits by the sampling temperature (verl, TRL) computes.
//
// Sampling draws one uniform u in [0, 1) per row from the row's own stream and takes the
// first token whose cumulative processed probability (in float64) exceeds u * total: inverse
// CDF sampling, so a sample depends on its own stream and logits only, never on which other
// rows share the batch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <random>
#include <vector>

namespace grpo::native {

enum class LogprobsMode { kRaw, kScaled, kProcessed };

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS): dividing by them overflows.
constexpr double kGreedyTemperature = 1e-5;
inline bool is_greedy(double temperature) { return temperature < kGreedyTemperature; }

struct RowSampling {
  double temperature = 1.0;  // 0 (or < kGreedyTemperature) = greedy
  double top_p = 1.0;        // (0, 1]
  std::int64_t top_k = -1;   // -1 = off
  double min_p = 0.0;        // [0, 1]
};

// A sample's random stream: mt19937_64 seeded from (request seed, sample index), so sample j
// of a request draws the same numbers whatever else is being generated.
class SampleStream {
 public:
  SampleStream(std::uint64_t request_seed, std::uint64_t sample_index);
  // Uniform in [0, 1) with 53 random bits (not std::uniform_real_distribution, whose output
  // differs between standard libraries).
  double next_uniform();

 private:
  std::mt19937_64 engine_;
};

// The processed log-probs [R, V] (float32, -inf outside the kept set) of logits [R, V].
at::Tensor processed_logprobs(const at::Tensor& logits, const std::vector<RowSampling>& rows);

struct SampledTokens {
  at::Tensor tokens;    // [R] int64, CPU
  at::Tensor logprobs;  // [R] float32, CPU: raw or processed log-prob of each chosen token
};

// Chooses one token per row of logits [R, V]; uniforms[r] in [0, 1) drives row r (unused by
// greedy rows). Throws std::runtime_error when the logits hold NaN or inf.
SampledTokens sample_tokens(const at::Tensor& logits, const std::vector<RowSampling>& rows,
                            const std::vector<double>& uniforms, LogprobsMode mode);

}  // namespace grpo::native
