// Speed of the native rollout engine (plugins/backends/native), three ways on the same
// prompts in one run, greedy with ignore_eos so every sequence makes exactly N tokens:
//
//   1. the engine, batched (max_num_seqs 32): prefill once, then one decode step per token
//      against the slot KV cache for all live sequences together;
//   2. a naive recompute loop: the textbook generate without a KV cache; every step runs
//      the whole left-padded batch [P, prompt + generated] through the model and takes the
//      argmax of the last column (only the last column goes through the LM head, so this
//      baseline is already kinder than model->forward() over every position);
//   3. the engine at batch 1 (max_num_seqs 1): the same requests, one at a time.
//
// Models (random weights, init_weights(0.02), float32, CPU):
//   tiny      the CPU quickstart demo's size (Qwen2-shaped, hidden 256, 4 layers, vocab 4096);
//   qwen0.5b  Qwen2.5-0.5B's shape (hidden 896, 24 layers, vocab 151936).
//
// On the tiny model all three run the full workload. On qwen0.5b the batched engine runs the
// full workload for its absolute figures, but the naive loop and the batch-1 engine would
// take far too long on a CPU, so each runs a reduced workload (--large-naive-*,
// --large-batch1-*) and the batched engine runs that same reduced workload again: every
// ratio printed compares equal work, never a reduced run with a full one.
//
// Precision and threads (qwen0.5b only): the batched engine, greedy, on the same prompts
// (--precision-prompts 32 x --precision-tokens 64 new tokens: decode-dominated), three ways:
//   fp32          the float32 model at the chosen thread count;
//   bf16          the same weights converted to bfloat16 (the engine computes in, and keeps its
//                 KV cache in, the model's dtype: what the native backend's `dtype: bfloat16`
//                 loads), at the chosen thread count;
//   fp32 1 thread the float32 model with at::set_num_threads(1) for that run (LibTorch's own
//                 default here), restored after.
// The figure compared is the engine's decode rate (last_stats: decode tokens / decode seconds,
// prefill excluded). bf16's greedy tokens may part from fp32's (rounding flips near-ties of
// random weights): their agreement is printed, and is not part of `tokens_match`.
// The thread count is configure_compute_threads' choice (OMP_NUM_THREADS, else every available
// core), or --threads N; it is printed first.
//
// The output ends with `name: value` lines: the qwen0.5b figures (prefixed `qwen0.5b_`),
// then the precision comparison's (decode_tokens_per_s_bf16, decode_tokens_per_s_fp32,
// decode_tokens_per_s_fp32_1thread, bf16_decode_speedup = bf16 / fp32 at the chosen threads,
// decode_speedup_vs_1thread_fp32 = bf16 at the chosen threads / fp32 on 1 thread), then the
// tiny model's, whose last two lines are `speedup_vs_naive` and `speedup_from_batching`.
// --precision-only runs the precision comparison alone (its lines only); --precision-tokens 0
// leaves it out.
//
//   grpo_bench_rollout [--models tiny,qwen0.5b] [--prompts 32] [--new-tokens 128]
//                      [--min-prompt 16] [--max-prompt 64] [--max-num-seqs 32] [--seed 0]
//                      [--large-naive-prompts 8] [--large-naive-tokens 16]
//                      [--large-batch1-prompts 32] [--large-batch1-tokens 8]
//                      [--precision-prompts 32] [--precision-tokens 64] [--precision-only]
//                      [--threads N]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "core/runtime/threads.h"
#include "plugins/backends/native/engine.h"

