// LoRA adapters in PEFT's format (docs/lora.md).
//
// An adapter hooks into one Projection (core/model/projection.h, the decoder's single matmul
// seam) and adds PEFT's low-rank update to its output:
//   h = W x + b + scaling * B (A dropout(x)),   scaling = lora_alpha / r   (use_rslora: / sqrt(r))
// with A [r, in] and B [out, r]. Adapters are float32 whatever the base weights are stored in
// (PEFT casts the input to the adapter's dtype the same way), and they are not parameters of
// the CausalLM: its named_parameters() stay the Hugging Face base weights, so loading, saving
// and syncing the base work as without LoRA, and the adapters' own names are PEFT's:
//   base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
//
// The base weights are frozen (requires_grad false) while adapters are attached. Switching the
// adapters off (AdaptersOff) makes the model the base model again: that is the KL reference of a
// LoRA run, with no second copy of the weights.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/model/projection.h"
#include "core/model/safetensors_torch.h"
#include "core/model/transformer.h"

namespace grpo::core {

// PEFT's init_lora_weights: true = A Kaiming-uniform (a = sqrt(5), nn.Linear's default),
// "gaussian" = A normal(0, 1/r); B = 0 in both, so an attached adapter starts as the identity.
enum class LoraInit { kKaimingUniform, kGaussian };

// PEFT's LoraConfig keys this runtime implements (model.lora.* in a configuration).
struct LoraSettings {
  std::int64_t r = 0;  // rank; 0 = no LoRA
  double lora_alpha = 8.0;
  double lora_dropout = 0.0;
  // Module names as PEFT matches them: an entry matches a module whose name is the entry or
  // ends with "." + entry ("q_proj", "self_attn.q_proj"). "all-linear": every linear layer of
  // the decoder but the output layer (PEFT excludes lm_head). Empty: PEFT's default for
  // Qwen2/Qwen3/Llama, q_proj and v_proj.
  std::vector<std::string> target_modules;
  LoraInit init = LoraInit::kKaimingUniform;
  bool use_rslora = false;
  std::string adapter_path;  // a PEFT adapter folder to start from ("" = fresh adapters)

  bool enabled() const { return r > 0; }
  double scaling() const;
};

// PEFT's adapter files.
inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

// One decoder projection a configuration can target: its full module name and shape.
struct LoraTarget {
  std::string module;  // "model.layers.0.self_attn.q_proj"
  std::int64_t in_features = 0, out_features = 0;
};

// The linear modules of a model with this config.json LoRA can adapt, in model order: the
// decoder layers' q/k/v/o and gate/up/down (not lm_head: its log-probs are computed from its
// weight in chunks, core/model/logprobs.h, not through Projection::forward), from the config
// alone (no weights).
std::vector<LoraTarget> linear_modules(const ModelConfig& config);

// The short names ("q_proj", ...) of `modules`, each once, in model order.
std::vector<std::string> short_module_names(const std::vector<LoraTarget>& modules);

// The modules `settings.target_modules` selects among linear_modules(config). Throws
// std::invalid_argument when an entry matches no module (the message lists the model's
// module names), when lm_head is asked for, or when nothing is selected.
std::vector<LoraTarget> select_lora_targets(const ModelConfig& config, const LoraSettings& settings);

// A PEFT adapter folder's adapter_config.json: the settings it describes (r, lora_alpha,
// lora_dropout, target_modules, use_rslora, init_lora_weights) and its base model. Throws
// std::runtime_error naming the file for a missing file, bad JSON, a peft_type other than LORA,
// or a feature this runtime does not implement (DoRA, bias other than "none", rank_pattern,
// alpha_pattern, modules_to_save, fan_in_fan_out, layers_to_transform, layer_replication).
struct PeftAdapterConfig {
  LoraSettings settings;
  std::string base_model_name_or_path;
};
PeftAdapterConfig read_peft_adapter_config(const std::string& adapter_dir);

// Checks PEFT-named adapter tensors against the adapters `settings` gives a model with
// `config` (no weights needed): every tensor there with its shape ([r, in] for lora_A,
// [out, r] for lora_B), floating point, and no other. std::runtime_error naming `source` and
// the tensor otherwise (an adapter for another architecture, shape or rank).
void check_peft_tensors(const ModelConfig& config, const LoraSettings& settings, const NamedTensorList& tensors,
                        const std::string& source);

// A single LoRA adapter of one projection, attached as its hook. Its tensors are the trained
// parameters.
struct LoraAdapter : ProjectionHook {
  torch::Tensor lora_A;  // [r, in] float32
  torch::Tensor lora_B;  // [out, r] float32
  double scaling = 1.0;
  double dropout = 0.0;
  std::shared_ptr<const std::atomic<bool>> enabled;  // shared by the adapters of one model
  // Draws the dropout masks of CPU passes (shared by the adapters of one model). A generator of
  // their own, seeded from run.seed and checkpointed, so a run's masks depend on nothing else
  // that draws random numbers, and a resumed run draws the masks the uninterrupted one would.
  std::shared_ptr<at::Generator> dropout_generator;

