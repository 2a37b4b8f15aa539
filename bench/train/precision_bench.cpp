// Training precision on the CPU: what bf16 buys an optimizer step, side by side in one run.
//
// The model is Qwen2.5-0.5B's shape (bench/configs/qwen2.5-0.5b/config.json: hidden 896,
// intermediate 4864, 24 layers, 14 heads / 2 KV heads, vocab 151936, tied embeddings,
// rope_theta 1e6) with random weights (init std 0.02). One optimizer step is what the trainer
// does for one micro-batch: ONE packed forward of a row of --tokens tokens (default 2048 =
// 4 sequences of --seq-len 512, each prompt 256 + response 256, through
// packed_response_logprobs), loss = -mean log-prob over the response tokens, backward,
// clip_grad_norm (max norm 1), AdamW step. Variants (--variants, all by default):
//
//   fp32                 float32 weights, no scope.
//   bf16-mixed           float32 master weights; one ComputePrecisionScope(kBf16Mixed) around
//                        forward + backward, as the trainer opens it: autocast runs the matmuls
//                        in bf16, casting each weight at each use (the scope turns autocast's
//                        cast cache off).
//   bf16-mixed-cached    the same with autocast's cast cache on inside the scope: one bf16 copy
//                        of each weight per optimizer step, the alternative the issue asked to
//                        measure. With one micro-batch per step each projection is used once in
//                        the forward, so the cache saves nothing there; --micro-batches N (N
//                        rows per optimizer step, gradients accumulated) shows it when weights
//                        are reused. Measured on 2 EPYC cores in three runs: without the
//                        cache 80.6, 87.1, 70.8 tokens/s, with it 71.7, 68.5, 75.2 (no
//                        consistent win), so the trainer runs without it (docs/precision.md).
//   bf16                 the model converted to bfloat16, AdamW on bf16 parameters, no scope
//                        (no master weights: small updates are lost, docs/precision.md).
//
// Each variant builds its own model and optimizer (same seed, same tokens), runs one untimed
// warm-up step, then --repeats timed steps (median reported), and is freed before the next
// (fp32 + AdamW is ~8 GB before activations). A step is timed in three parts: forward (to the
// loss), backward, optimizer (clip + AdamW). The peak resident memory of each variant is read
// from VmHWM (reset between variants through /proc/self/clear_refs).
//
// The matmul peak is measured in the same run on the model's GEMM shapes, as the model runs
// them (at::linear, x [tokens, in] times W [out, in]^T): MLP up/gate [T,896]x[896,4864], MLP
// down [T,4864]x[4864,896], attention q/o [T,896]x[896,896] and the LM head
// [T,896]x[896,151936], each in fp32 and bf16; the best GFLOP/s over the shapes per dtype is
// that dtype's "peak". MFU = 6 * parameters * tokens/s / peak (the usual 6N estimate: it
// ignores attention's flops and counts the LM head over every token although log-probs are
// taken on the response tokens only).
//
// Threads: configure_compute_threads (OMP_NUM_THREADS, else every available core), or
// --threads N. On 2 cores (AMD EPYC, avx512_bf16) the default run (4 variants x (1 + 2) steps
// of 19-55 s, plus the matmuls) took 6.6 minutes and peaked at ~20 GB resident (the fp32 and
// bf16-mixed variants); --repeats 1 cuts about a third of it.
//
// The output ends with `name: value` lines (numbers only; a variant left out by --variants
// reports 0, and so do the ratios that need it):
//   train_tokens_per_s_fp32, train_tokens_per_s_bf16_mixed, train_tokens_per_s_bf16_mixed_cached,
//   train_tokens_per_s_bf16, bf16_train_speedup (bf16_mixed / fp32), matmul_peak_gflops_fp32,
//   matmul_peak_gflops_bf16, train_mfu_bf16_mixed, train_mfu_fp32, threads.
//
//   grpo_bench_train_precision [--config bench/configs/qwen2.5-0.5b/config.json] [--threads N]
//                              [--tokens 2048] [--seq-len 512] [--repeats 2] [--micro-batches 1]
//                              [--variants fp32,bf16-mixed,bf16-mixed-cached,bf16] [--seed 0]
//                              [--skip-matmul]
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/logprobs.h"
#include "core/model/model_config.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/runtime/threads.h"
#include "core/train/packing.h"

