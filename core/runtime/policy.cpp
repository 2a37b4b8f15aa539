#include "core/runtime/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "core/config/config_access.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/device_info.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

bool set_by_user(const sdk::ConfigValue* node) {
  return node && node->location().known() && node->location().file != "<default>";
}

// LoRA is on when model.lora.r is given (not null) or an adapter is continued. (A run's
// effective_config.yaml spells every default out, r: null included, and must load as it ran.)
bool lora_requested(const sdk::ConfigValue& root) {
  const sdk::ConfigValue* r = find_config_node(root, {"model", "lora", "r"});
  return (r && !r->is_null()) ||
         !sdk::ConfigView(find_config_node(root, {"model", "lora"}), "model.lora").get_string("adapter_path", "").empty();
}

// model.lora.* of a validated configuration (PolicySpec::lora), with adapter_path's settings;
// `requested_targets` gets target_modules when it is set as well as adapter_path.
LoraSettings lora_settings(const sdk::ConfigValue& root, std::vector<std::string>& requested_targets) {
  const sdk::ConfigView lora(find_config_node(root, {"model", "lora"}), "model.lora");
  auto node = [&](const char* key) { return find_config_node(root, {"model", "lora", key}); };
  LoraSettings s;
  s.adapter_path = lora.get_string("adapter_path", "");
  const bool rank_given = node("r") && !node("r")->is_null();
  if (!lora_requested(root)) {
    // A key given a value other than its default means LoRA was meant (an effective config
    // spells the defaults out: those are fine).
    const std::pair<const char*, bool> changed[] = {
        {"lora_alpha", lora.get_double("lora_alpha", 8.0) != 8.0},
        {"lora_dropout", lora.get_double("lora_dropout", 0.0) != 0.0},
        {"target_modules", !lora.get_string_list("target_modules", {}).empty()},
        {"init_lora_weights", lora.get_string("init_lora_weights", "true") != "true"},
        {"use_rslora", lora.get_bool("use_rslora", false)}};
    for (const auto& [key, differs] : changed)
      if (differs && set_by_user(node(key)))
        fail_at_key(node(key), std::string("model.lora.") + key,
                    "is set, but LoRA is off: set model.lora.r (the adapters' rank, e.g. 16) to train adapters, or "
                    "model.lora.adapter_path to continue from a PEFT adapter");
    return s;  // full fine-tuning
  }
  s.r = lora.get_int("r", 0);
  if (rank_given && s.r < 1)
    fail_at_key(node("r"), "model.lora.r",
                "rank " + std::to_string(s.r) + ": a LoRA adapter needs r >= 1 (typically 8 to 64); remove model.lora to "
                "train every weight");
  s.lora_alpha = lora.get_double("lora_alpha", 8.0);
  if (!(s.lora_alpha > 0.0) || !std::isfinite(s.lora_alpha))
    fail_at_key(node("lora_alpha"), "model.lora.lora_alpha", "must be a finite number > 0, got " + std::to_string(s.lora_alpha));
  s.lora_dropout = lora.get_double("lora_dropout", 0.0);
  if (!(s.lora_dropout >= 0.0 && s.lora_dropout < 1.0))
    fail_at_key(node("lora_dropout"), "model.lora.lora_dropout", "must be in [0, 1), got " + std::to_string(s.lora_dropout));
  s.target_modules = lora.get_string_list("target_modules", {});
  s.init = lora.get_string("init_lora_weights", "true") == "gaussian" ? LoraInit::kGaussian : LoraInit::kKaimingUniform;
  s.use_rslora = lora.get_bool("use_rslora", false);
  if (s.adapter_path.empty()) return s;

  // Continuing an adapter: its own files say what it is.
  PeftAdapterConfig adapter;
  try {
    adapter = read_peft_adapter_config(s.adapter_path);
  } catch (const std::exception& e) {
    fail_at_key(node("adapter_path"), "model.lora.adapter_path", e.what());
  }
  const LoraSettings& a = adapter.settings;
  const std::string file = (std::filesystem::path(s.adapter_path) / kAdapterConfigFile).string();
  auto conflict = [&](const char* key, const std::string& mine, const std::string& theirs) {
    fail_at_key(node(key), std::string("model.lora.") + key,
                "is " + mine + " but the adapter being continued (" + file + ") has " + theirs +
                    "; leave it unset to take the adapter's");
  };
  if (rank_given && s.r != a.r) conflict("r", std::to_string(s.r), std::to_string(a.r));
  if (set_by_user(node("lora_alpha")) && s.lora_alpha != a.lora_alpha)
    conflict("lora_alpha", std::to_string(s.lora_alpha), std::to_string(a.lora_alpha));
  if (set_by_user(node("use_rslora")) && s.use_rslora != a.use_rslora)
    conflict("use_rslora", s.use_rslora ? "true" : "false", a.use_rslora ? "true" : "false");
  // target_modules set here too is compared by the modules it selects (check_policy_files: it
  // needs config.json), so all-linear and the adapter's expanded list agree.
  if (set_by_user(node("target_modules"))) requested_targets = s.target_modules;
  s.r = a.r;
  s.lora_alpha = a.lora_alpha;
  s.use_rslora = a.use_rslora;
  s.target_modules = a.target_modules;
  if (!set_by_user(node("lora_dropout"))) s.lora_dropout = a.lora_dropout;
  return s;
}

}  // namespace

