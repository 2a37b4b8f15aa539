// The `native` rollout backend: the in-process engine (engine.h) behind the RolloutBackend
// interface, with weight sync from the trainer. Options (docs/rollout.md):
//   model (required)        Hugging Face folder: config.json + safetensors (+ tokenizer.json)
//   tokenizer               folder or tokenizer.json; default: the model folder when it has one
//   dtype                   float32 | bfloat16
//   device                  cpu | cuda | cuda:N
//   max_num_seqs            decode slots (32)
//   max_num_batched_tokens  prompt tokens per prefill forward (2048)
//   max_model_len           prompt + completion bound (0 = max_position_embeddings)
//   logprobs                raw | scaled | processed (what GeneratedSample::logprobs holds)
//   seed                    base of the random streams of requests that set no seed (0)
//   ignore_eos              false: EOS ids (generation_config.json, config.json, tokenizer) stop
//   weight_sync             auto | copy | share (update_weights: alias the trainer's tensors
//                           when device and dtype match, or always copy, or insist on aliasing)
#include <grpo/sdk/torch.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "core/model/checkpoint.h"
#include "core/model/device_info.h"
#include "core/util/strings.h"
#include "plugins/backends/native/engine.h"

namespace {

namespace fs = std::filesystem;
using grpo::native::Engine;
using grpo::native::EngineOptions;
using grpo::native::LogprobsMode;

enum class WeightSync { kAuto, kCopy, kShare };

double to_mb(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

class NativeBackend : public grpo::sdk::RolloutBackend {
 public:
  explicit NativeBackend(const grpo::sdk::ConfigView& cfg) {
    const std::string model_dir = cfg.require_string("model");
    const std::string dtype_name = cfg.get_choice("dtype", "float32", {"float32", "bfloat16"});
    const std::string device_name = cfg.get_string("device", "cpu");
    const std::string attention = cfg.get_choice("attention", "auto", {"auto", "eager", "sdpa", "flash_varlen"});
    EngineOptions options;
    options.max_num_seqs = cfg.get_int("max_num_seqs", options.max_num_seqs);
    options.max_num_batched_tokens = cfg.get_int("max_num_batched_tokens", options.max_num_batched_tokens);
    options.max_model_len = cfg.get_int("max_model_len", options.max_model_len);
    options.logprobs_mode = *grpo::native::parse_logprobs_mode(cfg.get_choice("logprobs", "raw", {"raw", "scaled", "processed"}));
    options.seed = static_cast<std::uint64_t>(cfg.get_int("seed", static_cast<std::int64_t>(options.seed)));
    options.ignore_eos = cfg.get_bool("ignore_eos", options.ignore_eos);
    options.decode_steps =
        *grpo::native::parse_decode_steps(cfg.get_choice("decode_steps", "auto", {"auto", "dynamic", "bucketed", "graphs"}));
    const std::string sync = cfg.get_choice("weight_sync", "auto", {"auto", "copy", "share"});
    sync_ = sync == "auto" ? WeightSync::kAuto : sync == "copy" ? WeightSync::kCopy : WeightSync::kShare;
    if (const auto problem = grpo::native::engine_options_problem(options)) cfg.fail(problem->key, problem->message);

    std::optional<torch::Device> device;
    try {
      device.emplace(grpo::core::parse_device(device_name));
    } catch (const std::invalid_argument& e) {
      cfg.fail("device", e.what());
    }

    grpo::core::LoadedModel loaded;
    try {
      loaded = grpo::core::load_model(model_dir, dtype_name == "float32" ? torch::kFloat32 : torch::kBFloat16, *device);
      loaded.model->set_attention_backend(*grpo::core::parse_attention_backend(attention));
    } catch (const std::exception& e) {
      cfg.fail("model", e.what());
    }
    std::optional<grpo::core::Tokenizer> tokenizer;
    std::string tokenizer_path = cfg.get_string("tokenizer", "");
    if (tokenizer_path.empty() && fs::exists(fs::path(model_dir) / "tokenizer.json")) tokenizer_path = model_dir;
    if (!tokenizer_path.empty()) {
      try {
        tokenizer.emplace(grpo::core::Tokenizer::load(tokenizer_path));
      } catch (const std::exception& e) {
        cfg.fail("tokenizer", e.what());
      }
    } else {
      grpo::sdk::log_warn("native rollout: " + model_dir +
                          " has no tokenizer.json and no `tokenizer` option is set: samples carry token ids "
                          "and log-probs but no text, and stop strings are refused");
    }
    auto eos = grpo::native::eos_token_ids(loaded, tokenizer);
    try {
      engine_.emplace(loaded.model, std::move(tokenizer), std::move(eos), options);
    } catch (const std::invalid_argument& e) {
      cfg.fail("max_model_len", e.what());
    }
    for (const auto& p : engine_->model()->named_parameters()) parameters_.emplace(p.key(), p.value());
    tied_ = loaded.config.tie_word_embeddings;
  }

  std::vector<grpo::sdk::GenerationResult> generate(const std::vector<grpo::sdk::GenerationRequest>& requests) override {
    return engine_->generate(requests);
  }

  bool supports_turns() const override { return true; }
  std::vector<grpo::sdk::GenerationResult> generate_turns(const std::vector<grpo::sdk::GenerationRequest>& requests,
                                                          grpo::sdk::TurnController& controller) override {
    return engine_->generate(requests, &controller);
  }

  void update_weights(const grpo::sdk::NamedTensors& weights) override {
    torch::NoGradGuard no_grad;
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, const at::Tensor*> given;
    for (const auto& [name, tensor] : weights) {
      if (tied_ && name == "lm_head.weight") continue;  // tied to model.embed_tokens.weight
      if (!parameters_.count(name))
        throw std::invalid_argument("update_weights: '" + name + "' is not a parameter of this " +
                                    grpo::core::architecture_name(engine_->model()->config().architecture) + " model");
      if (!given.emplace(name, &tensor).second) throw std::invalid_argument("update_weights: '" + name + "' given twice");
    }
    if (given.empty()) throw std::invalid_argument("update_weights: no tensors given");
    // A sync may send a subset: the parameters it does not name keep their values (a LoRA run
    // sends only the merged weights its adapters change).
    // Everything is checked before anything changes: a failed sync leaves the engine as it was.
    for (const auto& [name, param] : parameters_) {
      if (!given.count(name)) continue;
      const at::Tensor& src = *given.at(name);
      if (src.sizes() != param.sizes())
        throw std::invalid_argument("update_weights: '" + name + "' has shape " + grpo::core::shape_text(src.sizes().vec()) +
                                    ", the model needs " + grpo::core::shape_text(param.sizes().vec()));
      if (sync_ == WeightSync::kShare && !can_share(src, param))
        throw std::invalid_argument("update_weights: weight_sync is share, but '" + name + "' is a " +
                                    std::string(c10::toString(src.scalar_type())) + " tensor on " + src.device().str() +
                                    " (contiguous: " + (src.is_contiguous() ? "yes" : "no") + ") and the engine holds " +
                                    c10::toString(param.scalar_type()) + " on " + param.device().str() +
                                    "; use weight_sync: copy or auto");
    }
    std::int64_t shared = 0, copied = 0, copied_bytes = 0;
    for (auto& [name, param] : parameters_) {
      if (!given.count(name)) continue;
      const at::Tensor& src = *given.at(name);
      bool& aliased = aliased_[name];
      if (can_share(src, param) && sync_ != WeightSync::kCopy) {
        param.set_data(src.detach());  // aliases the trainer's storage: later in-place updates show through
        aliased = true;
        ++shared;
      } else {
        if (aliased) {
          // Still the storage of an earlier shared sync: copying into it would overwrite the
          // tensor that sync came from. Take storage of our own.
          param.set_data(src.detach().to(param.options()).clone());
          aliased = false;
        } else {
          param.copy_(src.detach());
        }
        ++copied;
        copied_bytes += static_cast<std::int64_t>(param.nbytes());
      }
    }
    if (engine_->model()->lm_head_weight().is_cuda()) torch::cuda::synchronize();  // time the copies, not their launch
    sync_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    shared_ = shared;
    copied_bytes_ = copied_bytes;
    grpo::sdk::log_debug("native rollout: weight sync of " + std::to_string(given.size()) + " of " +
                         std::to_string(parameters_.size()) + " tensors (" +
                         std::to_string(shared) + " shared, " + std::to_string(copied) + " copied, " +
                         std::to_string(to_mb(copied_bytes)) + " MB) in " + std::to_string(sync_s_) + " s");
  }

  std::vector<grpo::sdk::Metric> metrics() const override {
    const auto& s = engine_->last_stats();
    auto ratio = [](double a, double b) { return b > 0.0 ? a / b : 0.0; };
    const auto finished = static_cast<double>(s.finished_stop + s.finished_length);
    std::vector<grpo::sdk::Metric> out;
    auto add = [&](const char* name, double v) { out.push_back({name, at::scalar_tensor(v, at::kDouble)}); };
    add("rollout/prefill_tokens", static_cast<double>(s.prefill_tokens));
    add("rollout/prefill_tokens_per_s", ratio(static_cast<double>(s.prefill_tokens), s.prefill_s));
    add("rollout/decode_tokens", static_cast<double>(s.decode_tokens));
    add("rollout/decode_tokens_per_s", ratio(static_cast<double>(s.decode_tokens), s.decode_s));
    add("rollout/batch_occupancy", ratio(static_cast<double>(s.decode_tokens), static_cast<double>(s.decode_steps * s.max_num_seqs)));
    add("rollout/stop_rate", ratio(static_cast<double>(s.finished_stop), finished));
    add("rollout/mean_length", ratio(static_cast<double>(s.completion_tokens), finished));
    add("rollout/max_length", static_cast<double>(s.max_completion_tokens));
    add("rollout/failed_requests", static_cast<double>(s.failed_requests));
    add("rollout/wall_s", s.wall_s);
    add("rollout/kv_cache_mb", to_mb(s.kv_cache_bytes));
    if (s.decode_mode != grpo::native::DecodeSteps::kDynamic) {  // fixed-shape steps (bucketed_decoder.h)
      add("rollout/decode_padded_rows", static_cast<double>(s.padded_rows));
      add("rollout/cuda_graph_replays", static_cast<double>(s.graph_replays));
      add("rollout/cuda_graphs_captured", static_cast<double>(s.graphs_captured));
    }
    if (s.turns > 0) {  // multi-turn (tools): resumed with the KV cache kept
      add("rollout/turns", static_cast<double>(s.turns));
      add("rollout/appended_tokens", static_cast<double>(s.appended_tokens));
      add("rollout/resume_s", s.resume_s);
    }
    add("rollout/weight_sync_s", sync_s_);
    add("rollout/weight_sync_shared_tensors", static_cast<double>(shared_));
    add("rollout/weight_sync_copied_mb", to_mb(copied_bytes_));
    return out;
  }

 private:
  static bool can_share(const at::Tensor& src, const at::Tensor& param) {
    return src.device() == param.device() && src.scalar_type() == param.scalar_type() && src.is_contiguous();
  }

  std::optional<Engine> engine_;
  std::map<std::string, at::Tensor> parameters_;
  std::map<std::string, bool> aliased_;  // parameter name -> holds a trainer tensor's storage
  bool tied_ = false;
  WeightSync sync_ = WeightSync::kAuto;
  double sync_s_ = 0.0;
  std::int64_t shared_ = 0, copied_bytes_ = 0;
};

}  // namespace

GRPO_PLUGIN("native", "1.0.0", "In-process rollout engine: KV cache, continuous batching, sampling, weight sync") {
  registrar.add_rollout_backend<NativeBackend>("native", "in-process engine (continuous batching over a per-slot KV cache)");
}
