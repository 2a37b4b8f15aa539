// Memory at scale (docs/distributed.md, "Memory"), side by side in one run: activation
// checkpointing's peak activation memory and step time against the plain pass, and the
// per-rank optimizer state and step time of each dist.sharding mode on --ranks Gloo ranks.
//
// One training forward + backward of a >= 50M-parameter Qwen2-shaped model (random weights,
// float32) on one packed row of --tokens tokens (--seqs sequences), the loss through the
// trainer's chunked log-probs (never full logits). Each variant runs in its own process (this
// program re-executed with --variant), so its peak resident set is its own: gradients are
// allocated by a warm-up pass first, then the peak RSS growth over the timed passes is the
// activations (and the transient buffers of backward). Prints
//   activation_ckpt_memory_ratio   peak activation memory without / with checkpointing
//   activation_ckpt_time_ratio     forward + backward time with / without
//
// Sharding: --ranks processes (this program again, one intra-op thread each) form a Gloo group
// on loopback and take training steps of the same model (forward, backward with the gradient
// reducer, clipping, AdamW) on --step-tokens tokens each, once per mode. Prints
//   zero1_optimizer_memory_ratio         per-rank AdamW state bytes, none / optimizer
//   zero3_param_memory_ratio             per-rank parameter bytes at rest (after a step), none / full,
//                                        read from the storages the parameters hold then
//   sharding_<mode>_step_time_ratio      a step's time in that mode / in none
//
//   grpo_bench_memory [--tokens 8192] [--seqs 8] [--layers 12] [--hidden 512] [--repeats 1] [--threads N]
//                     [--ranks 4] [--step-tokens 256] [--steps 3] [--skip-activations]
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.h"
#include "core/dist/gradient_reducer.h"
#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"
#include "core/dist/sharding.h"
#include "core/model/logprobs.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/runtime/threads.h"