std::optional<RunDirectoryCheckpoint> run_directory_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return std::nullopt;
  const auto latest = latest_checkpoint(path);
  if (!latest) return std::nullopt;  // the caller reports the missing config.json
  RunDirectoryCheckpoint out;
  out.path = *latest;
  out.adapter = !fs::exists(fs::path(*latest) / "config.json", ec) && fs::exists(fs::path(*latest) / kAdapterConfigFile, ec);
  if (out.adapter) {
    try {
      out.adapter_base = read_peft_adapter_config(*latest).base_model_name_or_path;
    } catch (const std::exception&) {
      // Only for the message; loading the adapter reports a bad adapter_config.json.
    }
  }
  return out;
}

void resolve_model_path(sdk::ConfigValue& root) {
  sdk::ConfigValue* model = root.find("model");
  sdk::ConfigValue* path = model && model->is_map() ? model->find("path") : nullptr;
  if (!path || !path->is_scalar() || path->scalar().empty()) return;
  const std::string dir = path->scalar();
  const auto latest = run_directory_checkpoint(dir);
  if (!latest) return;
  if (latest->adapter)
    fail_at_key(path, "model.path",
                "'" + dir + "' is a LoRA run: its newest checkpoint " + latest->path +
                    " is a PEFT adapter, not a model. Set model.path to the base model" +
                    (latest->adapter_base.empty() ? std::string() : " (" + latest->adapter_base + ")") +
                    " and model.lora.adapter_path: " + latest->path +
                    ", or write a merged model with grpo-export --merge (docs/lora.md)");
  spdlog::info("model.path: {} is a run directory; using its newest checkpoint {}", dir, latest->path);
  *path = sdk::ConfigValue::make_scalar(latest->path, path->location());
}

torch::Device policy_device(const sdk::ConfigValue& root) {
  const sdk::ConfigValue* node = find_config_node(root, {"model", "device"});
  const std::string name = sdk::ConfigView(find_config_node(root, {"model"}), "model").get_string("device", "cpu");
  try {
    return parse_device(name);
  } catch (const std::invalid_argument& e) {
    fail_at_key(node, "model.device", e.what());
  }
}

void bind_local_cuda_device(sdk::ConfigValue& root, int local_rank) {
  const std::string bound = "cuda:" + std::to_string(local_rank);
  auto bind = [&](sdk::ConfigValue* node) {
    if (node && node->is_scalar() && node->scalar() == "cuda") *node = sdk::ConfigValue::make_scalar(bound, node->location());
  };
  sdk::ConfigValue* model = root.find("model");
  if (model && model->is_map()) bind(model->find("device"));
  sdk::ConfigValue* rollout = root.find("rollout");
  sdk::ConfigValue* backend = rollout && rollout->is_map() ? rollout->find("backend") : nullptr;
  if (backend && backend->is_map()) bind(backend->find("device"));
}

