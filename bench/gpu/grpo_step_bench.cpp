// One GRPO step of our runtime on one device, the C++ half of bench/gpu/run.sh (the other half,
// hf_grpo_step.py, runs what TRL's GRPOTrainer does without vLLM on the same device, shapes and
// seeds, so that the two can be compared line by line). Over 500 lines as one file on purpose:
// its flags, the workload hf_grpo_step.py reproduces, the trainer's pieces and the report are
// read side by side with the Python half.
//
// Why it is built this way:
//   - The step is the trainer's, piece by piece, not a re-implementation: a weight sync as the
//     trainer does it under bf16-mixed with a colocated native engine (weight_snapshot to bf16,
//     one cast per step, which the engine aliases with set_data as the `native` backend's
//     update_weights does in `share` mode), generation through grpo::native::Engine (the engine
//     behind the `native` rollout backend: continuous batching over a bf16 slot KV cache), then
//     core::update_policy (the trainer's policy update: packing, chunked float32 log-probs under
//     ComputePrecisionScope(bf16-mixed), the GRPO loss, token-mean aggregation, clipping at 1.0,
//     AdamW on float32 master weights). The loss is the exact ppo_clip of
//     libgrpo_policy_losses.so: its source is compiled into this program and constructed
//     through its plugin entry point, so the binary needs no plugin folder on the GPU machine.
//   - The rollout backend plugin and the verifiers are the only parts left out: the engine is
//     driven directly (as bench/rollout does; the plugin is a thin wrapper around it), and
//     rewards are random (fixed seed) with the `grpo` advantage estimator's formula inline:
//     (r - group mean) / (unbiased group std + 1e-6). Neither costs measurable time.
//   - Shapes are TRL's usual ones: P prompts x G samples, exactly N new tokens (ignore_eos),
//     temperature T, top_p 1, no top_k. Prompts are random ids of varied length from
//     splitmix64, which hf_grpo_step.py reproduces bit for bit, so both sides see the same prompts.
//   - Micro-batches of --micro-batch sequences: pack_length is the longest possible sequence
//     (max prompt + N), so every packed row holds one sequence, and rows_per_micro_batch =
//     --micro-batch makes one packed forward of that many sequences (no padding).
//   - Timing: the device is synchronized (torch::cuda::synchronize) before every clock read. A
//     warm-up step (allocator, cuBLAS handles, the KV cache) comes first, then --repeats timed
//     steps; medians are reported. Decode tokens/s = generated tokens / wall time of the
//     generate() call (prefill included, as transformers' generate is timed); training tokens/s
//     = prompt + completion tokens / wall time of update_policy; the step = sync + generate +
//     advantages + update.
//
// The output ends with `name: value` lines that run.sh reads: gpu_decode_tokens_per_s,
// gpu_train_tokens_per_s, gpu_step_s, gpu_params, gpu_decode_steps_per_s (decode steps /
// decode-only seconds, from the engine's stats), gpu_decode_bytes_per_step (bf16 weights + the
// KV cache read at the mean context, for the whole batch), gpu_decode_tokens_per_s_dynamic (the
// same generate() with dynamic decode steps, no CUDA graphs, side by side) and
// gpu_cuda_graph_replays (decode steps of the last timed step that replayed a graph).
//
//
// --profile FILE profiles the update_policy of one more step after the timed ones with LibTorch's profiler (Kineto:
// CPU ops, CUDA runtime calls and kernels; LibTorch 2.x), writes its Chrome trace to FILE and
// prints where the time went: the kernels' share of the wall time (a low share means the host,
// not the device, sets the pace), the kernels and the host-side calls that took longest.
//
//   grpo_bench_gpu_step [--device cuda|cuda:N|cpu] [--config config.json] [--prompts 8]
//                       [--samples 4] [--new-tokens 256] [--min-prompt 32] [--max-prompt 128]
//                       [--micro-batch 8] [--temperature 0.7] [--lr 1e-6] [--repeats 3]
//                       [--seed 0] [--threads N] [--logprob-chunk 1024] [--profile trace.json]
// (--logprob-chunk: tokens per chunk of the chunked log-probs, train.logprob_chunk_tokens)
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/gpu/step_profiler.h"
#include "core/model/model_config.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/train/policy_update.h"
#include "core/train/rollout_batch.h"
#include "core/train/rollout_worker.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "plugins/backends/native/engine.h"