  // Switched on (LoraAdapters::set_enabled, AdaptersOff).
  bool active() const override { return enabled && enabled->load(std::memory_order_relaxed); }
  // `base` (= the projection's W x + b) plus the adapter's update for input `x`, added in place.
  // Dropout is applied only to a pass that trains (`training` and autograd on), never to
  // log-probs computed under no-grad or to generation.
  torch::Tensor apply(const torch::Tensor& x, torch::Tensor base, bool training) const override;
  // The dropout generator when dropout is on.
  const at::Generator* training_generator() const override {
    return dropout > 0.0 && dropout_generator ? dropout_generator.get() : nullptr;
  }
};

// An adapter_config.json that describes other adapters than the ones at hand: `key` is the
// adapter_config.json key that differs ("r", "lora_alpha" for the scale, lora_alpha with
// use_rslora, or "target_modules"), `theirs` / `ours` its two values as text. A resume names the
// configuration key from it (model.lora.<key>).
class PeftConfigMismatch : public std::runtime_error {
 public:
  PeftConfigMismatch(const char* key, std::string theirs, std::string ours, const std::string& what)
      : std::runtime_error(what), key_(key), theirs_(std::move(theirs)), ours_(std::move(ours)) {}
  const char* key() const { return key_; }
  const std::string& theirs() const { return theirs_; }
  const std::string& ours() const { return ours_; }

 private:
  const char* key_;
  std::string theirs_, ours_;
};

// The adapters of one model. Construction attaches them; destruction detaches them (the
// model is then the base model again, its weights trainable as before).
// Not copyable: projections point at it.
class LoraAdapters {
 public:
  // Attaches fresh adapters (A initialized from `seed` on the CPU, B = 0; the dropout
  // generator seeded from `seed` too) to the targets
  // settings.target_modules selects (select_lora_targets's errors) and freezes every base
  // parameter. Adapters live on the model's device in float32.
  LoraAdapters(CausalLM model, LoraSettings settings, std::uint64_t seed);
  ~LoraAdapters();
  LoraAdapters(const LoraAdapters&) = delete;
  LoraAdapters& operator=(const LoraAdapters&) = delete;

  const LoraSettings& settings() const { return settings_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  // adapter_config.json's target_modules, sorted: the short names ("q_proj", ...) of the modules
  // for all-linear and PEFT's default, else the entries as configured (as PEFT saves them).
  std::vector<std::string> target_module_names() const;

  // lora_A and lora_B of every target, in target order: what the optimizer trains.
  std::vector<torch::Tensor> parameters() const;
  std::int64_t num_parameters() const;

  // The adapter tensors under PEFT's names ("base_model.model.<module>.lora_A.weight"),
  // contiguous float32 CPU copies.
  NamedTensorList peft_state() const;
  // Copies PEFT-named tensors into the adapters. Every tensor must be there with its shape and
  // no other may be: std::runtime_error naming `source` and the tensor otherwise (everything
  // is checked before the first copy, so a failure leaves the adapters as they were).
  void load_peft_state(const NamedTensorList& tensors, const std::string& source);

  // Writes DIR/adapter_config.json and DIR/adapter_model.safetensors as PEFT's save_pretrained
  // does (each file atomically; DIR must exist). `base_model` is base_model_name_or_path.
  void save_peft_files(const std::string& dir, const std::string& base_model) const;
  // The adapter_config.json text for these adapters.
  std::string peft_config_json(const std::string& base_model) const;
  // Checks that DIR's adapter_config.json describes these adapters (rank, scaling, targets):
  // PeftConfigMismatch naming the file otherwise (std::runtime_error when it cannot be read).
  void check_peft_config(const std::string& dir) const;
  // Reads DIR's adapter_model.safetensors into the adapters after check_peft_config.
  void load_peft_folder(const std::string& dir);

  // W + scaling * B A of every targeted weight, under the base weight's Hugging Face name
  // ("model.layers.0.self_attn.q_proj.weight"), computed in float32 from the frozen base (never
  // merged in place, so repeated syncs cannot accumulate rounding) and returned in `dtype`
  // (default: the base weight's), on the model's device: what a rollout engine holding the base
  // model needs to serve the adapted one. Only the targeted weights change, so only they are sent.
  std::vector<std::pair<std::string, torch::Tensor>> merged_weights(std::optional<torch::Dtype> dtype = std::nullopt) const;
  // Adds scaling * B A into the base weights in place and detaches the adapters: the model is
  // then the merged model (grpo-export --merge). The object is spent afterwards.
  void merge_into_base();

  bool enabled() const { return enabled_->load(); }
  void set_enabled(bool on) { enabled_->store(on); }

  // The dropout generator's state (a CPU byte tensor), for checkpoints; set_ checks its size.
  torch::Tensor dropout_rng_state() const;
  void set_dropout_rng_state(const torch::Tensor& state);

 private:
  struct Slot {
    LoraTarget target;
    Projection projection{nullptr};
    std::shared_ptr<LoraAdapter> adapter;
  };
  void detach();

  CausalLM model_;
  LoraSettings settings_;
  std::vector<LoraTarget> targets_;
  std::vector<Slot> slots_;
  std::shared_ptr<std::atomic<bool>> enabled_;
  std::shared_ptr<at::Generator> dropout_generator_;
};

// Switches a model's adapters off for a scope (no-op for nullptr): the model computes as its
// base model. The KL reference of a LoRA run. Not for concurrent use of the same model.
class AdaptersOff {
 public:
  explicit AdaptersOff(LoraAdapters* adapters);
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  LoraAdapters* adapters_;
  bool was_enabled_ = false;
};

}  // namespace grpo::core