Precision training_precision(const sdk::ConfigValue& root) {
  const std::string dtype = sdk::ConfigView(find_config_node(root, {"model"}), "model").get_string("dtype", "float32");
  Precision p = Precision::kFp32;
  const std::string precision = sdk::ConfigView(find_config_node(root, {"train"}), "train").get_string("precision", "auto");
  const sdk::ConfigValue* precision_node = find_config_node(root, {"train", "precision"});
  if (precision == "auto") {
    p = dtype == "bfloat16" ? Precision::kBf16 : Precision::kFp32;
  } else {
    const auto parsed = parse_precision(precision);
    if (!parsed) fail_at_key(precision_node, "train.precision", "expected auto, fp32, bf16-mixed or bf16, got \"" + precision + "\"");
    p = *parsed;
    const std::string needed = storage_dtype(p) == torch::kBFloat16 ? "bfloat16" : "float32";
    // With LoRA the base is frozen and the trained weights are the float32 adapters, so a bf16
    // base under bf16-mixed has its master copy (PEFT + autocast, the usual QLoRA-less setup).
    if (dtype != needed && !(lora_requested(root) && p == Precision::kBf16Mixed)) {
      const sdk::ConfigValue* dtype_node = find_config_node(root, {"model", "dtype"});
      const std::string where = set_by_user(dtype_node) ? " (" + dtype_node->location().to_string() + ")" : "";
      fail_at_key(precision_node, "train.precision",
                  p == Precision::kBf16
                      ? "bf16 trains bfloat16 weights with no float32 master copy, but model.dtype is " + dtype + where +
                            ": set model.dtype: bfloat16 as well, or use bf16-mixed (float32 master weights, bf16 compute)"
                      : std::string(precision_name(p)) + " keeps float32 weights (the master copy AdamW updates), but model.dtype is " +
                            dtype + where + ": set model.dtype: float32 (the default)");
    }
  }
  return p;
}

PolicySpec policy_spec(const sdk::ConfigValue& root) {
  PolicySpec spec;
  const sdk::ConfigView model(find_config_node(root, {"model"}), "model");
  const sdk::ConfigView tokenizer(find_config_node(root, {"tokenizer"}), "tokenizer");
  spec.model_path = model.get_string("path", "");
  spec.dtype = model.get_string("dtype", "float32");
  const std::string attention = model.get_string("attention", "auto");
  const auto backend = parse_attention_backend(attention);
  if (!backend)
    fail_at_key(find_config_node(root, {"model", "attention"}), "model.attention",
                std::string("expected one of ") + attention_backend_choices() + ", got \"" + attention + "\"");
  spec.attention = *backend;
  spec.device = policy_device(root);
  spec.precision = training_precision(root);
  if (spec.precision != Precision::kFp32 && spec.device.is_cpu() && !cpu_bf16_support().any())
    spdlog::warn("train.precision {}: this CPU has neither avx512_bf16 nor amx_bf16, so bfloat16 matrix products are emulated "
                 "and run slower than float32; it still trains (docs/precision.md)",
                 precision_name(spec.precision));  spec.model_node = find_config_node(root, {"model", "path"});
  spec.tokenizer_path = tokenizer.get_string("path", "");
  spec.tokenizer_node = find_config_node(root, {"tokenizer", "path"});
  if (spec.tokenizer_path.empty()) {
    spec.tokenizer_path = spec.model_path;
    spec.tokenizer_node = spec.model_node;
  }
  spec.chat_template = tokenizer.get_string("chat_template", "auto");
  spec.chat_template_node = find_config_node(root, {"tokenizer", "chat_template"});
  spec.lora = lora_settings(root, spec.lora_requested_targets);
  const sdk::ConfigView run(find_config_node(root, {"run"}), "run");
  spec.lora_seed = static_cast<std::uint64_t>(run.get_int("seed", 1));
  spec.deterministic = run.get_bool("deterministic", false);
  spec.lora_node = find_config_node(root, {"model", "lora"});
  return spec;
}