namespace {

using grpo::core::CausalLM;
using grpo::core::ModelConfig;
using grpo::core::Precision;
using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::has_flag;
using grpo::bench::seconds_since;
using grpo::bench::split;
using grpo::bench::cpu_model_name;
using grpo::bench::median;
using grpo::bench::peak_rss_mib;
using grpo::bench::reset_peak_rss;

// ---- the optimizer step -----------------------------------------------------------------

struct Variant {
  std::string name;      // as in --variants
  Precision precision;   // kFp32, kBf16Mixed (scope) or kBf16 (bf16 weights)
  bool cast_cache = true;
};

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> v = {{"fp32", Precision::kFp32, true},
                                         {"bf16-mixed", Precision::kBf16Mixed, false},
                                         {"bf16-mixed-cached", Precision::kBf16Mixed, true},
                                         {"bf16", Precision::kBf16, true}};
  return v;
}

// The packed rows of one optimizer step: per row, seqs_per_row sequences of prompt + response.
struct StepTokens {
  std::vector<std::vector<int64_t>> prompts, responses;  // owned storage
  std::vector<std::vector<grpo::core::SequenceTokens>> rows;
  int64_t width = 0, tokens = 0, response_tokens = 0;
};

StepTokens make_tokens(int64_t rows, int64_t seqs_per_row, int64_t prompt_len, int64_t response_len, int64_t vocab,
                       uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  StepTokens t;
  const auto n = static_cast<std::size_t>(rows * seqs_per_row);
  t.prompts.resize(n);
  t.responses.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    t.prompts[i].resize(static_cast<std::size_t>(prompt_len));
    t.responses[i].resize(static_cast<std::size_t>(response_len));
    for (auto& x : t.prompts[i]) x = tok(rng);
    for (auto& x : t.responses[i]) x = tok(rng);
  }
  t.rows.resize(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < n; ++i) t.rows[i / static_cast<std::size_t>(seqs_per_row)].push_back({&t.prompts[i], &t.responses[i]});
  t.width = response_len;
  t.tokens = rows * seqs_per_row * (prompt_len + response_len);
  t.response_tokens = rows * seqs_per_row * response_len;
  return t;
}

struct StepTimes {
  double forward = 0, backward = 0, optimizer = 0, loss = 0, grad_norm = 0;
  double total() const { return forward + backward + optimizer; }
};

StepTimes train_step(CausalLM& model, torch::optim::Optimizer& optimizer, const StepTokens& t, const Variant& v) {
  StepTimes s;
  optimizer.zero_grad();
  {
    // The trainer's scope: around every micro-batch of the step, closed before the weights change.
    const grpo::core::ComputePrecisionScope scope(v.precision, torch::kCPU);
    // The alternative the trainer does not take: autocast's cast cache on (the scope turns it
    // off), one bf16 copy of each weight for the whole step, dropped when the scope closes.
    if (v.cast_cache && v.precision == Precision::kBf16Mixed) at::autocast::set_autocast_cache_enabled(true);
    grpo::core::LogProbOptions lp;
    for (const auto& row : t.rows) {
      auto t0 = Clock::now();
      const at::Tensor logp = grpo::core::packed_response_logprobs(model, row, t.width, lp).logprobs;  // [S, width]
      // Every response token is real (no padding): the mean over the step's response tokens.
      const at::Tensor loss = -logp.sum() / static_cast<double>(t.response_tokens);
      s.loss += loss.item<double>();
      s.forward += seconds_since(t0);
      t0 = Clock::now();
      loss.backward();
      s.backward += seconds_since(t0);
    }
  }
  const auto t0 = Clock::now();
  s.grad_norm = grpo::core::clip_grad_norm(optimizer, 1.0);
  optimizer.step();
  s.optimizer = seconds_since(t0);
  return s;
}

