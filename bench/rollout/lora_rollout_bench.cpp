// How the rollout engine should serve a LoRA policy (docs/lora.md, "Rollouts"): merged weights
// refreshed at each weight sync, or the base weights with the adapters' matmuls run unmerged.
// Side by side in one run, on the same prompts, greedy with ignore_eos:
//
//   merged    the engine's model holds W + scaling B A for every adapted weight (what the
//             trainer's weight sync sends: LoraAdapters::merged_weights); its cost is the
//             merge (B A for every adapted weight) and the bytes of the merged weights at
//             each sync;
//   unmerged  the engine's model holds the base weights with the adapters attached, so every
//             adapted projection runs two extra skinny matmuls per token; its sync would send
//             the adapters only.
//
// The adapters are r = --rank on all-linear with random, non-zero A and B (a trained adapter's
// cost, not B = 0's). Model: Qwen2.5-0.5B's shape (bench/configs/qwen2.5-0.5b), random weights,
// float32, CPU.
//
// The output ends with `name: value` lines: decode_tokens_per_s_merged,
// decode_tokens_per_s_unmerged, lora_unmerged_decode_slowdown (merged / unmerged decode rate),
// merge_seconds (one merged_weights() call), sync_mb_merged, sync_mb_unmerged,
// merge_share_of_rollout (merge seconds / the merged rollout's seconds), tokens_match (1 when
// both produce the same greedy tokens), threads.
//
//   grpo_bench_rollout_lora [--config PATH] [--prompts 32] [--new-tokens 32] [--prompt-len 64]
//                           [--rank 16] [--threads N] [--seed 0]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/lora.h"
#include "core/model/transformer.h"
#include "core/runtime/threads.h"
#include "plugins/backends/native/engine.h"