namespace {

using grpo::core::CausalLM;
using grpo::core::ModelConfig;
using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::has_flag;
using grpo::bench::seconds_since;
using grpo::bench::split;

// ---- model shapes ---------------------------------------------------------------------

struct Shape {
  std::string name;
  ModelConfig config;
};

// Qwen2-shaped and small enough for a CPU quickstart demo.
Shape tiny_shape() {
  ModelConfig c;
  c.architecture = grpo::core::ModelArchitecture::Qwen2;
  c.vocab_size = 4096;  // a small BPE vocabulary
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 2048;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  return {"tiny", c};
}

// Qwen2.5-0.5B's config.json (the precision bench's too), with random weights.
Shape qwen05b_shape() { return {"qwen0.5b", grpo::core::load_model_config(grpo::bench::qwen05b_config_path())}; }

std::string describe(const ModelConfig& c, int64_t params) {
  std::ostringstream s;
  s << "Qwen2-shaped, random weights (init std 0.02), float32: hidden " << c.hidden_size << ", "
    << c.num_hidden_layers << " layers, " << c.num_attention_heads << " heads / " << c.num_key_value_heads
    << " KV heads, head_dim " << c.head_dim << ", intermediate " << c.intermediate_size << ", vocab "
    << c.vocab_size << (c.tie_word_embeddings ? ", tied embeddings" : "") << (c.qkv_bias ? ", qkv bias" : "")
    << ", rope_theta " << c.rope_theta << "; " << std::fixed;
  s.precision(1);
  s << static_cast<double>(params) / 1e6 << "M parameters";
  return s.str();
}

// ---- workloads and runs ---------------------------------------------------------------

using Prompts = std::vector<std::vector<int64_t>>;
using Tokens = std::vector<std::vector<int64_t>>;

Prompts make_prompts(int64_t count, int64_t min_len, int64_t max_len, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> len(min_len, max_len), tok(0, vocab - 1);
  Prompts out(static_cast<std::size_t>(count));
  for (auto& p : out) {
    p.resize(static_cast<std::size_t>(len(rng)));
    for (auto& t : p) t = tok(rng);
  }
  return out;
}

struct Workload {
  int64_t prompts = 0, new_tokens = 0;
  bool operator==(const Workload& o) const { return prompts == o.prompts && new_tokens == o.new_tokens; }
  int64_t generated() const { return prompts * new_tokens; }
  std::string str() const { return std::to_string(prompts) + " prompts x " + std::to_string(new_tokens) + " new tokens"; }
};

struct Run {
  double seconds = 0.0;
  Tokens tokens;
  std::vector<std::vector<float>> logprobs;
  std::optional<grpo::native::EngineStats> stats;
  double tokens_per_s(const Workload& w) const { return static_cast<double>(w.generated()) / seconds; }
};

Run run_engine(grpo::native::Engine& engine, const Prompts& all, const Workload& w) {
  std::vector<grpo::sdk::GenerationRequest> requests(static_cast<std::size_t>(w.prompts));
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.id = "p" + std::to_string(i);
    r.prompt_ids = all[i];
    r.n = 1;
    r.sampling.temperature = 0.0;
    r.sampling.max_new_tokens = w.new_tokens;
  }
  const auto t0 = Clock::now();
  auto results = engine.generate(requests);
  Run run;
  run.seconds = seconds_since(t0);
  run.stats = engine.last_stats();
  for (auto& r : results) {
    if (!r.status.is_ok() || r.samples.size() != 1) {
      std::fprintf(stderr, "engine request %s failed: %s\n", r.request_id.c_str(), r.status.message().c_str());
      std::exit(1);
    }
    run.tokens.push_back(r.samples[0].token_ids);
    run.logprobs.push_back(r.samples[0].logprobs);
  }
  return run;
}