namespace {

using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::seconds_since;
using grpo::core::CausalLM;

// Qwen2-shaped, tied embeddings: 12 layers x 3.1M + 32000 x 512 = 54.2M parameters.
grpo::core::ModelConfig bench_model(std::int64_t layers, std::int64_t hidden) {
  grpo::core::ModelConfig c;
  c.architecture = grpo::core::ModelArchitecture::Qwen2;
  c.vocab_size = 32000;
  c.hidden_size = hidden;
  c.intermediate_size = 3 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = hidden / 8;
  c.max_position_embeddings = 32768;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  return c;
}

struct Result {
  double step_s = 0, activation_mib = 0;
  long long parameters = 0;
};

// The child: one variant; prints "variant_result <seconds> <activation MiB> <parameters>".
int run_variant(bool checkpointing, const grpo::core::ModelConfig& config, std::int64_t tokens, std::int64_t seqs,
                std::int64_t repeats) {
  CausalLM model(config);
  model->init_weights(0.02, 1);
  model->train();
  model->set_gradient_checkpointing(checkpointing);
  long long parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  const torch::Tensor ids = torch::randint(config.vocab_size, {1, tokens}, torch::Generator(at::detail::createCPUGenerator(2)));
  const torch::Tensor targets = ids.roll(-1, 1);
  const auto layout = grpo::core::AttentionLayout::packed(std::vector<std::int64_t>(seqs, tokens / seqs));
  grpo::core::LogProbOptions lp;
  lp.chunk_tokens = 1024;
  auto pass = [&] {
    const auto t0 = Clock::now();
    const torch::Tensor h = model->hidden_states(ids, layout);
    const auto r = grpo::core::token_logprobs(h, model->lm_head_weight(), targets, lp);
    (-r.logprobs.mean()).backward();
    return seconds_since(t0);
  };
  std::fprintf(stderr, "  checkpointing %s: warm-up ...", checkpointing ? "on " : "off");
  std::fprintf(stderr, " %.1f s; timed:", pass());  // allocates the gradients
  const double before = grpo::bench::current_rss_mib();
  grpo::bench::reset_peak_rss();
  std::vector<double> times;
  for (std::int64_t i = 0; i < repeats; ++i) {
    times.push_back(pass());
    std::fprintf(stderr, " %.1f s", times.back());
  }
  std::fprintf(stderr, "\n");
  std::printf("variant_result %.4f %.1f %lld\n", grpo::bench::median(times), grpo::bench::peak_rss_mib() - before,
              parameters);
  return 0;
}

Result spawn_variant(const std::string& args, const char* variant) {
  const std::string line = grpo::bench::run_variant_process(args, variant);
  Result r;
  if (std::sscanf(line.c_str(), "variant_result %lf %lf %lld", &r.step_s, &r.activation_mib, &r.parameters) != 3) {
    std::fprintf(stderr, "variant %s: unreadable result '%s'\n", variant, line.c_str());
    std::exit(1);
  }
  return r;
}

// ---- dist.sharding ----------------------------------------------------------------------------

struct ShardResult {
  double step_s = 0;
  long long state_bytes = 0;
  long long param_bytes = 0;
};

// The bytes of parameter values a rank holds: the storages its parameters view (each once; a
// full-sharded unit's storage is 0 bytes between uses), plus its shard under dist.sharding full.
long long parameter_bytes(const std::vector<at::Tensor>& params, const grpo::core::dist::ShardedParameters* sharded) {
  std::set<const void*> seen;
  long long bytes = 0;
  for (const auto& p : params)
    if (seen.insert(p.storage().unsafeGetStorageImpl()).second) bytes += static_cast<long long>(p.storage().nbytes());
  if (sharded) bytes += static_cast<long long>(sharded->shard().nbytes());
  return bytes;
}

// One rank of a sharding run; rank 0 prints "shard_result <median step s> <state bytes> <parameter bytes at rest>".
int run_shard_rank(const std::string& mode_name, int rank, int world, int port, const grpo::core::ModelConfig& config,
                   std::int64_t tokens, std::int64_t steps) {
  namespace dist = grpo::core::dist;
  at::set_num_threads(1);  // the ranks share the machine's cores
  dist::WorldInfo w;
  w.rank = w.local_rank = rank;
  w.world_size = w.local_world_size = world;
  w.master_port = port;
  dist::DistOptions options;
  options.backend = "gloo";
  options.timeout_s = 1200;
  dist::Distributed d(w, options, false);
  CausalLM model(config);
  model->init_weights(0.02, 1);  // the same weights on every rank
  model->train();
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& kv : model->named_parameters()) {
    names.push_back(kv.key());
    params.push_back(kv.value());
  }
  grpo::core::OptimizerSettings settings;
  settings.learning_rate = 1e-5;
  const dist::Sharding mode = *dist::parse_sharding(mode_name);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  dist::ShardedAdamW* sharded = nullptr;
  if (mode == dist::Sharding::kNone) {
    optimizer = grpo::core::make_adamw(params, settings);
  } else {
    const auto units = dist::decoder_units(names);
    auto s = std::make_unique<dist::ShardedAdamW>(params, units, settings, d.train(), mode,
                                                  dist::decoder_unit_layers(units.size()));
    sharded = s.get();
    optimizer = std::move(s);
    if (mode == dist::Sharding::kFull) {  // as the trainer: the model gathers its layers as it goes
      model->set_parameter_residency(sharded->parameters());
      sharded->parameters()->free_all();
    }
  }
  std::unique_ptr<dist::GradientReducer> reducer;
  if (mode == dist::Sharding::kGradients || mode == dist::Sharding::kFull)
    reducer = std::make_unique<dist::GradientReducer>(params, d.train(), sharded->layout(), sharded->grad_shard());
  else
    reducer = std::make_unique<dist::GradientReducer>(params, d.train(), std::int64_t{25} << 20);
  const torch::Tensor ids =
      torch::randint(config.vocab_size, {1, tokens}, torch::Generator(at::detail::createCPUGenerator(100 + rank)));
  const torch::Tensor targets = ids.roll(-1, 1);
  const auto layout = grpo::core::AttentionLayout::packed({tokens});
  auto step = [&] {
    const auto t0 = Clock::now();
    reducer->arm();
    const torch::Tensor h = model->hidden_states(ids, layout);
    (-grpo::core::token_logprobs(h, model->lm_head_weight(), targets).logprobs.mean()).backward();
    reducer->finish();
    grpo::core::clip_grad_norm(*optimizer, 1.0);
    optimizer->step();
    optimizer->zero_grad();
    model->zero_grad(/*set_to_none=*/true);
    d.train().barrier("step end");
    return seconds_since(t0);
  };
  step();  // warm-up: allocates the AdamW state
  std::vector<double> times;
  for (std::int64_t i = 0; i < steps; ++i) times.push_back(step());
  if (rank == 0)
    std::printf("shard_result %.4f %lld %lld\n", grpo::bench::median(times),
                static_cast<long long>(dist::optimizer_state_bytes(*optimizer)),
                parameter_bytes(params, sharded ? sharded->parameters().get() : nullptr));
  return 0;
}

