// The native rollout engine: continuous batching over a per-slot KV cache.
//
//   - a request's prompt is prefilled once (prompts batched up to max_num_batched_tokens per
//     forward); its n samples copy that prefix into their own slots and draw their first
//     tokens from the prompt's last logits with their own random streams;
//   - every step decodes all live slots together, one token each; a sequence that finishes
//     frees its slot at once and a waiting sample takes it on the next step, so the batch
//     never waits for its longest member; live slots are kept at rows [0, live) so a step
//     works on views of the cache, never on gathered copies; on CUDA the steps take fixed
//     shapes per batch bucket and replay as CUDA graphs (bucketed_decoder.h, decode_steps);
//   - bad requests fail alone (GenerationResult::status), and so do the requests of a prefill
//     that throws (out of memory on a long prompt); the others complete. Non-finite logits
//     (diverged weights) fail the whole call with an exception.
//
// Serving (grpo-serve) goes through serve(): requests join the running batch as they arrive,
// between decode steps, instead of one generate() call's fixed list.
//
// Thread-safety: one thread at a time per Engine (the RolloutBackend contract).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/tokenizer/tokenizer.h"
#include "grpo/sdk/torch/rollout_backend.h"
#include "plugins/backends/native/bucketed_decoder.h"
#include "plugins/backends/native/sampler.h"

namespace grpo::native {

// The ids that end a sample, from every place a Hugging Face folder states them (config.json,
// generation_config.json, the tokenizer's EOS), as vLLM takes their union.
std::vector<std::int64_t> eos_token_ids(const core::LoadedModel& loaded, const std::optional<core::Tokenizer>& tokenizer);

// More samples than this in one request is a mistake, not a workload (the results alone would
// take gigabytes).
constexpr std::int64_t kMaxSamplesPerRequest = 65536;

struct EngineOptions {
  std::int64_t max_num_seqs = 32;              // decode slots (sequences decoded together)
  std::int64_t max_num_batched_tokens = 2048;  // prompt tokens per prefill forward (a longer prompt goes alone)
  std::int64_t max_model_len = 0;              // prompt + completion bound; 0 = max_position_embeddings
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;
  bool ignore_eos = false;                     // true: the model's EOS ids do not stop a sample
  std::uint64_t seed = 0;                      // base of the streams of requests without a seed
  // How decode steps are shaped and launched (bucketed_decoder.h): auto = CUDA graphs on CUDA
  // where the model allows them, steps sized to the batch elsewhere.
  DecodeSteps decode_steps = DecodeSteps::kAuto;
};

// The engine's options by name, in one place for every front end (the native backend's
// rollout.backend.* keys, grpo-serve's --flags): the defaults are EngineOptions{}'s.
// "raw" / "scaled" / "processed"; nullopt for anything else.
std::optional<LogprobsMode> parse_logprobs_mode(std::string_view name);
// An option that cannot run any engine: `key` is its name as EngineOptions spells it
// ("max_num_seqs"), `message` what is wrong ("must be >= 1, got 0"). The bound max_model_len has
// from the model (its max_position_embeddings) is checked when the engine is built.
struct EngineOptionProblem {
  std::string key, message;
};
std::optional<EngineOptionProblem> engine_options_problem(const EngineOptions& options);

// Figures of one generate() call.
struct EngineStats {
  std::int64_t prompts = 0, samples = 0, failed_requests = 0;
  std::int64_t prefill_tokens = 0, prefill_forwards = 0;
  double prefill_s = 0.0;
  std::int64_t decode_tokens = 0, decode_steps = 0;  // decode_tokens = sum of live rows over steps
  double decode_s = 0.0;
  double sampling_s = 0.0;  // inside prefill_s/decode_s: logits processing and sampling
  std::int64_t finished_stop = 0, finished_length = 0;
  std::int64_t turns = 0, appended_tokens = 0;  // multi-turn: turn ends, tokens fed on resume
  double resume_s = 0.0;  // multi-turn: feeding appended tokens and drawing the next turn's first token
  std::int64_t completion_tokens = 0, max_completion_tokens = 0;
  double wall_s = 0.0;
  std::int64_t max_num_seqs = 0;
  std::int64_t kv_cache_bytes = 0;
  DecodeSteps decode_mode = DecodeSteps::kDynamic;  // what the call's decode steps were (auto resolved)
  std::int64_t graphs_captured = 0, graph_replays = 0;  // CUDA graphs: captured (one per new bucket), replayed steps
  std::int64_t padded_rows = 0;  // bucketed steps: rows computed beyond the live ones
};

// Where Engine::serve() gets its requests and leaves its results. Called on the serving thread
// only; every call must return promptly except take(idle = true).
class RequestFeed {
 public:
  // Moves the requests that arrived since the last call into `incoming`; their handles are
  // consecutive from 0 in the order of all take() calls of one serve(). `idle`: nothing is in
  // flight, so block until a request arrives or the feed closes (a good moment for work that
  // needs the engine quiet, such as loading new weights). Returns false once the feed is closed:
  // serve() then finishes the requests in flight and returns.
  virtual bool take(bool idle, std::vector<sdk::GenerationRequest>& incoming) = 0;
  // After every sampled token of sample `sample` of request `handle` (streaming): `so_far` is the
  // sample's output so far (token ids, log-probs; text empty) and `text` its decoded bytes,
  // up to a stop string once one matched (bytes after the last complete character may still
  // change meaning with the next token). The result (on_result) has the final text.
  virtual void on_token(std::uint64_t handle, std::int64_t sample, const sdk::GeneratedSample& so_far,
                        std::string_view text) {
    (void)handle, (void)sample, (void)so_far, (void)text;
  }
  // A request is done: every sample finished, or it failed alone (result.status).
  virtual void on_result(std::uint64_t handle, sdk::GenerationResult result) = 0;

