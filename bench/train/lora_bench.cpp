// Full fine-tuning vs LoRA on Qwen2.5-0.5B's shape, side by side in one run: the peak resident
// memory and the time of one trainer step (docs/lora.md).
//
// The model is bench/configs/qwen2.5-0.5b/config.json (hidden 896, 24 layers, vocab 151936,
// tied embeddings) with random weights (init std 0.02), float32. One step is what the trainer
// does for one micro-batch of --tokens (default one sequence of 512: prompt 256 + response 256,
// the micro-batch a memory-bound LoRA run takes, accumulating gradients over several) with a KL
// term (algorithm.kl_coef > 0, which needs a reference model):
//   1. the reference log-probs of the packed row, no grad;
//   2. the policy's packed forward (packed_response_logprobs), loss = -mean response log-prob
//      + 0.05 * mean k3(policy, reference), backward;
//   3. clip_grad_norm (max norm 1), AdamW.
// Variants:
//   full  every weight trains; the reference is a second, frozen copy of the model (what
//         load_reference_model does); AdamW over every weight.
//   lora  LoRA r = --rank (16) on all-linear (q/k/v/o/gate/up/down of every layer; lm_head is
//         left out, as PEFT's all-linear does), lora_alpha 2r; the base frozen; the reference is
//         the same model with its adapters off (AdaptersOff, no second copy); AdamW over the
//         adapters only.
// Each variant runs in a child process of its own (this program re-executed with --variant),
// so one's allocations cannot inflate the other's peak; the peak is the child's VmHWM. One
// untimed warm-up step, then --repeats timed steps (median).
//
// The output ends with `name: value` lines: lora_trainer_memory_ratio (peak RSS full / lora),
// lora_step_time_ratio (lora step / full step), full_peak_mib, lora_peak_mib, full_step_s,
// lora_step_s, lora_trainable_params, full_trainable_params, threads.
//
// Activations grow with --tokens and are the same for both variants (the LoRA run saves the same
// layer inputs, which its adapters' gradients need), so the memory ratio falls as the micro-batch
// grows: measured on 2 EPYC (Milan) cores, 2.14 at --tokens 1024 (15,949 vs 7,452 MiB).
//
//   grpo_bench_train_lora [--config bench/configs/qwen2.5-0.5b/config.json] [--tokens 512]
//                         [--seq-len 512] [--rank 16] [--repeats 2] [--threads N] [--seed 0]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/logprobs.h"
#include "core/model/lora.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/runtime/threads.h"
#include "core/train/packing.h"

