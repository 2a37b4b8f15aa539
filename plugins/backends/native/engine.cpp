// The engine (engine.h). Long (about 600 lines) because its scheduler is one state machine,
// Engine::Run, whose steps (admit, prefill, decode, park/resume turns, deliver) share that state
// and read best side by side; the sampling is in sampler.cpp.
#include "plugins/backends/native/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "grpo/sdk/utf8.h"

namespace grpo::native {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The stream seed of an unseeded request: distinct per (engine seed, call, request index).
std::uint64_t derived_seed(std::uint64_t base, std::uint64_t call, std::size_t request) {
  std::uint64_t x = base ^ 0xA0761D6478BD642FULL;
  for (std::uint64_t v : {call, static_cast<std::uint64_t>(request)}) {
    x ^= v + 0x9E3779B97F4A7C15ULL + (x << 6) + (x >> 2);
    x *= 0xE7037ED1A0B428DBULL;
  }
  return x;
}

RowSampling row_sampling(const sdk::SamplingParams& p) { return RowSampling{p.temperature, p.top_p, p.top_k, p.min_p}; }

struct Sample;

// A request in flight: valid ones wait for, or hold, their prefill, then their samples decode.
struct Request {
  std::uint64_t index = 0;  // generate(): index into its requests; serve(): the feed's handle
  sdk::GenerationRequest owned;  // serve(): the request (generate() points into its argument)
  const sdk::GenerationRequest* req = nullptr;
  sdk::GenerationResult result;
  Clock::time_point arrived;  // sample timings count from here
  std::int64_t length = 0;
  std::int64_t limit = 0;  // completion tokens allowed: min(max_new_tokens, max_model_len - length)
  std::shared_ptr<core::KVCache> prefix;  // the prefill batch's cache; row prefix_row is this prompt
  std::int64_t prefix_row = 0;
  at::Tensor last_logits;  // [vocab] float32: the distribution of the first completion token
  std::int64_t next_sample = 0;
  std::int64_t unfinished = 0;  // samples not recorded yet
  double prefill_s = 0.0;
  std::uint64_t seed = 0;  // the request's, or one derived for it
  std::vector<std::unique_ptr<Sample>> samples;  // by sample index; null until started
};

struct Sample {
  Request* prompt = nullptr;
  std::int64_t index = 0;
  SampleStream stream;
  sdk::GeneratedSample out;
  std::string bytes;  // the completion's decoded bytes (special tokens skipped)
  std::size_t cut = std::string::npos;  // where a stop string starts in `bytes`
  bool done = false;  // out of the decode batch: finished, or parked
  // Multi-turn (generate_turns): the current turn's first token in out.token_ids, how many
  // tokens it may sample, and where the sample waits for its continuation.
  std::int64_t turn = 0;
  std::size_t turn_start = 0;
  std::int64_t turn_limit = std::numeric_limits<std::int64_t>::max();
  bool parked = false;
  std::int64_t parking_slot = -1;
  Sample(Request* p, std::int64_t i) : prompt(p), index(i), stream(p->seed, static_cast<std::uint64_t>(i)) {}
};

}  // namespace