 protected:
  ~RequestFeed() = default;
};

class Engine {
 public:
  // `eos_ids` stop every sample unless options.ignore_eos. Without a tokenizer the samples'
  // text is empty and requests with stop strings fail.
  Engine(core::CausalLM model, std::optional<core::Tokenizer> tokenizer, std::vector<std::int64_t> eos_ids,
         EngineOptions options);

  // `controller` set: multi-turn (RolloutBackend::generate_turns): a sample whose turn ends is
  // parked with its KV cache in a slot of its own (the cache then has 2 x max_num_seqs slots;
  // started samples, parked ones included, never exceed max_num_seqs), the controller is told,
  // and a continuation feeds the last sampled token and the appended ones in one forward of
  // that slot (CausalLMImpl::extend_slots; one forward per run of equal lengths) before the sample rejoins the decode batch.
  std::vector<sdk::GenerationResult> generate(const std::vector<sdk::GenerationRequest>& requests,
                                              sdk::TurnController* controller = nullptr);

  // Serves requests from `feed` until it closes (continuous batching across requests: a request
  // that arrives while others decode is prefilled and joins the decode batch at the next step).
  // The slot cache is sized for max_model_len. Stats accumulate over the whole call.
  void serve(RequestFeed& feed);

  const EngineStats& last_stats() const { return stats_; }
  const EngineOptions& options() const { return options_; }
  std::int64_t max_model_len() const { return max_model_len_; }
  core::CausalLM& model() { return model_; }
  const std::optional<core::Tokenizer>& tokenizer() const { return tokenizer_; }

  // "" when the request is valid, else why not (names the field).
  std::string validate(const sdk::GenerationRequest& request) const;

  // Grows the slot cache when a call needs longer sequences than it holds (rounded up to 256
  // tokens, capped at max_model_len); it never shrinks. `slots` (0: max_num_seqs) changes the
  // slot count.
  core::SlotKVCache& cache_for(std::int64_t capacity, std::int64_t slots = 0);

 private:
  class Run;  // the state of one generate() or serve() call (engine.cpp)

  core::CausalLM model_;
  std::optional<core::Tokenizer> tokenizer_;
  std::vector<std::int64_t> eos_ids_;
  EngineOptions options_;
  std::int64_t max_model_len_;
  std::uint64_t calls_ = 0;  // generate() calls so far: unseeded requests differ per call
  std::optional<core::SlotKVCache> cache_;  // kept between calls, regrown when a call needs more
  std::unique_ptr<BucketedDecoder> bucketed_;  // fixed-shape steps and their CUDA graphs, kept between calls
  bool decode_fallback_said_ = false;  // decode_steps asked for what the model or device cannot: said once
  EngineStats stats_;
};

}  // namespace grpo::native