// policy_losses.cpp, compiled into this program (bench/gpu/CMakeLists.txt).
extern "C" const grpo::sdk::PluginManifest* grpo_plugin_entry_v1();

namespace {

using grpo::bench::Clock;
using grpo::bench::median;
using grpo::bench::seconds_since;

// ---- flags -------------------------------------------------------------------------------

struct Options {
  std::string device = "cuda", config, profile;
  std::int64_t prompts = 8, samples = 4, new_tokens = 256, min_prompt = 32, max_prompt = 128, micro_batch = 8;
  std::int64_t repeats = 3, seed = 0, threads = 0, logprob_chunk = grpo::core::UpdateOptions{}.logprob_chunk_tokens;
  double temperature = 0.7, lr = 1e-6;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "grpo_bench_gpu_step: %s\n", message.c_str());
  std::exit(2);
}

std::int64_t parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') usage_error(flag + " expects an integer, got '" + text + "'");
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v)) usage_error(flag + " expects a number, got '" + text + "'");
  return v;
}

Options parse_options(int argc, char** argv) {
  Options o;
  o.config = grpo::bench::qwen05b_config_path();
  const std::map<std::string, std::int64_t*> ints = {
      {"--prompts", &o.prompts},       {"--samples", &o.samples},       {"--new-tokens", &o.new_tokens},
      {"--min-prompt", &o.min_prompt}, {"--max-prompt", &o.max_prompt}, {"--micro-batch", &o.micro_batch},
      {"--repeats", &o.repeats},       {"--seed", &o.seed},             {"--threads", &o.threads},
      {"--logprob-chunk", &o.logprob_chunk}};
  const std::map<std::string, double*> doubles = {{"--temperature", &o.temperature}, {"--lr", &o.lr}};
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (i + 1 >= argc) usage_error(name + " needs a value");
    const std::string value = argv[i + 1];
    if (name == "--device") o.device = value;
    else if (name == "--config") o.config = value;
    else if (name == "--profile") o.profile = value;
    else if (ints.count(name)) *ints.at(name) = parse_int(name, value);
    else if (doubles.count(name)) *doubles.at(name) = parse_double(name, value);
    else usage_error("unknown flag '" + name + "' (see the comment at the top of bench/gpu/grpo_step_bench.cpp)");
  }
  auto at_least = [](const char* flag, std::int64_t v, std::int64_t min) {
    if (v < min) usage_error(std::string(flag) + " must be >= " + std::to_string(min) + ", got " + std::to_string(v));
  };
  at_least("--prompts", o.prompts, 1);
  at_least("--samples", o.samples, 2);  // a group of one has no advantage
  at_least("--new-tokens", o.new_tokens, 1);
  at_least("--min-prompt", o.min_prompt, 1);
  at_least("--max-prompt", o.max_prompt, o.min_prompt);
  at_least("--micro-batch", o.micro_batch, 1);
  at_least("--repeats", o.repeats, 1);
  at_least("--seed", o.seed, 0);
  at_least("--threads", o.threads, 0);
  at_least("--logprob-chunk", o.logprob_chunk, 1);
  if (!(o.temperature > 0.0)) usage_error("--temperature must be > 0 (the benchmark samples)");
  if (!(o.lr > 0.0)) usage_error("--lr must be > 0");
#if TORCH_VERSION_MAJOR < 2
  if (!o.profile.empty()) usage_error("--profile needs LibTorch 2.x (Kineto's C++ API); this build has " TORCH_VERSION);