std::vector<std::int64_t> eos_token_ids(const core::LoadedModel& loaded, const std::optional<core::Tokenizer>& tokenizer) {
  std::vector<std::int64_t> ids = loaded.config.eos_token_ids;
  if (!loaded.generation_config_json.empty()) {
    const auto j = nlohmann::json::parse(loaded.generation_config_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("eos_token_id")) {
      const auto& e = j["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<std::int64_t>());
      if (e.is_array())
        for (const auto& x : e)
          if (x.is_number_integer()) ids.push_back(x.get<std::int64_t>());
    }
  }
  if (tokenizer && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::optional<LogprobsMode> parse_logprobs_mode(std::string_view name) {
  if (name == "raw") return LogprobsMode::kRaw;
  if (name == "scaled") return LogprobsMode::kScaled;
  if (name == "processed") return LogprobsMode::kProcessed;
  return std::nullopt;
}

std::optional<EngineOptionProblem> engine_options_problem(const EngineOptions& o) {
  if (o.max_num_seqs < 1) return EngineOptionProblem{"max_num_seqs", "must be >= 1, got " + std::to_string(o.max_num_seqs)};
  if (o.max_num_batched_tokens < 1)
    return EngineOptionProblem{"max_num_batched_tokens", "must be >= 1, got " + std::to_string(o.max_num_batched_tokens)};
  if (o.max_model_len < 0)
    return EngineOptionProblem{"max_model_len", "must be >= 1 (0 = the model's bound), got " + std::to_string(o.max_model_len)};
  return std::nullopt;
}

Engine::Engine(core::CausalLM model, std::optional<core::Tokenizer> tokenizer, std::vector<std::int64_t> eos_ids,
               EngineOptions options)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)), eos_ids_(std::move(eos_ids)), options_(options) {
  if (!model_) throw std::invalid_argument("native engine: no model");
  if (const auto problem = engine_options_problem(options_)) throw std::invalid_argument(problem->key + " " + problem->message);
  const std::int64_t model_max = model_->config().max_position_embeddings;
  if (options_.max_model_len < 0 || options_.max_model_len > model_max)
    throw std::invalid_argument("max_model_len must be in [1, " + std::to_string(model_max) +
                                "] (the model's max_position_embeddings) or 0 for that bound, got " +
                                std::to_string(options_.max_model_len));
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : model_max;
}

std::string Engine::validate(const sdk::GenerationRequest& r) const {
  const std::int64_t vocab = model_->config().vocab_size;
  const sdk::SamplingParams& s = r.sampling;
  if (r.prompt_ids.empty()) return "prompt_ids is empty (a prompt needs at least one token)";
  for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= vocab)
      return "prompt_ids[" + std::to_string(i) + "] = " + std::to_string(r.prompt_ids[i]) +
             " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")";
  const auto length = static_cast<std::int64_t>(r.prompt_ids.size());
  if (length >= max_model_len_)
    return "the prompt has " + std::to_string(length) + " tokens; max_model_len is " + std::to_string(max_model_len_) +
           " (prompt + at least one new token)";
  if (r.n > kMaxSamplesPerRequest)
    return "n must be <= " + std::to_string(kMaxSamplesPerRequest) + ", got " + std::to_string(r.n);
  const auto problems = sdk::sampling_problems(s, r.n);
  if (!problems.empty()) {
    const sdk::SamplingProblem& p = problems.front();
    return (p.field == "n" ? std::string("n ") : "sampling." + p.field + " ") + p.message;
  }
  for (std::size_t i = 0; i < s.stop_token_ids.size(); ++i)
    if (s.stop_token_ids[i] < 0 || s.stop_token_ids[i] >= vocab)
      return "sampling.stop_token_ids[" + std::to_string(i) + "] = " + std::to_string(s.stop_token_ids[i]) +
             " is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  if (!s.stop_strings.empty() && !tokenizer_)
    return "sampling.stop_strings needs a tokenizer, and this engine has none (no tokenizer.json)";
  return "";
}

core::SlotKVCache& Engine::cache_for(std::int64_t capacity, std::int64_t slots) {
  if (slots <= 0) slots = options_.max_num_seqs;
  if (!cache_ || cache_->capacity() < capacity || cache_->num_slots() != slots) {
    const at::Tensor w = model_->lm_head_weight();
    // Round up so that calls of slowly growing lengths do not reallocate every time.
    const std::int64_t rounded = (capacity + 255) / 256 * 256;
    const std::int64_t grown = cache_ ? std::max(rounded, cache_->capacity()) : rounded;
    cache_.reset();  // free the old buffers before allocating the new ones
    cache_.emplace(model_->config(), slots, std::min(grown, max_model_len_),
                   w.scalar_type(), w.device());
  }
  return *cache_;
}