namespace {

using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::seconds_since;

struct Rollout {
  double seconds = 0, decode_tokens_per_s = 0;
  std::vector<std::vector<std::int64_t>> tokens;
};

Rollout generate(grpo::native::Engine& engine, const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t new_tokens) {
  std::vector<grpo::sdk::GenerationRequest> requests(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    requests[i].id = std::to_string(i);
    requests[i].prompt_ids = prompts[i];
    requests[i].sampling.temperature = 0.0;
    requests[i].sampling.max_new_tokens = new_tokens;
  }
  const auto t0 = Clock::now();
  auto results = engine.generate(requests);
  Rollout r;
  r.seconds = seconds_since(t0);
  const auto& s = engine.last_stats();
  r.decode_tokens_per_s = s.decode_s > 0 ? static_cast<double>(s.decode_tokens) / s.decode_s : 0.0;
  for (auto& res : results) {
    if (!res.status.is_ok()) {
      std::fprintf(stderr, "request %s failed: %s\n", res.request_id.c_str(), res.status.message().c_str());
      std::exit(1);
    }
    r.tokens.push_back(res.samples.at(0).token_ids);
  }
  return r;
}

double mib(const std::vector<torch::Tensor>& ts) {
  double bytes = 0;
  for (const auto& t : ts) bytes += static_cast<double>(t.nbytes());
  return bytes / (1024.0 * 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  const char* config_flag = flag(argc, argv, "--config");
  const std::string config_path = config_flag ? config_flag : grpo::bench::qwen05b_config_path();
  const std::int64_t n_prompts = arg(argc, argv, "--prompts", 32);
  const std::int64_t new_tokens = arg(argc, argv, "--new-tokens", 32);
  const std::int64_t prompt_len = arg(argc, argv, "--prompt-len", 64);
  const std::int64_t rank = arg(argc, argv, "--rank", 16);
  const std::int64_t threads_flag = arg(argc, argv, "--threads", 0);
  const auto seed = static_cast<std::uint64_t>(arg(argc, argv, "--seed", 0));
  if (n_prompts < 1 || new_tokens < 2 || prompt_len < 1 || rank < 1 || threads_flag < 0) {
    std::fprintf(stderr, "bad arguments: counts >= 1, --new-tokens >= 2\n");
    return 2;
  }
  const grpo::core::ModelConfig config = grpo::core::load_model_config(config_path);
  int threads = static_cast<int>(threads_flag);
  if (threads > 0)
    at::set_num_threads(threads);
  else
    threads = grpo::core::configure_compute_threads("grpo_bench_rollout_lora");
  std::printf("LoRA rollouts: merged weights vs unmerged adapter matmuls\n");
  std::printf("cpu: %s; LibTorch intra-op threads %d\n", grpo::bench::cpu_model_name().c_str(), at::get_num_threads());
  std::printf("model: %s, random weights, float32; LoRA r %lld all-linear, random A and B; %lld prompts x %lld tokens, "
              "%lld new tokens each, greedy, ignore_eos\n",
              config_path.c_str(), static_cast<long long>(rank), static_cast<long long>(n_prompts),
              static_cast<long long>(prompt_len), static_cast<long long>(new_tokens));
  std::fflush(stdout);

  torch::NoGradGuard no_grad;
  grpo::core::CausalLM model(config);
  model->init_weights(0.02, seed);
  model->eval();
  grpo::core::LoraSettings s;
  s.r = rank;
  s.lora_alpha = static_cast<double>(2 * rank);
  s.target_modules = {"all-linear"};
  grpo::core::LoraAdapters lora(model, s, seed);
  {
    torch::manual_seed(static_cast<std::uint64_t>(seed) + 7);
    for (auto& p : lora.parameters()) p.normal_(0.0, 0.01);  // a trained adapter: B != 0
  }
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<std::int64_t> tok(0, config.vocab_size - 1);
  std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(n_prompts), std::vector<std::int64_t>(static_cast<std::size_t>(prompt_len)));
  for (auto& p : prompts)
    for (auto& x : p) x = tok(rng);

  grpo::native::EngineOptions options;
  options.max_num_seqs = n_prompts;
  options.ignore_eos = true;

  // Unmerged: the model as it is, adapters attached.
  grpo::native::Engine unmerged_engine(model, std::nullopt, {}, options);
  generate(unmerged_engine, {prompts.front()}, 2);  // warm-up
  const Rollout unmerged = generate(unmerged_engine, prompts, new_tokens);

  // Merged: a second model holding the merged weights (the engine's own copy, as the native
  // backend's), timed merge included.
  const auto m0 = Clock::now();
  const auto merged_weights = lora.merged_weights();
  const double merge_s = seconds_since(m0);
  grpo::core::CausalLM merged_model(config);
  merged_model->eval();
  {
    auto params = merged_model->named_parameters();
    for (const auto& p : model->named_parameters()) params[p.key()].copy_(p.value());
    for (const auto& [name, w] : merged_weights) params[name].copy_(w);
  }
  grpo::native::Engine merged_engine(merged_model, std::nullopt, {}, options);
  generate(merged_engine, {prompts.front()}, 2);  // warm-up
  const Rollout merged = generate(merged_engine, prompts, new_tokens);

  std::vector<torch::Tensor> merged_tensors, adapter_tensors = lora.parameters();
  for (const auto& [name, w] : merged_weights) merged_tensors.push_back(w);
  const bool match = merged.tokens == unmerged.tokens;
  std::printf("\n  %-9s %12s %16s\n", "", "rollout s", "decode tok/s");
  std::printf("  %-9s %12.2f %16.1f\n", "merged", merged.seconds, merged.decode_tokens_per_s);
  std::printf("  %-9s %12.2f %16.1f\n", "unmerged", unmerged.seconds, unmerged.decode_tokens_per_s);
  std::printf("  merge (merged_weights): %.3f s; a sync sends %.1f MiB merged or %.1f MiB of adapters\n", merge_s,
              mib(merged_tensors), mib(adapter_tensors));
  std::printf("decode_tokens_per_s_merged: %.1f\n", merged.decode_tokens_per_s);
  std::printf("decode_tokens_per_s_unmerged: %.1f\n", unmerged.decode_tokens_per_s);
  std::printf("lora_unmerged_decode_slowdown: %.3f\n",
              unmerged.decode_tokens_per_s > 0 ? merged.decode_tokens_per_s / unmerged.decode_tokens_per_s : 0.0);
  std::printf("merge_seconds: %.3f\n", merge_s);
  std::printf("sync_mb_merged: %.1f\n", mib(merged_tensors));
  std::printf("sync_mb_unmerged: %.1f\n", mib(adapter_tensors));
  std::printf("merge_share_of_rollout: %.4f\n", merged.seconds > 0 ? merge_s / merged.seconds : 0.0);
  std::printf("tokens_match: %d\n", match ? 1 : 0);
  std::printf("threads: %d\n", threads);
  return 0;
}