// Starts `world` ranks of this program for one mode; rank 0's result.
ShardResult spawn_shard_run(const std::string& args, const std::string& mode, int world) {
  const int port = grpo::core::dist::pick_free_port();
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string command;
  for (int r = world - 1; r >= 0; --r) {
    const std::string rank_command = self + " " + args + " --shard-mode " + mode + " --rank " + std::to_string(r) +
                                     " --port " + std::to_string(port);
    command += r == 0 ? rank_command + "; s=$?; wait; exit $s" : rank_command + " >/dev/null & ";
  }
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) std::exit(1);
  ShardResult r;
  bool found = false;
  char line[512];
  while (std::fgets(line, sizeof line, pipe))
    if (std::sscanf(line, "shard_result %lf %lld %lld", &r.step_s, &r.state_bytes, &r.param_bytes) == 3) found = true;
  const int status = ::pclose(pipe);
  if (!found || status != 0) {
    std::fprintf(stderr, "dist.sharding %s on %d ranks failed (status %d)\n", mode.c_str(), world, status);
    std::exit(1);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t tokens = arg(argc, argv, "--tokens", 8192);
  const std::int64_t seqs = arg(argc, argv, "--seqs", 8);
  const std::int64_t layers = arg(argc, argv, "--layers", 12);
  const std::int64_t hidden = arg(argc, argv, "--hidden", 512);
  const std::int64_t repeats = arg(argc, argv, "--repeats", 1);
  const std::int64_t threads_flag = arg(argc, argv, "--threads", 0);
  const char* variant = flag(argc, argv, "--variant");
  const std::int64_t ranks = arg(argc, argv, "--ranks", 4);
  const std::int64_t step_tokens = arg(argc, argv, "--step-tokens", 256);
  const std::int64_t steps = arg(argc, argv, "--steps", 3);
  const char* shard_mode = flag(argc, argv, "--shard-mode");
  if (tokens < 2 || seqs < 1 || tokens % seqs != 0 || layers < 1 || hidden < 64 || hidden % 64 != 0 || repeats < 1 ||
      threads_flag < 0) {
    std::fprintf(stderr, "bad arguments: --tokens a multiple of --seqs; --layers, --repeats >= 1; --hidden a multiple of 64\n");
    return 2;
  }
  const grpo::core::ModelConfig config = bench_model(layers, hidden);
  if (shard_mode)
    return run_shard_rank(shard_mode, static_cast<int>(arg(argc, argv, "--rank", 0)), static_cast<int>(ranks),
                          static_cast<int>(arg(argc, argv, "--port", 0)), config, step_tokens, steps);
  if (ranks < 2 || step_tokens < 2 || steps < 1) {
    std::fprintf(stderr, "bad arguments: --ranks >= 2, --step-tokens >= 2, --steps >= 1\n");
    return 2;
  }
  const int threads = grpo::bench::choose_threads(threads_flag, "grpo_bench_memory");
  if (variant) return run_variant(std::string(variant) == "on", config, tokens, seqs, repeats);

  const bool activations = !grpo::bench::has_flag(argc, argv, "--skip-activations");
  std::printf("memory at scale: activation checkpointing and dist.sharding\n");
  std::printf("cpu: %s; LibTorch intra-op threads %d; available cores %d\n", grpo::bench::cpu_model_name().c_str(),
              at::get_num_threads(), grpo::core::available_cores());
  std::printf("model: Qwen2-shaped, hidden %lld, %lld layers, vocab %lld, random weights, float32\n",
              static_cast<long long>(hidden), static_cast<long long>(layers), static_cast<long long>(config.vocab_size));
  if (activations)
    std::printf("activation checkpointing: one training forward + backward without and with, on one packed row of "
                "%lld tokens (%lld sequences of %lld); loss through chunked log-probs; each variant in its own process, "
                "1 warm-up + %lld timed pass(es) (median)\n",
              static_cast<long long>(tokens), static_cast<long long>(seqs), static_cast<long long>(tokens / seqs),
              static_cast<long long>(repeats));
  std::fflush(stdout);
  std::ostringstream args;
  args << "--tokens " << tokens << " --seqs " << seqs << " --layers " << layers << " --hidden " << hidden << " --repeats "
       << repeats << " --threads " << threads;
  const auto t0 = Clock::now();
  Result off, on;
  if (activations) {
    off = spawn_variant(args.str(), "off");
    on = spawn_variant(args.str(), "on");
    std::printf("\n  %-16s %10s %18s\n", "", "fwd+bwd s", "activations MiB");
    std::printf("  %-16s %10.2f %18.0f\n", "plain", off.step_s, off.activation_mib);
    std::printf("  %-16s %10.2f %18.0f\n", "checkpointed", on.step_s, on.activation_mib);
    std::printf("parameters: %lld\n\n", on.parameters);
  }

  std::printf("dist.sharding on %lld Gloo ranks over loopback (1 intra-op thread each), %lld tokens per rank and "
              "step, 1 warm-up + %lld timed steps (median of rank 0)\n",
              static_cast<long long>(ranks), static_cast<long long>(step_tokens), static_cast<long long>(steps));
  std::fflush(stdout);
  std::ostringstream shard_args;
  shard_args << "--layers " << layers << " --hidden " << hidden << " --ranks " << ranks << " --step-tokens " << step_tokens
             << " --steps " << steps;
  std::vector<std::pair<std::string, ShardResult>> modes;
  for (const char* mode : {"none", "optimizer", "gradients", "full"})
    modes.emplace_back(mode, spawn_shard_run(shard_args.str(), mode, static_cast<int>(ranks)));
  std::printf("\n  %-12s %10s %22s %26s\n", "sharding", "step s", "AdamW state MiB/rank", "parameters at rest MiB/rank");
  for (const auto& [mode, r] : modes)
    std::printf("  %-12s %10.2f %22.1f %26.1f\n", mode.c_str(), r.step_s, r.state_bytes / 1048576.0, r.param_bytes / 1048576.0);
  std::printf("total benchmark time: %.1f s\n", seconds_since(t0));
  if (on.activation_mib > 0) {
    std::printf("activation_ckpt_memory_ratio: %.2f\n", off.activation_mib / on.activation_mib);
    std::printf("activation_ckpt_time_ratio: %.3f\n", off.step_s > 0 ? on.step_s / off.step_s : 0.0);
  }
  const ShardResult& none = modes[0].second;
  std::printf("zero1_optimizer_memory_ratio: %.2f\n",
              modes[1].second.state_bytes > 0 ? static_cast<double>(none.state_bytes) / modes[1].second.state_bytes : 0.0);
  std::printf("zero3_param_memory_ratio: %.2f\n",
              modes[3].second.param_bytes > 0 ? static_cast<double>(none.param_bytes) / modes[3].second.param_bytes : 0.0);
  for (std::size_t i = 1; i < modes.size(); ++i)
    std::printf("sharding_%s_step_time_ratio: %.3f\n", modes[i].first.c_str(),
                none.step_s > 0 ? modes[i].second.step_s / none.step_s : 0.0);
  return 0;
}