// One generate() or serve() call: the requests in flight, the decode batch and the parked
// samples. The steps are the members below; loop() strings them together. Long because the
// scheduler's steps share this state and read best next to each other.
class Engine::Run {
 public:
  // `start`: generate()'s start, from which its samples' timings count (serve(): each request's
  // arrival).
  Run(Engine& engine, sdk::TurnController* controller, RequestFeed* feed, std::int64_t capacity, Clock::time_point start)
      : start_(start),
        e_(engine),
        controller_(controller),
        feed_(feed),
        max_rows_(engine.options_.max_num_seqs),
        cache_(engine.cache_for(capacity, controller ? 2 * engine.options_.max_num_seqs : 0)),
        lm_head_(engine.model_->lm_head_weight()),
        device_(lm_head_.device()) {
    e_.stats_.kv_cache_bytes = cache_.bytes();
    const DecodeStepsChoice steps = choose_decode_steps(e_.options_.decode_steps, *e_.model_, device_);
    if (!steps.fallback_reason.empty() && !e_.decode_fallback_said_) {
      sdk::log_info(std::string("native engine: decode steps run ") + decode_steps_name(steps.steps) + ": " + steps.fallback_reason);
      e_.decode_fallback_said_ = true;
    }
    e_.stats_.decode_mode = steps.steps;
    if (steps.steps != DecodeSteps::kDynamic) {
      const bool graphs = steps.steps == DecodeSteps::kGraphs;
      // A decoder whose capture failed stays eager: capturing again would fail again.
      const BucketedDecoder* held = e_.bucketed_.get();
      if (!held || (graphs && !held->graphs() && !held->capture_failed()) || (!graphs && held->graphs()))
        e_.bucketed_ = std::make_unique<BucketedDecoder>(max_rows_, graphs, device_);
      bucketed_ = e_.bucketed_.get();
    }
    // Multi-turn: parked samples keep their KV in slots [max_rows, 2 max_rows) while their
    // tools run, so the decode batch's rows [0, live) never have holes.
    if (controller_)
      for (std::int64_t slot = 2 * max_rows_ - 1; slot >= max_rows_; --slot) free_parking_.push_back(slot);
  }

  // Queues a request (validated now: a bad one completes at once with its status).
  void add(std::uint64_t index, const sdk::GenerationRequest* req, sdk::GenerationRequest owned = {}) {
    auto r = std::make_unique<Request>();
    r->index = index;
    r->owned = std::move(owned);
    r->req = req ? req : &r->owned;
    r->arrived = feed_ ? Clock::now() : start_;
    r->result.request_id = r->req->id;
    const std::string problem = e_.validate(*r->req);
    if (!problem.empty()) {
      r->result.status = sdk::Status::invalid_argument("request '" + r->req->id + "': " + problem);
      ++e_.stats_.failed_requests;
      completed_.push_back(r.get());
      in_flight_.emplace(index, std::move(r));
      return;
    }
    r->length = static_cast<std::int64_t>(r->req->prompt_ids.size());
    r->limit = std::min(r->req->sampling.max_new_tokens, e_.max_model_len_ - r->length);
    r->seed = r->req->seed ? *r->req->seed : derived_seed(e_.options_.seed, e_.calls_, index);
    r->result.samples.resize(static_cast<std::size_t>(r->req->n));
    r->samples.resize(static_cast<std::size_t>(r->req->n));
    r->unfinished = r->req->n;
    e_.stats_.samples += r->req->n;
    ++e_.stats_.prompts;
    pending_.push_back(r.get());
    in_flight_.emplace(index, std::move(r));
  }

  // Runs until every request is done (and, serving, the feed is closed); results go to
  // `deliver`, or to the feed.
  void loop(const std::function<void(std::uint64_t, sdk::GenerationResult)>& deliver) {
    deliver_ = deliver;
    for (;;) {
      if (feed_ && !feed_closed_) {
        std::vector<sdk::GenerationRequest> incoming;
        feed_closed_ = !feed_->take(in_flight_.empty(), incoming);
        for (sdk::GenerationRequest& q : incoming) add(next_handle_++, nullptr, std::move(q));
      }
      if (controller_ && parked_ > 0) apply(controller_->continuations(false));
      while (admit() > 0) {
        compact();  // samples that ended on their first token free their rows again
        if (static_cast<std::int64_t>(live_.size()) + parked_ >= max_rows_) break;
      }
      if (live_.empty()) {
        if (controller_ && parked_ > 0) {
          std::vector<sdk::TurnContinuation> decisions = controller_->continuations(true);
          if (decisions.empty())
            throw std::logic_error("turn controller: no continuation for " + std::to_string(parked_) + " waiting samples");
          apply(std::move(decisions));
          continue;
        }
        flush();
        if (feed_ && !(feed_closed_ && in_flight_.empty())) continue;
        break;
      }
      decode_step();
      flush();
    }
  }