struct VariantResult {
  bool ran = false;
  double step_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double first_loss = 0, first_grad_norm = 0, peak_mib = 0;
  double tokens_per_s = 0;
};

VariantResult bench_variant(const ModelConfig& config, const Variant& v, const StepTokens& t, int64_t repeats,
                            uint64_t seed, int64_t* params_out) {
  reset_peak_rss();
  VariantResult r;
  CausalLM model(config);
  model->init_weights(0.02, seed);
  if (v.precision == Precision::kBf16) model->to(torch::kBFloat16);
  model->train();
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  *params_out = params;
  grpo::core::OptimizerSettings settings;
  settings.learning_rate = 1e-5;
  settings.weight_decay = 0.01;
  auto optimizer = grpo::core::make_adamw(*model, settings);

  std::printf("  %-19s warm-up ...", v.name.c_str());
  std::fflush(stdout);
  const StepTimes warm = train_step(model, *optimizer, t, v);
  r.first_loss = warm.loss;
  r.first_grad_norm = warm.grad_norm;
  std::printf(" %.1f s; timed:", warm.total());
  std::fflush(stdout);
  std::vector<double> step, fwd, bwd, opt;
  for (int64_t i = 0; i < repeats; ++i) {
    const StepTimes s = train_step(model, *optimizer, t, v);
    step.push_back(s.total());
    fwd.push_back(s.forward);
    bwd.push_back(s.backward);
    opt.push_back(s.optimizer);
    std::printf(" %.1f s", s.total());
    std::fflush(stdout);
  }
  std::printf("\n");
  r.ran = true;
  r.step_s = median(step);
  r.forward_s = median(fwd);
  r.backward_s = median(bwd);
  r.optimizer_s = median(opt);
  r.tokens_per_s = static_cast<double>(t.tokens) / r.step_s;
  r.peak_mib = peak_rss_mib();
  return r;  // model and optimizer freed here, before the next variant
}

// ---- matmul peaks -----------------------------------------------------------------------

struct GemmShape {
  const char* what;
  int64_t k, n;  // x [tokens, k] times W [n, k]^T
};

// Best seconds of at::linear over a short series (at least 2 timed calls after a warm-up, more
// while under ~1 s in total).
double time_linear(const at::Tensor& x, const at::Tensor& w) {
  torch::NoGradGuard no_grad;
  at::linear(x, w);  // warm-up: allocator, BLAS/oneDNN first-call costs
  double best = 1e30, spent = 0;
  for (int i = 0; i < 8 && (i < 2 || spent < 1.0); ++i) {
    const auto t0 = Clock::now();
    const at::Tensor y = at::linear(x, w);
    const double s = seconds_since(t0);
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

struct Peaks {
  double fp32 = 0, bf16 = 0;
};

Peaks matmul_peaks(const ModelConfig& c, int64_t tokens) {
  const std::vector<GemmShape> shapes = {{"mlp up/gate", c.hidden_size, c.intermediate_size},
                                         {"mlp down", c.intermediate_size, c.hidden_size},
                                         {"attn q/o", c.hidden_size, c.num_attention_heads * c.head_dim},
                                         {"lm head", c.hidden_size, c.vocab_size}};
  Peaks p;
  std::printf("\nmatmul (at::linear as the model runs it), M = %lld tokens, GFLOP/s = 2*M*K*N / best time:\n",
              static_cast<long long>(tokens));
  std::printf("  %-12s %-22s %10s %10s %8s\n", "shape", "[M,K]x[K,N]", "fp32", "bf16", "bf16/fp32");
  for (const auto& s : shapes) {
    double g[2] = {0, 0};
    int i = 0;
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      torch::manual_seed(0);
      const at::Tensor x = torch::randn({tokens, s.k}).to(dtype);
      const at::Tensor w = (torch::randn({s.n, s.k}) * 0.02).to(dtype);
      const double sec = time_linear(x, w);
      g[i++] = 2.0 * static_cast<double>(tokens) * static_cast<double>(s.k) * static_cast<double>(s.n) / sec / 1e9;
    }
    p.fp32 = std::max(p.fp32, g[0]);
    p.bf16 = std::max(p.bf16, g[1]);
    char dims[64];
    std::snprintf(dims, sizeof(dims), "[%lld,%lld]x[%lld,%lld]", static_cast<long long>(tokens),
                  static_cast<long long>(s.k), static_cast<long long>(s.k), static_cast<long long>(s.n));
    std::printf("  %-12s %-22s %10.1f %10.1f %8.2f\n", s.what, dims, g[0], g[1], g[1] / g[0]);
    std::fflush(stdout);
  }
  std::printf("  peak (best over shapes): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", p.fp32, p.bf16);
  return p;
}

}  // namespace

