#include "core/runtime/policy.h"

#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "core/config/config_access.h"
#include "core/model/checkpoint_dirs.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

void resolve_model_path(sdk::ConfigValue& root) {
  sdk::ConfigValue* model = root.find("model");
  sdk::ConfigValue* path = model && model->is_map() ? model->find("path") : nullptr;
  if (!path || !path->is_scalar() || path->scalar().empty()) return;
  const std::filesystem::path dir = path->scalar();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || std::filesystem::exists(dir / "config.json", ec)) return;
  const auto latest = latest_checkpoint(dir.string());
  if (!latest) return;  // check_policy_files reports the missing config.json
  spdlog::info("model.path: {} is a run directory; using its newest checkpoint {}", dir.string(), *latest);
  *path = sdk::ConfigValue::make_scalar(*latest, path->location());
}

torch::Device policy_device(const sdk::ConfigValue& root) {
  const sdk::ConfigValue* node = find_config_node(root, {"model", "device"});
  const std::string name = sdk::ConfigView(find_config_node(root, {"model"}), "model").get_string("device", "cpu");
  const std::string expected = "expected cpu, cuda or cuda:N, got \"" + name + "\"";
  std::optional<torch::Device> device;
  try {
    device.emplace(name);
  } catch (const std::exception&) {
    fail_at_key(node, "model.device", expected);
  }
  if (!device->is_cpu() && !device->is_cuda()) fail_at_key(node, "model.device", expected);
  if (device->is_cpu()) return *device;
  if (!torch::cuda::is_available())
    fail_at_key(node, "model.device",
                "\"" + name + "\" asked for, but " +
                    (!at::hasCUDA()
                         ? std::string("this build's LibTorch has no CUDA (Debian's libtorch-dev is CPU-only; build against a CUDA "
                                       "LibTorch with -DGRPO_WITH_CUDA=AUTO: docs/precision.md)")
                         : std::string("no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)")));
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (device->has_index() && device->index() >= count)
    fail_at_key(node, "model.device",
                "\"" + name + "\" asked for, but this machine has " + std::to_string(count) + " CUDA device" +
                    (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")"));
  return *device;
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
    if (dtype != needed) {
      const sdk::ConfigValue* dtype_node = find_config_node(root, {"model", "dtype"});
      const bool set_by_user = dtype_node && dtype_node->location().known() && dtype_node->location().file != "<default>";
      const std::string where = set_by_user ? " (" + dtype_node->location().to_string() + ")" : "";
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
  return spec;
}

PolicyFiles check_policy_files(const PolicySpec& spec) {
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

LoadedPolicy load_policy(const PolicySpec& spec) {
  PolicyFiles files = check_policy_files(spec);
  LoadedPolicy policy;
  policy.tokenizer = std::move(files.tokenizer);
  policy.chat_template = std::move(files.chat_template);
  if (!spec.model_path.empty())
    policy.model = load_model(spec.model_path, dtype_from_name(spec.dtype, "model.dtype"), spec.device);
  return policy;
}

}  // namespace grpo::core