 private:
  const Clock::time_point start_;
  Engine& e_;
  sdk::TurnController* controller_;
  RequestFeed* feed_;
  const std::int64_t max_rows_;
  core::SlotKVCache& cache_;
  const at::Tensor lm_head_;
  const at::Device device_;
  std::function<void(std::uint64_t, sdk::GenerationResult)> deliver_;

  std::unordered_map<std::uint64_t, std::unique_ptr<Request>> in_flight_;  // by index
  std::vector<Request*> completed_;  // done, delivered by the next flush()
  std::deque<Request*> pending_;  // not prefilled yet
  std::deque<Request*> ready_;    // prefilled, samples left to start
  std::int64_t waiting_ = 0;      // samples of `ready_` requests not started
  std::vector<Sample*> live_;     // live_[r] decodes in cache row r
  std::int64_t parked_ = 0;       // samples waiting for the controller
  std::vector<std::int64_t> free_parking_;
  BucketedDecoder* bucketed_ = nullptr;  // null: dynamic decode steps
  bool feed_closed_ = false;
  std::uint64_t next_handle_ = 0;

  // Kernels run asynchronously on CUDA: wait for them before reading the clock.
  void synchronize() const {
    if (device_.is_cuda()) torch::cuda::synchronize();
  }

  // Hands the finished requests over and forgets them. Only between steps: a request's samples
  // may still sit in live_ until compact() has run.
  void flush() {
    for (Request* r : completed_) {
      auto node = in_flight_.extract(r->index);  // keeps *r alive until the next iteration
      deliver_(r->index, std::move(r->result));
    }
    completed_.clear();
  }

  // The sample's result: its last turn's finish reason.
  void record(Sample& s) {
    s.done = true;
    Request& r = *s.prompt;
    s.out.timings.prefill_s = r.prefill_s;
    s.out.timings.finish_s = seconds_between(r.arrived, Clock::now());
    if (controller_) {
      core::DecodeOptions skip;
      skip.skip_special_tokens = true;
      if (e_.tokenizer_) {
        std::vector<int> ids;
        for (std::int64_t id : s.out.token_ids)
          if (id < e_.tokenizer_->vocab_size()) ids.push_back(static_cast<int>(id));
        try {
          s.out.text = sdk::to_valid_utf8(e_.tokenizer_->decode_bytes(ids, skip));
        } catch (const core::TokenizerError&) {
        }
      }
    } else {
      s.out.text = sdk::to_valid_utf8(s.cut == std::string::npos ? std::string_view(s.bytes)
                                                                 : std::string_view(s.bytes).substr(0, s.cut));
    }
    EngineStats& stats = e_.stats_;
    const auto n = static_cast<std::int64_t>(s.out.token_ids.size());
    stats.completion_tokens += n;
    stats.max_completion_tokens = std::max(stats.max_completion_tokens, n);
    ++(s.out.finish_reason == sdk::FinishReason::kStop ? stats.finished_stop : stats.finished_length);
    r.result.samples[static_cast<std::size_t>(s.index)] = std::move(s.out);
    if (--r.unfinished == 0) completed_.push_back(&r);
  }

  // Without a controller a sample is done; with one, its turn is, and it waits (parked) for the
  // controller's continuation.
  void finish(Sample& s, sdk::FinishReason why) {
    s.done = true;
    s.out.finish_reason = why;
    if (!controller_) return record(s);
    sdk::GeneratedSample turn;
    const auto from = static_cast<std::ptrdiff_t>(s.turn_start);
    turn.token_ids.assign(s.out.token_ids.begin() + from, s.out.token_ids.end());
    turn.logprobs.assign(s.out.logprobs.begin() + from, s.out.logprobs.end());
    turn.finish_reason = why;
    turn.timings = s.out.timings;
    turn.timings.finish_s = seconds_between(s.prompt->arrived, Clock::now());
    s.parked = true;
    ++parked_;
    ++e_.stats_.turns;
    controller_->turn_ended(sdk::TurnEnd{static_cast<std::size_t>(s.prompt->index), s.index, s.turn, &turn});
  }