#endif
  return o;
}

torch::Device parse_device(const std::string& name) {
  std::optional<torch::Device> device;
  try {
    device = torch::Device(name);
  } catch (const std::exception&) {
    usage_error("--device expects cpu, cuda or cuda:N, got '" + name + "'");
  }
  if (!device->is_cpu() && !device->is_cuda()) usage_error("--device expects cpu, cuda or cuda:N, got '" + name + "'");
  if (device->is_cuda()) {
    if (!torch::cuda::is_available())
      usage_error("--device " + name + ": no CUDA device (a CPU-only LibTorch build, or no GPU visible)");
    if (device->has_index() && device->index() >= static_cast<int>(torch::cuda::device_count()))
      usage_error("--device " + name + ": only " + std::to_string(torch::cuda::device_count()) + " GPU(s) visible");
  }
  return *device;
}

// ---- the workload (hf_grpo_step.py draws the same numbers) --------------------------------

// splitmix64: trivially reproducible in Python, unlike std:: distributions.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

std::vector<std::vector<std::int64_t>> make_prompts(const Options& o, std::int64_t vocab) {
  SplitMix64 rng{static_cast<std::uint64_t>(o.seed)};
  const auto span = static_cast<std::uint64_t>(o.max_prompt - o.min_prompt + 1);
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(o.prompts));
  for (auto& p : out) {
    p.resize(static_cast<std::size_t>(o.min_prompt + static_cast<std::int64_t>(rng.next() % span)));
    for (auto& t : p) t = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(vocab));
  }
  return out;
}

// The rewards of step `step` (one per sample, group after group) and the `grpo` estimator's
// advantages: (r - group mean) / (unbiased group std + 1e-6).
std::vector<double> grpo_advantages(const Options& o, std::int64_t step) {
  SplitMix64 rng{static_cast<std::uint64_t>(o.seed) * 1000003ull + static_cast<std::uint64_t>(step) + 1};
  std::vector<double> adv(static_cast<std::size_t>(o.prompts * o.samples));
  for (std::int64_t g = 0; g < o.prompts; ++g) {
    double* r = adv.data() + g * o.samples;
    double mean = 0.0, ss = 0.0;
    for (std::int64_t j = 0; j < o.samples; ++j) mean += (r[j] = rng.uniform());
    mean /= static_cast<double>(o.samples);
    for (std::int64_t j = 0; j < o.samples; ++j) ss += (r[j] - mean) * (r[j] - mean);
    const double sd = std::sqrt(ss / static_cast<double>(o.samples - 1));
    for (std::int64_t j = 0; j < o.samples; ++j) r[j] = (r[j] - mean) / (sd + 1e-6);
  }
  return adv;
}

// ---- the trainer's pieces -------------------------------------------------------------------

// The host side of a plugin's registration, for the one plugin linked into this program.
class LinkedRegistrar final : public grpo::sdk::Registrar {
 public:
  const grpo::sdk::HostInfo& host() const override { return host_; }
  void add_component(const grpo::sdk::ComponentDescriptor& d) override {
    if (d.kind == grpo::sdk::ComponentKind::kPolicyLoss) found_[d.name] = d;
  }
  void report_error(const char* message) override { error_ = message; }
  std::map<std::string, grpo::sdk::ComponentDescriptor> found_;
  std::string error_;

 private:
  grpo::sdk::HostInfo host_;
};

// The policy loss `name` with its defaults, constructed as PluginRegistry constructs it.
std::shared_ptr<grpo::sdk::PolicyLoss> linked_policy_loss(const std::string& name) {
  LinkedRegistrar registrar;
  grpo_plugin_entry_v1()->register_components(registrar);
  if (!registrar.error_.empty()) throw std::runtime_error("policy_losses registration: " + registrar.error_);
  const auto it = registrar.found_.find(name);
  if (it == registrar.found_.end()) throw std::runtime_error("policy_losses has no '" + name + "'");
  std::shared_ptr<void> object;
  const grpo::sdk::ConfigView defaults(nullptr, "algorithm.policy_loss");
  const grpo::sdk::Status status = it->second.invoke(it->second.user_factory, defaults, &object);
  if (!status.is_ok()) throw std::runtime_error("algorithm.policy_loss " + name + ": " + status.message());
  return std::static_pointer_cast<grpo::sdk::PolicyLoss>(object);
}