// Generate without a KV cache: every step recomputes the whole left-padded batch, so the
// last column holds every row's last token.
Run run_naive(CausalLM& model, const Prompts& all, const Workload& w) {
  torch::NoGradGuard no_grad;
  const auto P = w.prompts;
  int64_t longest = 0;
  for (int64_t i = 0; i < P; ++i) longest = std::max<int64_t>(longest, static_cast<int64_t>(all[i].size()));
  const auto t0 = Clock::now();
  std::vector<int64_t> ids(static_cast<std::size_t>(P * longest), 0), mask(ids.size(), 0);
  for (int64_t i = 0; i < P; ++i) {
    const auto& p = all[static_cast<std::size_t>(i)];
    const int64_t pad = longest - static_cast<int64_t>(p.size());
    std::copy(p.begin(), p.end(), ids.begin() + i * longest + pad);
    std::fill_n(mask.begin() + i * longest + pad, p.size(), 1);
  }
  at::Tensor input = torch::tensor(ids, torch::kLong).view({P, longest});
  at::Tensor attention = torch::tensor(mask, torch::kLong).view({P, longest});
  const at::Tensor lm_head = model->lm_head_weight();
  const at::Tensor ones = torch::ones({P, 1}, torch::kLong);
  Run run;
  run.tokens.assign(static_cast<std::size_t>(P), {});
  run.logprobs.assign(static_cast<std::size_t>(P), {});
  for (int64_t step = 0; step < w.new_tokens; ++step) {
    const at::Tensor hidden = model->hidden_states(input, grpo::core::AttentionLayout::padded(attention));
    const at::Tensor logits = torch::matmul(hidden.select(1, -1), lm_head.t());  // [P, vocab]
    const at::Tensor next = logits.argmax(-1);
    const at::Tensor logprob = torch::log_softmax(logits, -1).gather(1, next.view({P, 1})).view({P});
    const auto tok = next.accessor<int64_t, 1>();
    const auto lp = logprob.accessor<float, 1>();
    for (int64_t i = 0; i < P; ++i) {
      run.tokens[static_cast<std::size_t>(i)].push_back(tok[i]);
      run.logprobs[static_cast<std::size_t>(i)].push_back(lp[i]);
    }
    input = torch::cat({input, next.view({P, 1})}, 1);
    attention = torch::cat({attention, ones}, 1);
  }
  run.seconds = seconds_since(t0);
  return run;
}

struct Agreement {
  int64_t matching = 0, total = 0;
  double max_logprob_diff = 0.0;  // over the positions before each row's first mismatch
  bool all() const { return matching == total; }
};

Agreement compare(const Run& a, const Run& b) {
  Agreement g;
  g.total = static_cast<int64_t>(a.tokens.size());
  for (std::size_t i = 0; i < a.tokens.size(); ++i) {
    g.matching += a.tokens[i] == b.tokens[i] ? 1 : 0;
    for (std::size_t t = 0; t < a.tokens[i].size() && t < b.tokens[i].size(); ++t) {
      if (a.tokens[i][t] != b.tokens[i][t]) break;
      g.max_logprob_diff = std::max(g.max_logprob_diff, std::fabs(static_cast<double>(a.logprobs[i][t]) - b.logprobs[i][t]));
    }
  }
  return g;
}

// The first w.prompts rows of `run`, cut to w.new_tokens (greedy tokens are a prefix of a longer run's).
Run prefix_of(const Run& run, const Workload& w) {
  Run out;
  for (int64_t i = 0; i < w.prompts; ++i) {
    const auto& t = run.tokens[static_cast<std::size_t>(i)];
    const auto& l = run.logprobs[static_cast<std::size_t>(i)];
    out.tokens.emplace_back(t.begin(), t.begin() + std::min<int64_t>(w.new_tokens, static_cast<int64_t>(t.size())));
    out.logprobs.emplace_back(l.begin(), l.begin() + std::min<int64_t>(w.new_tokens, static_cast<int64_t>(l.size())));
  }
  return out;
}