  void accept(Sample& s, std::int64_t token, float logprob) {
    const sdk::GenerationRequest& r = *s.prompt->req;
    const std::optional<core::Tokenizer>& tokenizer = e_.tokenizer_;
    if (s.out.token_ids.empty()) s.out.timings.first_token_s = seconds_between(s.prompt->arrived, Clock::now());
    s.out.token_ids.push_back(token);
    s.out.logprobs.push_back(logprob);
    if (tokenizer) {
      const std::size_t before = s.bytes.size();
      // Ids the model has but the tokenizer does not (padded vocabularies) decode to nothing,
      // as in Hugging Face tokenizers. The text grows by what the new token adds to the
      // sequence's decode (SentencePiece decoders are not per-token).
      if (token < tokenizer->vocab_size()) {
        try {
          core::DecodeOptions skip;
          skip.skip_special_tokens = true;
          std::vector<int> tail;
          const auto& ids = s.out.token_ids;
          for (std::size_t i = ids.size() > 8 ? ids.size() - 8 : 0; i < ids.size(); ++i)
            tail.push_back(static_cast<int>(ids[i]));
          s.bytes += core::decode_bytes_appended(*tokenizer, tail, skip);
        } catch (const core::TokenizerError&) {
        }
      }
      // A stop string may span tokens: search from where a match ending in the new bytes
      // could start.
      for (const std::string& stop : r.sampling.stop_strings) {
        const std::size_t from = before >= stop.size() - 1 ? before - (stop.size() - 1) : 0;
        const std::size_t at = s.bytes.find(stop, from);
        if (at != std::string::npos && at < s.cut) s.cut = at;
      }
    }
    if (feed_)  // the text up to a matched stop string: what the result's text will be
      feed_->on_token(s.prompt->index, s.index, s.out,
                      s.cut == std::string::npos ? std::string_view(s.bytes) : std::string_view(s.bytes).substr(0, s.cut));
    const bool stop_token =
        (!e_.options_.ignore_eos && std::find(e_.eos_ids_.begin(), e_.eos_ids_.end(), token) != e_.eos_ids_.end()) ||
        std::find(r.sampling.stop_token_ids.begin(), r.sampling.stop_token_ids.end(), token) != r.sampling.stop_token_ids.end();
    if (stop_token || s.cut != std::string::npos) {
      finish(s, sdk::FinishReason::kStop);
    } else if (static_cast<std::int64_t>(s.out.token_ids.size()) >= s.prompt->limit ||
               static_cast<std::int64_t>(s.out.token_ids.size() - s.turn_start) >= s.turn_limit) {
      finish(s, sdk::FinishReason::kLength);
    }
  }

  // Samples rows of `logits` [R, vocab] for `who` and feeds each its token.
  void sample_and_accept(const at::Tensor& logits, const std::vector<Sample*>& who) {
    const auto ts = Clock::now();
    std::vector<RowSampling> params;
    std::vector<double> uniforms;
    params.reserve(who.size());
    uniforms.reserve(who.size());
    for (Sample* s : who) {
      params.push_back(row_sampling(s->prompt->req->sampling));
      uniforms.push_back(is_greedy(params.back().temperature) ? 0.0 : s->stream.next_uniform());
    }
    const SampledTokens chosen = sample_tokens(logits, params, uniforms, e_.options_.logprobs_mode);
    e_.stats_.sampling_s += seconds_between(ts, Clock::now());
    const auto tokens = chosen.tokens.accessor<int64_t, 1>();
    const auto logprobs = chosen.logprobs.accessor<float, 1>();
    for (std::size_t i = 0; i < who.size(); ++i) accept(*who[i], tokens[static_cast<int64_t>(i)], logprobs[static_cast<int64_t>(i)]);
  }

  // Finished rows leave; the last live row moves into each hole so that live rows stay [0, R).
  void compact() {
    for (std::int64_t r = static_cast<std::int64_t>(live_.size()) - 1; r >= 0; --r) {
      Sample* leaving = live_[static_cast<std::size_t>(r)];
      if (!leaving->done) continue;
      if (leaving->parked) {  // keep its cache until the controller decides
        leaving->parking_slot = free_parking_.back();
        free_parking_.pop_back();
        cache_.move_slot(r, leaving->parking_slot);
      }
      const std::int64_t last = static_cast<std::int64_t>(live_.size()) - 1;
      if (r != last) {
        cache_.move_slot(last, r);
        live_[static_cast<std::size_t>(r)] = live_.back();
      }
      cache_.clear(last);
      live_.pop_back();
    }
  }