void device_sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

// The engine's parameters become aliases of the snapshot's tensors (`weight_sync: share`).
void alias_weights(grpo::core::CausalLM& engine_model, const grpo::sdk::NamedTensors& snapshot) {
  torch::NoGradGuard no_grad;
  std::map<std::string, const at::Tensor*> given;
  for (const auto& [name, tensor] : snapshot) given[name] = &tensor;
  for (auto& p : engine_model->named_parameters()) {
    const auto it = given.find(p.key());
    if (it == given.end()) throw std::runtime_error("weight sync: no snapshot tensor for '" + p.key() + "'");
    p.value().set_data(it->second->detach());
  }
}

struct Bench {
  Options o;
  torch::Device device{torch::kCPU};
  grpo::core::ModelConfig config;
  grpo::core::CausalLM policy{nullptr}, engine_model{nullptr};
  std::unique_ptr<grpo::native::Engine> engine;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::shared_ptr<grpo::sdk::PolicyLoss> loss;
  grpo::core::UpdateOptions update;
  std::vector<std::vector<std::int64_t>> prompts;
};

struct StepFigures {
  double sync_s = 0, generate_s = 0, update_s = 0, step_s = 0;
  grpo::native::EngineStats stats;
  std::int64_t generated = 0, train_tokens = 0;
  double loss = 0, grad_norm = 0, micro_batches = 0;
};

double metric(const grpo::core::UpdateResult& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  return 0.0;
}

// The generate() requests of step `step`: every prompt, G samples each, seeded per step.
std::vector<grpo::sdk::GenerationRequest> step_requests(const Bench& b, std::int64_t step) {
  std::vector<grpo::sdk::GenerationRequest> requests(b.prompts.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.id = std::to_string(i);
    r.prompt_ids = b.prompts[i];
    r.n = b.o.samples;
    r.sampling.temperature = b.o.temperature;
    r.sampling.top_p = 1.0;
    r.sampling.top_k = -1;
    r.sampling.max_new_tokens = b.o.new_tokens;
    r.seed = static_cast<std::uint64_t>(b.o.seed) * 1000003ull + static_cast<std::uint64_t>(step) * b.prompts.size() + i;
  }
  return requests;
}

// Tokens/s of generate() with dynamic decode steps (no CUDA graphs: each step sized to its
// batch, the engine as it was before them) on the engine's current weights, timed after a
// warm-up call: the side-by-side figure for the graphs of the timed steps.
double dynamic_decode_tokens_per_s(const Bench& b) {
  grpo::native::EngineOptions options = b.engine->options();
  options.decode_steps = grpo::native::DecodeSteps::kDynamic;
  grpo::native::Engine dynamic(b.engine_model, std::nullopt, std::vector<std::int64_t>{}, options);
  dynamic.generate(step_requests(b, 0));
  device_sync(b.device);
  const auto t = Clock::now();
  const auto results = dynamic.generate(step_requests(b, 1));
  device_sync(b.device);
  const double seconds = seconds_since(t);
  std::int64_t generated = 0;
  for (const auto& r : results)
    for (const auto& s : r.samples) generated += static_cast<std::int64_t>(s.token_ids.size());
  return static_cast<double>(generated) / seconds;
}