namespace {

using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::seconds_since;
using grpo::core::CausalLM;

struct Tokens {
  std::vector<std::vector<int64_t>> prompts, responses;
  std::vector<grpo::core::SequenceTokens> row;
  int64_t width = 0, tokens = 0, response_tokens = 0;
};

Tokens make_tokens(int64_t seqs, int64_t prompt_len, int64_t response_len, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  Tokens t;
  t.prompts.assign(static_cast<std::size_t>(seqs), std::vector<int64_t>(static_cast<std::size_t>(prompt_len)));
  t.responses.assign(static_cast<std::size_t>(seqs), std::vector<int64_t>(static_cast<std::size_t>(response_len)));
  for (std::size_t i = 0; i < t.prompts.size(); ++i) {
    for (auto& x : t.prompts[i]) x = tok(rng);
    for (auto& x : t.responses[i]) x = tok(rng);
    t.row.push_back({&t.prompts[i], &t.responses[i]});
  }
  t.width = response_len;
  t.tokens = seqs * (prompt_len + response_len);
  t.response_tokens = seqs * response_len;
  return t;
}

// One trainer step (see the header); returns its seconds.
double train_step(CausalLM& policy, CausalLM& reference, grpo::core::LoraAdapters* adapters_off,
                  torch::optim::Optimizer& optimizer, const Tokens& t) {
  const auto t0 = Clock::now();
  grpo::core::LogProbOptions lp;
  at::Tensor ref;
  {
    torch::NoGradGuard no_grad;
    const grpo::core::AdaptersOff base(adapters_off);
    ref = grpo::core::packed_response_logprobs(reference, t.row, t.width, lp).logprobs;
  }
  optimizer.zero_grad();
  const at::Tensor logp = grpo::core::packed_response_logprobs(policy, t.row, t.width, lp).logprobs;
  const at::Tensor log_ratio = ref - logp;  // k3 = exp(ref - logp) - (ref - logp) - 1
  const at::Tensor k3 = log_ratio.exp() - log_ratio - 1.0;
  const at::Tensor loss = (-logp.sum() + 0.05 * k3.sum()) / static_cast<double>(t.response_tokens);
  loss.backward();
  grpo::core::clip_grad_norm(optimizer, 1.0);
  optimizer.step();
  return seconds_since(t0);
}

// The child: one variant, its figures on one line.
int run_variant(const std::string& variant, const grpo::core::ModelConfig& config, const Tokens& t, int64_t rank,
                int64_t repeats, uint64_t seed) {
  grpo::bench::reset_peak_rss();
  CausalLM model(config);
  model->init_weights(0.02, seed);
  model->train();
  CausalLM reference{nullptr};
  std::unique_ptr<grpo::core::LoraAdapters> lora;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  grpo::core::OptimizerSettings settings;
  settings.learning_rate = 1e-5;
  int64_t trainable = 0;
  if (variant == "full") {
    reference = CausalLM(config);
    reference->init_weights(0.02, seed);
    reference->eval();
    for (auto& p : reference->parameters()) p.set_requires_grad(false);
    optimizer = grpo::core::make_adamw(*model, settings);
    for (const auto& p : model->parameters()) trainable += p.numel();
  } else {
    grpo::core::LoraSettings s;
    s.r = rank;
    s.lora_alpha = static_cast<double>(2 * rank);
    s.target_modules = {"all-linear"};
    lora = std::make_unique<grpo::core::LoraAdapters>(model, s, seed);
    reference = model;  // the base: the same model with its adapters off
    optimizer = grpo::core::make_adamw(lora->parameters(), settings);
    trainable = lora->num_parameters();
  }
  std::fprintf(stderr, "  %s: warm-up ...", variant.c_str());
  const double warm = train_step(model, reference, lora.get(), *optimizer, t);
  std::fprintf(stderr, " %.1f s; timed:", warm);
  std::vector<double> steps;
  for (int64_t i = 0; i < repeats; ++i) {
    steps.push_back(train_step(model, reference, lora.get(), *optimizer, t));
    std::fprintf(stderr, " %.1f s", steps.back());
  }
  std::fprintf(stderr, "\n");
  std::printf("variant_result %s %.4f %.1f %lld\n", variant.c_str(), grpo::bench::median(steps), grpo::bench::peak_rss_mib(),
              static_cast<long long>(trainable));
  return 0;
}

struct Result {
  double step_s = 0, peak_mib = 0;
  long long trainable = 0;
};

// One variant in a process of its own; its result line read back.
Result spawn_variant(const std::string& args, const std::string& variant) {
  const std::string line = grpo::bench::run_variant_process(args, variant);
  Result r;
  char name[32];
  if (std::sscanf(line.c_str(), "variant_result %31s %lf %lf %lld", name, &r.step_s, &r.peak_mib, &r.trainable) != 4) {
    std::fprintf(stderr, "variant %s: unreadable result '%s'\n", variant.c_str(), line.c_str());
    std::exit(1);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const char* config_flag = flag(argc, argv, "--config");
  const std::string config_path = config_flag ? config_flag : grpo::bench::qwen05b_config_path();
  const int64_t tokens = arg(argc, argv, "--tokens", 512);
  const int64_t seq_len = arg(argc, argv, "--seq-len", 512);
  const int64_t rank = arg(argc, argv, "--rank", 16);
  const int64_t repeats = arg(argc, argv, "--repeats", 2);
  const int64_t threads_flag = arg(argc, argv, "--threads", 0);
  const uint64_t seed = static_cast<uint64_t>(arg(argc, argv, "--seed", 0));
  const char* variant = flag(argc, argv, "--variant");
  if (tokens < 2 || seq_len < 2 || tokens % seq_len != 0 || rank < 1 || repeats < 1 || threads_flag < 0) {
    std::fprintf(stderr, "bad arguments: --tokens must be a multiple of --seq-len (>= 2); --rank, --repeats >= 1\n");
    return 2;
  }
  grpo::core::ModelConfig config;
  try {
    config = grpo::core::load_model_config(config_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const int threads = grpo::bench::choose_threads(threads_flag, "grpo_bench_train_lora");
  const Tokens t = make_tokens(tokens / seq_len, seq_len / 2, seq_len - seq_len / 2, config.vocab_size, seed + 1);
  if (variant) return run_variant(variant, config, t, rank, repeats, seed);

  std::printf("LoRA vs full fine-tuning, one trainer step with a KL reference\n");
  std::printf("cpu: %s; LibTorch intra-op threads %d; available cores %d\n", grpo::bench::cpu_model_name().c_str(),
              at::get_num_threads(), grpo::core::available_cores());
  std::printf("model: %s (hidden %lld, %lld layers, vocab %lld), random weights, float32\n", config_path.c_str(),
              static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_hidden_layers),
              static_cast<long long>(config.vocab_size));
  std::printf("step: one packed row of %lld tokens (%lld sequences of %lld), reference log-probs, forward, backward, "
              "clip, AdamW; LoRA r %lld, lora_alpha %lld, all-linear; each variant in its own process, 1 warm-up + "
              "%lld timed steps (median)\n",
              static_cast<long long>(t.tokens), static_cast<long long>(tokens / seq_len), static_cast<long long>(seq_len),
              static_cast<long long>(rank), static_cast<long long>(2 * rank), static_cast<long long>(repeats));
  std::fflush(stdout);
  std::ostringstream args;
  args << "--config " << config_path << " --tokens " << tokens << " --seq-len " << seq_len << " --rank " << rank
       << " --repeats " << repeats << " --threads " << threads << " --seed " << seed;
  const auto t0 = Clock::now();
  const Result full = spawn_variant(args.str(), "full");
  const Result lora = spawn_variant(args.str(), "lora");
  std::printf("\n  %-6s %10s %12s %16s\n", "", "step s", "peak MiB", "trainable");
  std::printf("  %-6s %10.2f %12.0f %16lld\n", "full", full.step_s, full.peak_mib, full.trainable);
  std::printf("  %-6s %10.2f %12.0f %16lld\n", "lora", lora.step_s, lora.peak_mib, lora.trainable);
  std::printf("total benchmark time: %.1f s\n", seconds_since(t0));
  std::printf("lora_trainer_memory_ratio: %.3f\n", lora.peak_mib > 0 ? full.peak_mib / lora.peak_mib : 0.0);
  std::printf("lora_step_time_ratio: %.3f\n", full.step_s > 0 ? lora.step_s / full.step_s : 0.0);
  std::printf("full_peak_mib: %.0f\n", full.peak_mib);
  std::printf("lora_peak_mib: %.0f\n", lora.peak_mib);
  std::printf("full_step_s: %.3f\n", full.step_s);
  std::printf("lora_step_s: %.3f\n", lora.step_s);
  std::printf("full_trainable_params: %lld\n", full.trainable);
  std::printf("lora_trainable_params: %lld\n", lora.trainable);
  std::printf("threads: %d\n", threads);
  return 0;
}