  // Prefills pending requests, as many as the token budget allows and the free rows can use.
  void prefill(std::int64_t free_rows) {
    std::vector<Request*> batch;
    std::int64_t tokens = 0, max_len = 0, samples_ready = waiting_;
    while (!pending_.empty()) {
      Request* p = pending_.front();
      // The forward is right-padded: it computes (and caches) prompts x longest tokens.
      const std::int64_t padded = static_cast<std::int64_t>(batch.size() + 1) * std::max(max_len, p->length);
      if (!batch.empty() && (padded > e_.options_.max_num_batched_tokens || samples_ready >= free_rows)) break;
      batch.push_back(p);
      pending_.pop_front();
      tokens += p->length;
      samples_ready += p->req->n;
      max_len = std::max(max_len, p->length);
    }
    const auto k = static_cast<std::int64_t>(batch.size());
    std::vector<int64_t> ids(static_cast<std::size_t>(k * max_len), 0), mask(ids.size(), 0), last(batch.size());
    for (std::int64_t i = 0; i < k; ++i) {
      const auto& prompt = batch[static_cast<std::size_t>(i)]->req->prompt_ids;
      std::copy(prompt.begin(), prompt.end(), ids.begin() + i * max_len);
      std::fill_n(mask.begin() + i * max_len, prompt.size(), 1);
      last[static_cast<std::size_t>(i)] = static_cast<int64_t>(prompt.size()) - 1;
    }
    const auto tp = Clock::now();
    std::shared_ptr<core::KVCache> prefix;
    at::Tensor logits;
    try {
      const at::Tensor input = torch::tensor(ids, torch::kLong).view({k, max_len}).to(device_);
      const at::Tensor attention = torch::tensor(mask, torch::kLong).view({k, max_len}).to(device_);
      prefix = std::make_shared<core::KVCache>(e_.model_->config(), k, max_len, lm_head_.scalar_type(), device_);
      // Right padding: every prompt's tokens sit at cache positions [0, length).
      const at::Tensor hidden = e_.model_->hidden_states(input, core::AttentionLayout::padded(attention), prefix.get());
      const at::Tensor at_last = torch::tensor(last, torch::kLong).to(device_).view({k, 1, 1}).expand({k, 1, hidden.size(2)});
      logits = e_.model_->logits(hidden.gather(1, at_last).view({k, -1})).to(torch::kFloat);
      synchronize();
    } catch (const std::exception& e) {
      // Out of memory on a long prompt, say: those requests fail, the others go on.
      for (Request* p : batch) {
        p->result.status = sdk::Status::internal("request '" + p->req->id + "': prefill failed: " + std::string(e.what()));
        p->result.samples.clear();
        ++e_.stats_.failed_requests;
        e_.stats_.samples -= p->req->n;
        completed_.push_back(p);
      }
      return;
    }
    const double seconds = seconds_between(tp, Clock::now());
    e_.stats_.prefill_s += seconds;
    e_.stats_.prefill_tokens += tokens;
    ++e_.stats_.prefill_forwards;
    for (std::int64_t i = 0; i < k; ++i) {
      Request* p = batch[static_cast<std::size_t>(i)];
      p->prefix = prefix;
      p->prefix_row = i;
      p->last_logits = logits[i];
      p->prefill_s = seconds;
      ready_.push_back(p);
      waiting_ += p->req->n;
    }
  }