StepFigures grpo_step(Bench& b, std::int64_t step, bool profile) {
  StepFigures f;
  device_sync(b.device);
  const auto t_step = Clock::now();

  auto t = Clock::now();
  alias_weights(b.engine_model, grpo::core::weight_snapshot(b.policy, torch::kBFloat16));
  device_sync(b.device);
  f.sync_s = seconds_since(t);

  const std::vector<grpo::sdk::GenerationRequest> requests = step_requests(b, step);
  t = Clock::now();
  std::vector<grpo::sdk::GenerationResult> results = b.engine->generate(requests);
  device_sync(b.device);
  f.generate_s = seconds_since(t);
  f.stats = b.engine->last_stats();

  const std::vector<double> adv = grpo_advantages(b.o, step);
  std::vector<grpo::core::Group> groups(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto& res = results[i];
    if (!res.status.is_ok() || static_cast<std::int64_t>(res.samples.size()) != b.o.samples)
      throw std::runtime_error("request " + res.request_id + " failed: " + res.status.message());
    groups[i].prompt_ids = b.prompts[i];
    for (std::size_t j = 0; j < res.samples.size(); ++j) {
      auto& gen = res.samples[j];
      if (static_cast<std::int64_t>(gen.token_ids.size()) != b.o.new_tokens)
        throw std::runtime_error("sample " + std::to_string(j) + " of request " + res.request_id + " has " +
                                 std::to_string(gen.token_ids.size()) + " tokens, expected " + std::to_string(b.o.new_tokens));
      grpo::core::Sample s;
      s.response_ids = std::move(gen.token_ids);
      s.rollout_logprobs = std::move(gen.logprobs);
      s.finished = gen.finish_reason == grpo::sdk::FinishReason::kStop;
      s.advantages.assign(s.response_ids.size(), static_cast<float>(adv[i * res.samples.size() + j]));
      f.generated += static_cast<std::int64_t>(s.response_ids.size());
      f.train_tokens += static_cast<std::int64_t>(b.prompts[i].size() + s.response_ids.size());
      groups[i].samples.push_back(std::move(s));
    }
  }

  grpo::core::UpdateComponents components;
  components.policy_loss = b.loss.get();
#if TORCH_VERSION_MAJOR >= 2
  std::optional<grpo::bench::StepProfiler> profiler;
  if (profile) profiler.emplace(b.device);
#endif
  t = Clock::now();
  const grpo::core::UpdateResult r = grpo::core::update_policy(b.policy, *b.optimizer, {}, groups, components, b.update);
  device_sync(b.device);
  f.update_s = seconds_since(t);
#if TORCH_VERSION_MAJOR >= 2
  if (profiler) profiler->finish(b.o.profile, f.update_s);
#else
  (void)profile;
#endif
  f.step_s = seconds_since(t_step);
  if (r.optimizer_steps != 1) throw std::runtime_error("the update made " + std::to_string(r.optimizer_steps) + " optimizer steps, expected 1");
  f.loss = metric(r, "loss/policy_avg");
  f.grad_norm = metric(r, "optimizer/grad_norm");
  f.micro_batches = metric(r, "train/micro_batches");
  return f;
}