void print_run(const char* label, const Run& run, const Workload& w) {
  std::printf("  %-34s %9.2f s  %9.1f generated tok/s\n", label, run.seconds, run.tokens_per_s(w));
  if (!run.stats) return;
  const auto& s = *run.stats;
  const double occupancy = s.decode_steps > 0 ? static_cast<double>(s.decode_tokens) /
                                                    static_cast<double>(s.decode_steps * s.max_num_seqs)
                                              : 0.0;
  std::printf("    last_stats: prefill %lld tok in %lld forwards, %.2f s (%.0f tok/s); decode %lld tok in %lld steps, "
              "%.2f s (%.1f tok/s, %.2f ms/step); sampling %.2f s (%.0f%% of prefill+decode); occupancy %.2f of %lld "
              "slots; kv cache %.1f MiB; engine wall %.2f s\n",
              static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.prefill_forwards), s.prefill_s,
              s.prefill_s > 0 ? s.prefill_tokens / s.prefill_s : 0.0, static_cast<long long>(s.decode_tokens),
              static_cast<long long>(s.decode_steps), s.decode_s, s.decode_s > 0 ? s.decode_tokens / s.decode_s : 0.0,
              s.decode_steps > 0 ? 1e3 * s.decode_s / static_cast<double>(s.decode_steps) : 0.0, s.sampling_s,
              100.0 * s.sampling_s / std::max(1e-12, s.prefill_s + s.decode_s), occupancy,
              static_cast<long long>(s.max_num_seqs), static_cast<double>(s.kv_cache_bytes) / (1 << 20), s.wall_s);
}

void print_agreement(const char* what, const Agreement& g) {
  std::printf("  greedy tokens, %s: %lld/%lld sequences identical; max |logprob diff| before any mismatch %.2g\n", what,
              static_cast<long long>(g.matching), static_cast<long long>(g.total), g.max_logprob_diff);
}

struct Figures {
  double engine_tokens_per_s = 0.0;
  double speedup_vs_naive = 0.0, speedup_from_batching = 0.0;
  bool tokens_match = true;
};

struct Options {
  Workload full;
  int64_t min_prompt = 16, max_prompt = 64, max_num_seqs = 32;
  uint64_t seed = 0;
  Workload large_naive, large_batch1;
  Workload precision;  // the precision comparison's workload (new_tokens 0: left out)
};