// Long because it is the benchmark's script, read top to bottom: flags, each precision's timed
// steps side by side, the table and the `name: value` lines.
int main(int argc, char** argv) {
  const char* config_flag = flag(argc, argv, "--config");
  const std::string config_path = config_flag ? config_flag : grpo::bench::qwen05b_config_path();
  const int64_t tokens = arg(argc, argv, "--tokens", 2048);
  const int64_t seq_len = arg(argc, argv, "--seq-len", 512);
  const int64_t repeats = arg(argc, argv, "--repeats", 2);
  const int64_t micro_batches = arg(argc, argv, "--micro-batches", 1);
  const uint64_t seed = static_cast<uint64_t>(arg(argc, argv, "--seed", 0));
  const int64_t threads_flag = arg(argc, argv, "--threads", 0);
  const bool skip_matmul = has_flag(argc, argv, "--skip-matmul");
  const char* variants_flag = flag(argc, argv, "--variants");
  const std::vector<std::string> names = split(variants_flag ? variants_flag : "fp32,bf16-mixed,bf16-mixed-cached,bf16");
  if (tokens < 2 || seq_len < 2 || tokens % seq_len != 0 || repeats < 1 || micro_batches < 1 || threads_flag < 0) {
    std::fprintf(stderr, "bad arguments: --tokens must be a multiple of --seq-len (>= 2), counts >= 1\n");
    return 2;
  }
  std::vector<Variant> variants;
  for (const auto& n : names) {
    const auto it = std::find_if(all_variants().begin(), all_variants().end(), [&](const Variant& v) { return v.name == n; });
    if (it == all_variants().end()) {
      std::fprintf(stderr, "unknown variant '%s' (expected fp32, bf16-mixed, bf16-mixed-cached, bf16)\n", n.c_str());
      return 2;
    }
    if (std::any_of(variants.begin(), variants.end(), [&](const Variant& v) { return v.name == n; })) {
      std::fprintf(stderr, "variant '%s' listed twice\n", n.c_str());
      return 2;
    }
    variants.push_back(*it);
  }

  ModelConfig config;
  try {
    config = grpo::core::load_model_config(config_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  const int threads = grpo::bench::choose_threads(threads_flag, "grpo_bench_train_precision");
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("training precision benchmark\n");
  std::printf("cpu: %s; bf16 support: %s; available cores %d\n", cpu_model_name().c_str(),
              grpo::core::cpu_bf16_support().describe().c_str(), grpo::core::available_cores());
  std::printf("LibTorch intra-op threads %d (%s); MKLDNN (oneDNN) %s; OPENBLAS_CORETYPE=%s\n", at::get_num_threads(),
              threads_flag > 0 ? "--threads" : "configure_compute_threads", at::hasMKLDNN() ? "yes" : "no",
              coretype ? coretype : "<unset>");
  const int64_t seqs_per_row = tokens / seq_len, prompt_len = seq_len / 2, response_len = seq_len - seq_len / 2;
  std::printf("model: %s, Qwen2-shaped, random weights (std 0.02): hidden %lld, intermediate %lld, %lld layers, "
              "%lld heads / %lld KV heads, vocab %lld%s\n",
              config_path.c_str(), static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.intermediate_size), static_cast<long long>(config.num_hidden_layers),
              static_cast<long long>(config.num_attention_heads), static_cast<long long>(config.num_key_value_heads),
              static_cast<long long>(config.vocab_size), config.tie_word_embeddings ? ", tied embeddings" : "");
  std::printf("step: %lld packed row%s of %lld tokens (%lld sequences of prompt %lld + response %lld), "
              "loss = -mean response log-prob, backward, clip_grad_norm 1.0, AdamW; 1 warm-up + %lld timed steps "
              "per variant (median)\n",
              static_cast<long long>(micro_batches), micro_batches == 1 ? "" : "s (gradients accumulated)",
              static_cast<long long>(tokens), static_cast<long long>(seqs_per_row), static_cast<long long>(prompt_len),
              static_cast<long long>(response_len), static_cast<long long>(repeats));
  std::fflush(stdout);

  const auto t_start = Clock::now();
  const StepTokens step_tokens = make_tokens(micro_batches, seqs_per_row, prompt_len, response_len, config.vocab_size, seed + 1);
  std::map<std::string, VariantResult> results;
  int64_t params = 0;
  std::printf("\n");
  for (const auto& v : variants) results[v.name] = bench_variant(config, v, step_tokens, repeats, seed, &params);
  if (params == 0) {
    CausalLM m(config);
    for (const auto& p : m->parameters()) params += p.numel();
  }

  std::printf("\n%lld parameters; %lld tokens per optimizer step\n", static_cast<long long>(params),
              static_cast<long long>(step_tokens.tokens));
  std::printf("  %-19s %9s %9s %9s %9s %10s %9s %11s %10s\n", "variant", "step s", "fwd s", "bwd s", "optim s",
              "tokens/s", "vs fp32", "first loss", "peak MiB");
  const double fp32_tps = results.count("fp32") ? results["fp32"].tokens_per_s : 0.0;
  for (const auto& v : variants) {
    const auto& r = results[v.name];
    std::printf("  %-19s %9.2f %9.2f %9.2f %9.2f %10.1f %9.2f %11.5f %10.0f\n", v.name.c_str(), r.step_s, r.forward_s,
                r.backward_s, r.optimizer_s, r.tokens_per_s, fp32_tps > 0 ? r.tokens_per_s / fp32_tps : 0.0,
                r.first_loss, r.peak_mib);
  }
  std::fflush(stdout);

  Peaks peaks;
  if (!skip_matmul) peaks = matmul_peaks(config, tokens);
  std::printf("\ntotal benchmark time: %.1f s\n", seconds_since(t_start));

  auto tps = [&](const char* name) { return results.count(name) ? results[name].tokens_per_s : 0.0; };
  auto mfu = [&](double tokens_per_s, double peak_gflops) {
    return peak_gflops > 0 ? 6.0 * static_cast<double>(params) * tokens_per_s / (peak_gflops * 1e9) : 0.0;
  };
  const double mixed = tps("bf16-mixed");
  std::printf("train_tokens_per_s_fp32: %.1f\n", tps("fp32"));
  std::printf("train_tokens_per_s_bf16_mixed: %.1f\n", mixed);
  std::printf("train_tokens_per_s_bf16_mixed_cached: %.1f\n", tps("bf16-mixed-cached"));
  std::printf("train_tokens_per_s_bf16: %.1f\n", tps("bf16"));
  std::printf("bf16_train_speedup: %.2f\n", fp32_tps > 0 ? mixed / fp32_tps : 0.0);
  std::printf("matmul_peak_gflops_fp32: %.1f\n", peaks.fp32);
  std::printf("matmul_peak_gflops_bf16: %.1f\n", peaks.bf16);
  std::printf("train_mfu_bf16_mixed: %.3f\n", mfu(mixed, peaks.bf16));
  std::printf("train_mfu_fp32: %.3f\n", mfu(fp32_tps, peaks.fp32));
  std::printf("threads: %d\n", threads);
  return 0;
}