// The policy, the engine with its own bf16 model, the optimizer, the loss and the update's
// options, as the trainer sets them up under bf16-mixed with a colocated native engine.
void set_up(Bench& b) {
  const Options& o = b.o;
  torch::manual_seed(static_cast<std::uint64_t>(o.seed));
  b.policy = grpo::core::CausalLM(b.config);
  b.policy->init_weights(0.02, static_cast<std::uint64_t>(o.seed));
  b.policy->to(b.device);
  b.policy->train();
  // The engine's own model: its parameters are replaced by the bf16 snapshot at every sync.
  b.engine_model = grpo::core::CausalLM(b.config);
  b.engine_model->to(torch::kBFloat16);
  b.engine_model->to(b.device);
  b.engine_model->eval();
  grpo::native::EngineOptions eo;
  eo.max_num_seqs = o.prompts * o.samples;
  eo.max_num_batched_tokens = std::max<std::int64_t>(2048, o.prompts * o.max_prompt);  // one prefill forward
  eo.ignore_eos = true;
  eo.logprobs_mode = grpo::native::LogprobsMode::kRaw;
  eo.seed = static_cast<std::uint64_t>(o.seed);
  b.engine = std::make_unique<grpo::native::Engine>(b.engine_model, std::nullopt, std::vector<std::int64_t>{}, eo);

  grpo::core::OptimizerSettings os;
  os.learning_rate = o.lr;
  os.weight_decay = 0.0;
  b.optimizer = grpo::core::make_adamw(*b.policy, os);
  b.loss = linked_policy_loss("ppo_clip");
  b.update.rows_per_micro_batch = o.micro_batch;
  b.update.pack_length = o.max_prompt + o.new_tokens;
  b.update.temperature = o.temperature;  // the trainer divides by the sampling temperature
  b.update.max_response_len = o.new_tokens;
  b.update.logprob_chunk_tokens = o.logprob_chunk;
  b.update.max_grad_norm = os.max_grad_norm;
  b.update.precision = grpo::core::Precision::kBf16Mixed;
  b.prompts = make_prompts(o, b.config.vocab_size);
}

// The timed steps' figures (medians are taken over these) and the last one's.
struct Timings {
  std::vector<double> step_s, generate_s, update_s, sync_s, decode_steps_per_s;
  StepFigures last;
};

// The warm-up, --repeats timed steps and, with --profile, one more step profiled and left out
// of the figures. Throws what a step threw.
Timings run_steps(Bench& b) {
  const Options& o = b.o;
  Timings t;
  const std::int64_t steps = o.repeats + (o.profile.empty() ? 0 : 1);
  for (std::int64_t i = 0; i <= steps; ++i) {
    const bool profiled = i > o.repeats;
    StepFigures f;
    try {
      f = grpo_step(b, i, profiled);
    } catch (const std::exception& e) {
      throw std::runtime_error("step " + std::to_string(i) + " failed: " + e.what());
    }
    const auto& s = f.stats;
    std::printf("  %s step: %.3f s = sync %.3f + generate %.3f (prefill %.3f, decode %lld steps in %.3f s) + update %.3f "
                "(%g micro-batches); loss %.4f, grad norm %.4f\n",
                i == 0 ? "warm-up" : profiled ? "profiled" : "timed  ", f.step_s, f.sync_s, f.generate_s, s.prefill_s,
                static_cast<long long>(s.decode_steps), s.decode_s, f.update_s, f.micro_batches, f.loss, f.grad_norm);
    std::fflush(stdout);
    if (i == 0 || profiled) continue;
    t.step_s.push_back(f.step_s);
    t.generate_s.push_back(f.generate_s);
    t.update_s.push_back(f.update_s);
    t.sync_s.push_back(f.sync_s);
    t.decode_steps_per_s.push_back(s.decode_s > 0 ? static_cast<double>(s.decode_steps) / s.decode_s : 0.0);
    t.last = f;
  }
  return t;
}