Figures bench_model(const Shape& shape, const Options& o, bool reduced) {
  CausalLM model(shape.config);
  model->init_weights(0.02, o.seed);
  model->eval();
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  std::printf("\n== model %s: %s\n", shape.name.c_str(), describe(shape.config, params).c_str());

  const Workload naive_w = reduced ? o.large_naive : o.full;
  const Workload batch1_w = reduced ? o.large_batch1 : o.full;
  const int64_t most = std::max({o.full.prompts, naive_w.prompts, batch1_w.prompts});
  const Prompts prompts = make_prompts(most, o.min_prompt, o.max_prompt, shape.config.vocab_size, o.seed + 1);
  int64_t prompt_tokens = 0;
  for (int64_t i = 0; i < o.full.prompts; ++i) prompt_tokens += static_cast<int64_t>(prompts[i].size());
  std::printf("workload: %s (prompt lengths %lld..%lld, seed %llu, %lld prompt tokens), greedy, ignore_eos\n",
              o.full.str().c_str(), static_cast<long long>(o.min_prompt), static_cast<long long>(o.max_prompt),
              static_cast<unsigned long long>(o.seed), static_cast<long long>(prompt_tokens));
  if (reduced)
    std::printf("reduced like-for-like workloads: naive recompute on the first %s, engine batch 1 on the first %s;\n"
                "the batched engine runs each of these again, and each ratio is between equal work\n",
                naive_w.str().c_str(), batch1_w.str().c_str());

  grpo::native::EngineOptions batched_opts;
  batched_opts.max_num_seqs = o.max_num_seqs;
  batched_opts.ignore_eos = true;
  grpo::native::EngineOptions single_opts = batched_opts;
  single_opts.max_num_seqs = 1;
  grpo::native::Engine batched(model, std::nullopt, {}, batched_opts);
  grpo::native::Engine single(model, std::nullopt, {}, single_opts);

  // Warm-up (allocator, BLAS and LibTorch first-call costs), not timed.
  run_engine(batched, prompts, {2, 4});
  run_engine(single, prompts, {1, 4});
  run_naive(model, prompts, {2, 2});

  std::printf("engine batched (max_num_seqs %lld), %s:\n", static_cast<long long>(o.max_num_seqs), o.full.str().c_str());
  const Run engine_full = run_engine(batched, prompts, o.full);
  print_run("engine batched", engine_full, o.full);

  Figures f;
  f.engine_tokens_per_s = engine_full.tokens_per_s(o.full);

  // The batched engine on workload w: the full run when w is the full workload, else a run of its own.
  auto engine_on = [&](const Workload& w) {
    if (w == o.full) return engine_full;
    std::printf("engine batched (max_num_seqs %lld), %s:\n", static_cast<long long>(o.max_num_seqs), w.str().c_str());
    Run r = run_engine(batched, prompts, w);
    print_run("engine batched", r, w);
    return r;
  };

  const Run engine_n = engine_on(naive_w);
  if (!(naive_w == o.full)) std::printf("naive recompute, %s:\n", naive_w.str().c_str());
  const Run naive = run_naive(model, prompts, naive_w);
  print_run("naive recompute (no KV cache)", naive, naive_w);

  const Run engine_b = engine_on(batch1_w);
  if (!(batch1_w == o.full)) std::printf("engine batch 1, %s:\n", batch1_w.str().c_str());
  const Run single_run = run_engine(single, prompts, batch1_w);
  print_run("engine batch 1 (max_num_seqs 1)", single_run, batch1_w);

  const Agreement vs_naive = compare(engine_n, naive), vs_single = compare(engine_b, single_run);
  print_agreement("engine batched vs naive recompute", vs_naive);
  print_agreement("engine batched vs engine batch 1", vs_single);
  f.tokens_match = vs_naive.all() && vs_single.all();
  if (reduced) {
    const Agreement a = compare(prefix_of(engine_full, naive_w), engine_n), b = compare(prefix_of(engine_full, batch1_w), engine_b);
    print_agreement("full batched run vs reduced batched runs", Agreement{a.matching + b.matching, a.total + b.total,
                                                                        std::max(a.max_logprob_diff, b.max_logprob_diff)});
    f.tokens_match = f.tokens_match && a.all() && b.all();
  }

  f.speedup_vs_naive = naive.seconds / engine_n.seconds;
  f.speedup_from_batching = single_run.seconds / engine_b.seconds;
  std::printf("  speedup_vs_naive = naive %.2f s / engine batched %.2f s (%s) = %.2f\n", naive.seconds, engine_n.seconds,
              naive_w.str().c_str(), f.speedup_vs_naive);
  std::printf("  speedup_from_batching = engine batch 1 %.2f s / engine batched %.2f s (%s) = %.2f\n",
              single_run.seconds, engine_b.seconds, batch1_w.str().c_str(), f.speedup_from_batching);
  std::fflush(stdout);
  return f;
}

// ---- precision and threads (qwen0.5b) -----------------------------------------------

struct PrecisionFigures {
  double bf16 = 0.0, fp32 = 0.0, fp32_1thread = 0.0;  // decode tokens/s
  double bf16_speedup() const { return fp32 > 0 ? bf16 / fp32 : 0.0; }
  double speedup_vs_1thread_fp32() const { return fp32_1thread > 0 ? bf16 / fp32_1thread : 0.0; }
};

// The engine's decode rate: decode tokens / decode seconds of the last generate() call.
double decode_rate(const Run& run) {
  return run.stats && run.stats->decode_s > 0 ? static_cast<double>(run.stats->decode_tokens) / run.stats->decode_s : 0.0;
}