  // Starts waiting samples in the free rows (prefilling when none is waiting) and draws their
  // first tokens; returns how many started.
  std::size_t admit() {
    std::vector<Sample*> started;
    std::vector<at::Tensor> first_logits;
    while (static_cast<std::int64_t>(live_.size()) + parked_ < max_rows_) {
      if (ready_.empty()) {
        if (pending_.empty()) break;
        prefill(max_rows_ - static_cast<std::int64_t>(live_.size()) - parked_);
        continue;
      }
      Request* p = ready_.front();
      const std::int64_t index = p->next_sample++;
      p->samples[static_cast<std::size_t>(index)] = std::make_unique<Sample>(p, index);
      Sample* s = p->samples[static_cast<std::size_t>(index)].get();
      cache_.load_prefix(static_cast<std::int64_t>(live_.size()), *p->prefix, p->prefix_row, p->length);
      live_.push_back(s);
      started.push_back(s);
      first_logits.push_back(p->last_logits);
      --waiting_;
      if (p->next_sample == p->req->n) {  // its prefix and logits are no longer needed
        ready_.pop_front();
        p->prefix.reset();
        p->last_logits = at::Tensor();
      }
    }
    if (!started.empty()) {
      const auto ts = Clock::now();
      sample_and_accept(torch::stack(first_logits), started);
      e_.stats_.prefill_s += seconds_between(ts, Clock::now());
    }
    return started.size();
  }

  // The sample a continuation names, if it is waiting for one.
  Sample* parked_sample(const sdk::TurnContinuation& c) const {
    const auto it = in_flight_.find(c.request);
    if (it == in_flight_.end()) return nullptr;
    const Request& r = *it->second;
    if (c.sample < 0 || static_cast<std::size_t>(c.sample) >= r.samples.size()) return nullptr;
    Sample* s = r.samples[static_cast<std::size_t>(c.sample)].get();
    return s && s->parked ? s : nullptr;
  }

  // Applies the controller's decisions: finished samples leave, resumed ones feed their last
  // sampled token and the appended ones in one forward of their slot and draw their next token.
  void apply(std::vector<sdk::TurnContinuation> decisions) {
    std::vector<Sample*> resumed;
    std::vector<std::vector<std::int64_t>> feeds;  // per resumed sample: its last sampled token, then the appended ones
    std::vector<at::Tensor> next_logits;
    const auto tr = Clock::now();
    for (sdk::TurnContinuation& c : decisions) {
      Sample* s = parked_sample(c);
      if (!s)
        throw std::logic_error("turn controller: a continuation for request " + std::to_string(c.request) + " sample " +
                               std::to_string(c.sample) + ", which is not waiting for one");
      s->parked = false;
      --parked_;
      const std::int64_t slot = s->parking_slot;
      free_parking_.push_back(slot);
      s->parking_slot = -1;
      const auto total = static_cast<std::int64_t>(s->out.token_ids.size() + c.append_ids.size());
      if (c.finish) {
        record(*s);
        continue;
      }
      if (total + 1 > s->prompt->limit || c.max_new_tokens < 1) {  // no room for a sampled token
        s->out.finish_reason = sdk::FinishReason::kLength;
        record(*s);
        continue;
      }
      for (std::int64_t id : c.append_ids)
        if (id < 0 || id >= e_.model_->config().vocab_size)
          throw std::logic_error("turn controller: appended token id " + std::to_string(id) + " is outside the vocabulary");
      const auto row = static_cast<std::int64_t>(live_.size());
      cache_.move_slot(slot, row);
      std::vector<std::int64_t> feed{s->out.token_ids.back()};
      feed.insert(feed.end(), c.append_ids.begin(), c.append_ids.end());
      for (std::int64_t id : c.append_ids) {
        s->out.token_ids.push_back(id);
        s->out.logprobs.push_back(0.0f);
      }
      feeds.push_back(std::move(feed));
      e_.stats_.appended_tokens += static_cast<std::int64_t>(c.append_ids.size());
      ++s->turn;
      s->turn_start = s->out.token_ids.size();
      s->turn_limit = c.max_new_tokens;
      s->bytes.clear();
      s->cut = std::string::npos;
      s->done = false;
      live_.push_back(s);
      resumed.push_back(s);
    }
    // The resumed samples sit in consecutive rows: each run of equal feed lengths is one forward.
    const auto first_row = static_cast<std::int64_t>(live_.size() - resumed.size());
    for (std::size_t a = 0; a < feeds.size();) {
      std::size_t b = a;
      std::vector<std::int64_t> flat;
      while (b < feeds.size() && feeds[b].size() == feeds[a].size()) flat.insert(flat.end(), feeds[b].begin(), feeds[b].end()), ++b;
      const auto rows = static_cast<std::int64_t>(b - a), T = static_cast<std::int64_t>(feeds[a].size());
      const at::Tensor hidden = e_.model_->extend_slots(torch::tensor(flat, torch::kLong).view({rows, T}).to(device_), cache_,
                                                        first_row + static_cast<std::int64_t>(a));
      const at::Tensor last = e_.model_->logits(hidden.select(1, T - 1)).to(torch::kFloat);
      for (std::int64_t r = 0; r < rows; ++r) next_logits.push_back(last[r]);
      a = b;
    }
    if (!resumed.empty()) {
      sample_and_accept(torch::stack(next_logits), resumed);
      synchronize();
      compact();
    }
    e_.stats_.resume_s += seconds_between(tr, Clock::now());
  }