namespace {

// model.lora's targets exist in the model, and adapter_path's tensors fit them (no weights read).
void check_lora_against_model(const PolicySpec& spec, const ModelConfig& config) {
  const sdk::ConfigValue* targets = spec.lora_node && spec.lora_node->is_map() ? spec.lora_node->find("target_modules") : nullptr;
  const sdk::ConfigValue* adapter = spec.lora_node && spec.lora_node->is_map() ? spec.lora_node->find("adapter_path") : nullptr;
  const std::string from_adapter =
      spec.lora.adapter_path.empty() ? "" : " (from " + spec.lora.adapter_path + "/" + kAdapterConfigFile + ")";
  try {
    select_lora_targets(config, spec.lora);
  } catch (const std::exception& e) {
    fail_at_key(spec.lora.adapter_path.empty() ? targets : adapter,
                spec.lora.adapter_path.empty() ? "model.lora.target_modules" : "model.lora.adapter_path",
                std::string(e.what()) + from_adapter);
  }
  if (spec.lora.adapter_path.empty()) return;
  if (!spec.lora_requested_targets.empty()) {
    LoraSettings requested = spec.lora;
    requested.target_modules = spec.lora_requested_targets;
    std::vector<std::string> theirs, mine;
    try {
      for (const auto& t : select_lora_targets(config, requested)) mine.push_back(t.module);
    } catch (const std::exception& e) {
      fail_at_key(targets, "model.lora.target_modules", e.what());
    }
    for (const auto& t : select_lora_targets(config, spec.lora)) theirs.push_back(t.module);
    if (mine != theirs)
      fail_at_key(targets, "model.lora.target_modules",
                  "[" + join(spec.lora_requested_targets, ", ") + "] selects other modules than the adapter being continued (" +
                      spec.lora.adapter_path + "/" + kAdapterConfigFile + ": [" + join(spec.lora.target_modules, ", ") +
                      "]); leave it unset to take the adapter's");
  }
  const std::string weights = (std::filesystem::path(spec.lora.adapter_path) / kAdapterWeightsFile).string();
  try {
    if (!std::filesystem::exists(weights)) throw std::runtime_error(weights + ": missing");
    check_peft_tensors(config, spec.lora, load_safetensors(weights), weights);
  } catch (const std::exception& e) {
    fail_at_key(adapter, "model.lora.adapter_path", std::string(e.what()) + " (model.path is " + spec.model_path + ")");
  }
}

// A NaN or an infinity in the model's weights, found before anything loads (a raw scan of the
// mapped files: memory-bound, docs/training.md). A folder without weights is grpo-sft's
// sft.init: random (and otherwise reported when the weights load).
void check_model_weights_finite(const PolicySpec& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = spec.model_path;
  if (!fs::exists(dir / kSafetensorsIndexFile, ec) && !fs::exists(dir / kSafetensorsSingleFile, ec)) return;
  try {
    check_checkpoint_finite(spec.model_path);
  } catch (const std::exception& e) {
    fail_at_key(spec.model_node, "model.path", e.what());
  }
}

PolicyFiles check_policy_files(const PolicySpec& spec, bool scan_weights) {
  PolicyFiles files;
  if (!spec.model_path.empty()) {
    const std::string config_json = (std::filesystem::path(spec.model_path) / "config.json").string();
    if (!std::filesystem::is_directory(spec.model_path))
      fail_at_key(spec.model_node, "model.path", "'" + spec.model_path + "' is not a folder (expected a Hugging Face model folder)");
    try {
      files.model_config = load_model_config(config_json);
    } catch (const std::exception& e) {
      fail_at_key(spec.model_node, "model.path", e.what());
    }
    if (files.model_config.head != ModelHead::kCausalLM)
      fail_at_key(spec.model_node, "model.path",
                  config_json + " names a *ForSequenceClassification (a reward model: its score head has no vocabulary); "
                  "the policy is a *ForCausalLM. A reward model goes under reward_model.path");
    if (scan_weights) check_model_weights_finite(spec);
    if (spec.lora.enabled()) check_lora_against_model(spec, files.model_config);
  }
  if (!spec.tokenizer_path.empty()) {
    const char* key = spec.tokenizer_node == spec.model_node ? "model.path (as the tokenizer)" : "tokenizer.path";
    try {
      files.tokenizer = Tokenizer::load(spec.tokenizer_path);
    } catch (const std::exception& e) {
      fail_at_key(spec.tokenizer_node, key, e.what());
    }
    if (!spec.model_path.empty() && files.tokenizer->vocab_size() > files.model_config.vocab_size)
      fail_at_key(spec.tokenizer_node, key,
           "the tokenizer has " + std::to_string(files.tokenizer->vocab_size()) + " ids but the model's vocab_size is " +
               std::to_string(files.model_config.vocab_size));
    try {
      files.chat_template = ChatTemplate::resolve(spec.chat_template, *files.tokenizer);
    } catch (const std::exception& e) {
      fail_at_key(spec.chat_template_node, "tokenizer.chat_template", e.what());
    }
    if (files.chat_template->fell_back())
      spdlog::warn("tokenizer.chat_template auto: {} has no chat template (no chat_template.jinja, no chat_template in "
                   "tokenizer_config.json); prompts are rendered with the built-in chatml",
                   spec.tokenizer_path);
  }
  return files;
}

}  // namespace