PrecisionFigures bench_precision(const Shape& shape, const Options& o, int threads) {
  const Workload& w = o.precision;
  CausalLM fp32(shape.config);
  fp32->init_weights(0.02, o.seed);
  fp32->eval();
  CausalLM bf16(shape.config);
  bf16->init_weights(0.02, o.seed);  // the same weights (same seed), then rounded to bf16
  bf16->to(torch::kBFloat16);
  bf16->eval();
  const Prompts prompts = make_prompts(w.prompts, o.min_prompt, o.max_prompt, shape.config.vocab_size, o.seed + 1);
  std::printf("\n== precision and threads, model %s (fp32 and bf16 copies of the same random weights); "
              "cpu bf16 support: %s\n",
              shape.name.c_str(), grpo::core::cpu_bf16_support().describe().c_str());
  std::printf("workload: %s, engine batched (max_num_seqs %lld), greedy, ignore_eos; figure = decode tokens/s "
              "(engine last_stats, prefill excluded)\n",
              w.str().c_str(), static_cast<long long>(o.max_num_seqs));

  grpo::native::EngineOptions opts;
  opts.max_num_seqs = o.max_num_seqs;
  opts.ignore_eos = true;
  grpo::native::Engine fp32_engine(fp32, std::nullopt, {}, opts);
  grpo::native::Engine bf16_engine(bf16, std::nullopt, {}, opts);

  auto timed = [&](grpo::native::Engine& engine, const char* label, int run_threads) {
    const int before = at::get_num_threads();
    at::set_num_threads(run_threads);
    run_engine(engine, prompts, {std::min<int64_t>(2, w.prompts), 4});  // warm-up, not timed
    const Run r = run_engine(engine, prompts, w);
    at::set_num_threads(before);
    char text[96];
    std::snprintf(text, sizeof(text), "%s, %d thread%s", label, run_threads, run_threads == 1 ? "" : "s");
    print_run(text, r, w);
    std::printf("    decode %.1f tok/s\n", decode_rate(r));
    std::fflush(stdout);
    return r;
  };
  const Run f32 = timed(fp32_engine, "engine fp32", threads);
  const Run b16 = timed(bf16_engine, "engine bf16 (bf16 KV cache)", threads);
  const Run f32_1 = timed(fp32_engine, "engine fp32", 1);
  print_agreement("engine bf16 vs fp32", compare(b16, f32));
  print_agreement("engine fp32 1 thread vs fp32", compare(f32_1, f32));

  PrecisionFigures f;
  f.fp32 = decode_rate(f32);
  f.bf16 = decode_rate(b16);
  f.fp32_1thread = decode_rate(f32_1);
  std::printf("  bf16_decode_speedup = bf16 %.1f / fp32 %.1f decode tok/s (%d threads) = %.2f\n", f.bf16, f.fp32, threads,
              f.bf16_speedup());
  std::printf("  decode_speedup_vs_1thread_fp32 = bf16 %.1f (%d threads) / fp32 %.1f (1 thread) = %.2f\n", f.bf16, threads,
              f.fp32_1thread, f.speedup_vs_1thread_fp32());
  std::fflush(stdout);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.full = {arg(argc, argv, "--prompts", 32), arg(argc, argv, "--new-tokens", 128)};
  o.min_prompt = arg(argc, argv, "--min-prompt", 16);
  o.max_prompt = arg(argc, argv, "--max-prompt", 64);
  o.max_num_seqs = arg(argc, argv, "--max-num-seqs", 32);
  o.seed = static_cast<uint64_t>(arg(argc, argv, "--seed", 0));
  o.large_naive = {std::min(o.full.prompts, arg(argc, argv, "--large-naive-prompts", 8)),
                   std::min(o.full.new_tokens, arg(argc, argv, "--large-naive-tokens", 16))};
  o.large_batch1 = {std::min(o.full.prompts, arg(argc, argv, "--large-batch1-prompts", 32)),
                    std::min(o.full.new_tokens, arg(argc, argv, "--large-batch1-tokens", 8))};
  o.precision = {arg(argc, argv, "--precision-prompts", 32), arg(argc, argv, "--precision-tokens", 64)};
  const bool precision_only = has_flag(argc, argv, "--precision-only");
  const int64_t threads_flag = arg(argc, argv, "--threads", 0);
  const char* models_flag = flag(argc, argv, "--models");
  const std::vector<std::string> models = split(models_flag ? models_flag : "tiny,qwen0.5b");
  if (o.full.prompts < 1 || o.full.new_tokens < 1 || o.min_prompt < 1 || o.max_prompt < o.min_prompt ||
      o.max_num_seqs < 1 || o.large_naive.prompts < 1 || o.large_naive.new_tokens < 1 || o.large_batch1.prompts < 1 ||
      o.large_batch1.new_tokens < 1 || o.precision.prompts < 1 || o.precision.new_tokens < 0 || threads_flag < 0 ||
      (precision_only && o.precision.new_tokens < 1)) {
    std::fprintf(stderr, "bad arguments: counts must be >= 1 and --min-prompt <= --max-prompt\n");
    return 2;
  }
  for (const auto& m : models)
    if (m != "tiny" && m != "qwen0.5b") {
      std::fprintf(stderr, "unknown model '%s' (expected tiny and/or qwen0.5b)\n", m.c_str());
      return 2;
    }
  // LibTorch's default here is 1 intra-op thread whatever the core count: choose on purpose.
  int threads = 0;
  if (threads_flag > 0) {
    threads = static_cast<int>(threads_flag);
    at::set_num_threads(threads);
  } else {
    threads = grpo::core::configure_compute_threads("grpo_bench_rollout");
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("rollout benchmark: LibTorch intra-op threads %d (%s, %d available cores), OPENBLAS_CORETYPE=%s\n",
              at::get_num_threads(), threads_flag > 0 ? "--threads" : "configure_compute_threads",
              grpo::core::available_cores(), coretype ? coretype : "<unset>");
  std::printf("engine batched = max_num_seqs %lld; naive = full recompute of the left-padded batch each step "
              "(LM head on the last column only); batch 1 = the engine with max_num_seqs 1\n",
              static_cast<long long>(o.max_num_seqs));

  const auto t0 = Clock::now();
  std::optional<Figures> tiny, large;
  std::optional<PrecisionFigures> precision;
  const bool with_qwen = std::find(models.begin(), models.end(), "qwen0.5b") != models.end();
  // qwen0.5b first, so that the tiny model's figures print last.
  if (with_qwen && !precision_only) large = bench_model(qwen05b_shape(), o, /*reduced=*/true);
  if ((with_qwen || precision_only) && o.precision.new_tokens > 0) precision = bench_precision(qwen05b_shape(), o, threads);
  for (const auto& m : models)
    if (m == "tiny" && !precision_only) tiny = bench_model(tiny_shape(), o, /*reduced=*/false);
  std::printf("\ntotal benchmark time: %.1f s\n", seconds_since(t0));

  if (large) {
    std::printf("qwen0.5b_engine_tokens_per_s: %.1f\n", large->engine_tokens_per_s);
    std::printf("qwen0.5b_tokens_match: %d\n", large->tokens_match ? 1 : 0);
    std::printf("qwen0.5b_speedup_vs_naive: %.2f\n", large->speedup_vs_naive);
    std::printf("qwen0.5b_speedup_from_batching: %.2f\n", large->speedup_from_batching);
  }
  if (precision) {
    std::printf("decode_tokens_per_s_bf16: %.1f\n", precision->bf16);
    std::printf("decode_tokens_per_s_fp32: %.1f\n", precision->fp32);
    std::printf("decode_tokens_per_s_fp32_1thread: %.1f\n", precision->fp32_1thread);
    std::printf("bf16_decode_speedup: %.2f\n", precision->bf16_speedup());
    std::printf("decode_speedup_vs_1thread_fp32: %.2f\n", precision->speedup_vs_1thread_fp32());
  }
  if (tiny) {
    std::printf("engine_tokens_per_s: %.1f\n", tiny->engine_tokens_per_s);
    std::printf("tokens_match: %d\n", tiny->tokens_match ? 1 : 0);
    std::printf("speedup_vs_naive: %.2f\n", tiny->speedup_vs_naive);
    std::printf("speedup_from_batching: %.2f\n", tiny->speedup_from_batching);
  }
  return 0;
}