  // One token for every live sample.
  void decode_step() {
    const auto td = Clock::now();
    const auto rows = static_cast<std::int64_t>(live_.size());
    std::vector<int64_t> inputs(live_.size());
    for (std::size_t r = 0; r < live_.size(); ++r) inputs[r] = live_[r]->out.token_ids.back();
    if (bucketed_) {
      const std::int64_t captured = bucketed_->graphs_captured(), replays = bucketed_->graph_replays(),
                         padded = bucketed_->padded_rows();
      const at::Tensor logits = bucketed_->step(*e_.model_, cache_, inputs);
      cache_.advance(0, rows, 1);
      e_.stats_.graphs_captured += bucketed_->graphs_captured() - captured;
      e_.stats_.graph_replays += bucketed_->graph_replays() - replays;
      e_.stats_.padded_rows += bucketed_->padded_rows() - padded;
      sample_and_accept(logits, live_);
    } else {
      const at::Tensor hidden = e_.model_->decode_slots(torch::tensor(inputs, torch::kLong).to(device_), cache_);
      sample_and_accept(e_.model_->logits(hidden), live_);
    }
    synchronize();
    e_.stats_.decode_s += seconds_between(td, Clock::now());
    e_.stats_.decode_tokens += rows;
    ++e_.stats_.decode_steps;
    compact();
  }
};

std::vector<sdk::GenerationResult> Engine::generate(const std::vector<sdk::GenerationRequest>& requests,
                                                    sdk::TurnController* controller) {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  stats_ = EngineStats{};
  ++calls_;
  stats_.max_num_seqs = options_.max_num_seqs;
  std::vector<sdk::GenerationResult> results(requests.size());
  // The last completion token is never fed back, so a slot holds length + limit - 1 tokens.
  std::int64_t capacity = 0;
  for (const sdk::GenerationRequest& r : requests) {
    const auto length = static_cast<std::int64_t>(r.prompt_ids.size());
    if (validate(r).empty()) capacity = std::max(capacity, length + std::min(r.sampling.max_new_tokens, max_model_len_ - length) - 1);
  }
  if (capacity == 0) {  // no valid request: nothing needs the cache
    for (std::size_t i = 0; i < requests.size(); ++i) {
      results[i].request_id = requests[i].id;
      results[i].status = sdk::Status::invalid_argument("request '" + requests[i].id + "': " + validate(requests[i]));
    }
    stats_.failed_requests = static_cast<std::int64_t>(requests.size());
    stats_.wall_s = seconds_between(t0, Clock::now());
    return results;
  }
  Run run(*this, controller, nullptr, capacity, t0);
  for (std::size_t i = 0; i < requests.size(); ++i) run.add(i, &requests[i]);
  run.loop([&](std::uint64_t i, sdk::GenerationResult result) { results[static_cast<std::size_t>(i)] = std::move(result); });
  stats_.wall_s = seconds_between(t0, Clock::now());
  return results;
}

void Engine::serve(RequestFeed& feed) {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  stats_ = EngineStats{};
  ++calls_;
  stats_.max_num_seqs = options_.max_num_seqs;
  Run run(*this, nullptr, &feed, max_model_len_, t0);
  run.loop([&](std::uint64_t handle, sdk::GenerationResult result) { feed.on_result(handle, std::move(result)); });
  stats_.wall_s = seconds_between(t0, Clock::now());
}

}  // namespace grpo::native