// The medians, the side-by-side dynamic decode figure and the `name: value` lines run.sh reads.
void report(const Bench& b, const Timings& t, std::int64_t params, std::int64_t prompt_tokens) {
  const Options& o = b.o;
  std::int64_t engine_bytes = 0;
  for (const auto& p : b.engine_model->parameters()) engine_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  const double mean_context = static_cast<double>(prompt_tokens) / static_cast<double>(o.prompts) + 0.5 * static_cast<double>(o.new_tokens);
  const double kv_bytes = 2.0 /* K and V */ * 2.0 /* bf16 */ * static_cast<double>(b.config.num_hidden_layers) *
                          static_cast<double>(b.config.num_key_value_heads * b.config.head_dim) * mean_context *
                          static_cast<double>(o.prompts * o.samples);
  std::printf("  medians of %lld timed steps: sync %.3f s, generate %.3f s, update %.3f s, step %.3f s\n",
              static_cast<long long>(o.repeats), median(t.sync_s), median(t.generate_s), median(t.update_s), median(t.step_s));
  std::printf("  decode bytes per step: bf16 weights %.1f MB + KV cache at mean context %.1f tokens %.1f MB\n",
              engine_bytes / 1e6, mean_context, kv_bytes / 1e6);
  const double dynamic_tokens_per_s = dynamic_decode_tokens_per_s(b);
  const auto& stats = t.last.stats;
  std::printf("  decode steps: %s (%lld CUDA graph replays, %lld captured, %lld padded rows in the last step); "
              "dynamic steps on the same weights: %.1f tokens/s\n",
              grpo::native::decode_steps_name(stats.decode_mode), static_cast<long long>(stats.graph_replays),
              static_cast<long long>(stats.graphs_captured), static_cast<long long>(stats.padded_rows), dynamic_tokens_per_s);
  std::printf("gpu_decode_tokens_per_s: %.1f\n", static_cast<double>(t.last.generated) / median(t.generate_s));
  std::printf("gpu_decode_tokens_per_s_dynamic: %.1f\n", dynamic_tokens_per_s);
  std::printf("gpu_cuda_graph_replays: %lld\n", static_cast<long long>(stats.graph_replays));
  std::printf("gpu_train_tokens_per_s: %.1f\n", static_cast<double>(t.last.train_tokens) / median(t.update_s));
  std::printf("gpu_step_s: %.4f\n", median(t.step_s));
  std::printf("gpu_params: %lld\n", static_cast<long long>(params));
  std::printf("gpu_decode_steps_per_s: %.2f\n", median(t.decode_steps_per_s));
  std::printf("gpu_decode_bytes_per_step: %.0f\n", static_cast<double>(engine_bytes) + kv_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.o = parse_options(argc, argv);
  const Options& o = b.o;
  b.device = parse_device(o.device);
  try {
    b.config = grpo::core::load_model_config(o.config);
  } catch (const std::exception& e) {
    usage_error(std::string("--config: ") + e.what());
  }
  if (o.max_prompt + o.new_tokens > b.config.max_position_embeddings)
    usage_error("--max-prompt + --new-tokens = " + std::to_string(o.max_prompt + o.new_tokens) +
                " exceeds the model's max_position_embeddings " + std::to_string(b.config.max_position_embeddings));
  const int threads = grpo::bench::choose_threads(o.threads, "grpo_bench_gpu_step");
  set_up(b);

  std::int64_t params = 0, prompt_tokens = 0;
  for (const auto& p : b.policy->parameters()) params += p.numel();
  for (const auto& p : b.prompts) prompt_tokens += static_cast<std::int64_t>(p.size());
  std::printf("ours: GRPO step on %s, device %s, %lld LibTorch threads\n", o.config.c_str(), b.device.str().c_str(), threads * 1LL);
  std::printf("  model: %lld parameters, random weights (std 0.02, seed %lld), bf16-mixed (float32 master, bf16 autocast); "
              "engine bf16 weights + bf16 KV cache\n", static_cast<long long>(params), static_cast<long long>(o.seed));
  std::printf("  workload: %lld prompts (%lld..%lld tokens, %lld in all) x %lld samples x %lld new tokens, T=%.2f, "
              "ignore_eos; micro-batches of %lld sequences (pack_length %lld); ppo_clip, token-mean, clip 1.0, "
              "AdamW lr %g; KL off\n",
              static_cast<long long>(o.prompts), static_cast<long long>(o.min_prompt), static_cast<long long>(o.max_prompt),
              static_cast<long long>(prompt_tokens), static_cast<long long>(o.samples), static_cast<long long>(o.new_tokens),
              o.temperature, static_cast<long long>(o.micro_batch), static_cast<long long>(b.update.pack_length), o.lr);
  std::fflush(stdout);
  Timings timings;
  try {
    timings = run_steps(b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grpo_bench_gpu_step: %s\n", e.what());
    return 1;
  }
  report(b, timings, params, prompt_tokens);
  return 0;
}
