#include "core/runtime/policy.h"

#include <filesystem>

#include <spdlog/spdlog.h>

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

PolicySpec policy_spec(const sdk::ConfigValue& root) {
  PolicySpec spec;
  const sdk::ConfigView model(find_config_node(root, {"model"}), "model");
  const sdk::ConfigView tokenizer(find_config_node(root, {"tokenizer"}), "tokenizer");
  spec.model_path = model.get_string("path", "");
  spec.dtype = model.get_string("dtype", "float32");
  spec.model_node = find_config_node(root, {"model", "path"});
  spec.tokenizer_path = tokenizer.get_string("path", "");
  spec.tokenizer_node = find_config_node(root, {"tokenizer", "path"});
  if (spec.tokenizer_path.empty()) {
    spec.tokenizer_path = spec.model_path;
    spec.tokenizer_node = spec.model_node;
  }
  spec.chat_template_name = tokenizer.get_string("chat_template_name", "chatml");
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
  }
  return files;
}

LoadedPolicy load_policy(const PolicySpec& spec) {
  PolicyFiles files = check_policy_files(spec);
  LoadedPolicy policy;
  policy.tokenizer = std::move(files.tokenizer);
  if (!spec.model_path.empty())
    policy.model = load_model(spec.model_path, dtype_from_name(spec.dtype, "model.dtype"));
  return policy;
}

}  // namespace grpo::core