PolicyFiles check_policy_files(const PolicySpec& spec) { return check_policy_files(spec, /*scan_weights=*/true); }

void apply_determinism(const PolicySpec& spec) {
  use_deterministic_algorithms(spec.deterministic);
  if (spec.deterministic)
    spdlog::info("run.deterministic: deterministic algorithms on (cuDNN deterministic, CUBLAS_WORKSPACE_CONFIG={}, "
                 "no atomics-based attention backward)",
                 std::getenv("CUBLAS_WORKSPACE_CONFIG") ? std::getenv("CUBLAS_WORKSPACE_CONFIG") : "");
}

LoadedPolicy load_policy(const PolicySpec& spec) {
  // No separate scan: the load checks every value it copies (tensor_from_mapping), and reports a
  // bad weight file as the scan would, naming model.path.
  PolicyFiles files = check_policy_files(spec, /*scan_weights=*/false);
  apply_determinism(spec);
  LoadedPolicy policy;
  policy.tokenizer = std::move(files.tokenizer);
  policy.chat_template = std::move(files.chat_template);
  if (!spec.model_path.empty()) {
    const torch::Dtype dtype = dtype_from_name(spec.dtype, "model.dtype");
    try {
      policy.model = load_model(spec.model_path, dtype, spec.device);
      policy.model.model->set_attention_backend(spec.attention);
    } catch (const SafetensorsError& e) {  // a weight file that cannot be read, or a NaN in it
      fail_at_key(spec.model_node, "model.path", e.what());
    } catch (const CheckpointError& e) {  // tensors that do not fit config.json
      fail_at_key(spec.model_node, "model.path", e.what());
    }
    if (spec.lora.enabled()) attach_lora(spec, policy);
  }
  return policy;
}

void attach_lora(const PolicySpec& spec, LoadedPolicy& policy) {
  const sdk::ConfigValue* adapter = spec.lora_node && spec.lora_node->is_map() ? spec.lora_node->find("adapter_path") : nullptr;
  try {
    policy.lora = std::make_shared<LoraAdapters>(policy.model.model, spec.lora, spec.lora_seed);
  } catch (const std::exception& e) {
    fail_at_key(spec.lora_node, "model.lora", e.what());
  }
  if (!spec.lora.adapter_path.empty()) {
    try {
      policy.lora->load_peft_folder(spec.lora.adapter_path);
    } catch (const std::exception& e) {
      fail_at_key(adapter, "model.lora.adapter_path", e.what());
    }
  }
  std::int64_t base = 0;
  for (const auto& p : policy.model.model->parameters()) base += p.numel();
  const std::int64_t trained = policy.lora->num_parameters();
  spdlog::info("LoRA: r {}, lora_alpha {} (scaling {}), dropout {}, on {} modules ({}): {} trainable parameters, {:.3f}% of "
               "the {} frozen base weights{}",
               spec.lora.r, spec.lora.lora_alpha, spec.lora.scaling(), spec.lora.lora_dropout, policy.lora->targets().size(),
               join(policy.lora->target_module_names(), ", "), trained, 100.0 * static_cast<double>(trained) / static_cast<double>(base),
               base, spec.lora.adapter_path.empty() ? "" : "; continued from " + spec.lora.adapter_path);
}

}  // namespace grpo::core
