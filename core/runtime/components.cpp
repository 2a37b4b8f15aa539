#include "core/runtime/components.h"

#include <filesystem>

#include "grpo/sdk/config_view.h"

namespace grpo::core {

void fail_at_key(const sdk::ConfigValue* node, const std::string& key, const std::string& message) {
  if (node) sdk::ConfigView::fail_at(*node, key, message);
  throw sdk::ConfigError(key + ": " + message);
}

const sdk::ConfigValue* find_config_node(const sdk::ConfigValue& root, std::initializer_list<const char*> keys) {
  const sdk::ConfigValue* node = &root;
  for (const char* k : keys) {
    if (!node->is_map()) return nullptr;
    node = node->find(k);
    if (!node) return nullptr;
  }
  return node;
}

namespace {

std::vector<std::string> string_list(const sdk::ConfigValue& root, const char* section, const char* key) {
  return sdk::ConfigView(find_config_node(root, {section}), section).get_string_list(key, {});
}

// The component slots besides verifiers, in construction order.
struct Slot {
  const char* section;
  const char* key;
  sdk::ComponentKind kind;
};
constexpr Slot kSlots[] = {
    {"rollout", "backend", sdk::ComponentKind::kRolloutBackend},
    {"algorithm", "advantage", sdk::ComponentKind::kAdvantage},
    {"algorithm", "policy_loss", sdk::ComponentKind::kPolicyLoss},
    {"algorithm", "kl_estimator", sdk::ComponentKind::kKlEstimator},
};

}  // namespace

std::string component_name(const sdk::ConfigValue& node, const std::string& key_path) {
  if (node.is_scalar()) return node.scalar();
  return sdk::ConfigView(&node, key_path).require_string("name");
}

PluginSearchPath plugin_search_path(const sdk::ConfigValue& root, const std::vector<std::string>& config_files) {
  PluginSearchPath sp;
  sp.explicit_dirs = string_list(root, "plugins", "paths");
  for (const auto& f : config_files) {
    std::filesystem::path dir = std::filesystem::path(f).parent_path();
    sp.config_dirs.push_back(dir.empty() ? "." : dir.string());
  }
  return sp;
}

void fail_at_config_key(const sdk::ConfigValue& root, std::initializer_list<const char*> keys, const std::string& message) {
  std::string path;
  for (const char* k : keys) path += (path.empty() ? "" : ".") + std::string(k);
  fail_at_key(find_config_node(root, keys), path, message);
}

std::int64_t int_at_least(const sdk::ConfigValue& root, const char* section, const char* key, std::int64_t value,
                          std::int64_t min) {
  if (value < min)
    fail_at_config_key(root, {section, key}, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(value));
  return value;
}

void fill_rollout_backend_defaults(sdk::ConfigValue& root) {
  const sdk::ConfigValue* model_path = find_config_node(root, {"model", "path"});
  if (!model_path || !model_path->is_scalar() || model_path->scalar().empty()) return;
  sdk::ConfigValue* rollout = root.find("rollout");
  if (!rollout || !rollout->is_map()) return;
  sdk::ConfigValue* backend = rollout->find("backend");
  if (!backend) return;
  if (backend->is_null()) {
    sdk::ConfigValue node = sdk::ConfigValue::make_map(backend->location());
    node.set("name", sdk::ConfigValue::make_scalar("native", backend->location()), backend->location());
    *backend = std::move(node);
  }
  if (!backend->is_map()) return;
  const sdk::ConfigValue* name = backend->find("name");
  if (!name || !name->is_scalar() || name->scalar() != "native") return;
  auto fill = [&](const char* option, const sdk::ConfigValue* from) {
    if (backend->find(option) || !from || !from->is_scalar() || from->scalar().empty()) return;
    backend->set(option, *from, from->location());
  };
  fill("model", model_path);
  const sdk::ConfigValue* tokenizer_path = find_config_node(root, {"tokenizer", "path"});
  fill("tokenizer", tokenizer_path && tokenizer_path->is_scalar() && !tokenizer_path->scalar().empty() ? tokenizer_path : model_path);
  fill("dtype", find_config_node(root, {"model", "dtype"}));
  if (!backend->find("logprobs"))
    backend->set("logprobs", sdk::ConfigValue::make_scalar("scaled", model_path->location()), model_path->location());
}

void load_configured_plugins(PluginRegistry& registry, const sdk::ConfigValue& root) {
  const auto entries = string_list(root, "plugins", "load");
  for (std::size_t i = 0; i < entries.size(); ++i) {
    try {
      registry.load(entries[i]);
    } catch (const PluginError& e) {
      throw PluginError("plugins.load[" + std::to_string(i) + "]: " + e.what());
    }
  }
}

RuntimeComponents create_components(PluginRegistry& registry, const sdk::ConfigValue& root) {
  RuntimeComponents out;
  if (const sdk::ConfigValue* list = find_config_node(root, {"verifiers"}); list && list->is_sequence()) {
    for (std::size_t i = 0; i < list->items().size(); ++i) {
      const sdk::ConfigValue& node = list->items()[i];
      VerifierSlot slot;
      slot.key_path = "verifiers[" + std::to_string(i) + "]";
      slot.name = component_name(node, slot.key_path);
      const sdk::ConfigValue* options = node.is_map() ? &node : nullptr;
      if (options) slot.weight = sdk::ConfigView(options, slot.key_path).get_double("weight", 1.0);
      slot.verifier = registry.create_verifier(slot.name, options, slot.key_path);
      out.verifiers.push_back(std::move(slot));
    }
  }
  for (const Slot& s : kSlots) {
    const sdk::ConfigValue* node = find_config_node(root, {s.section, s.key});
    if (!node || node->is_null()) continue;
    ConfiguredComponent c;
    c.key_path = std::string(s.section) + "." + s.key;
    c.kind = s.kind;
    c.name = component_name(*node, c.key_path);
    c.object = registry.create(s.kind, c.name, node->is_map() ? node : nullptr, c.key_path);
    out.others.push_back(std::move(c));
  }
  return out;
}

}  // namespace grpo::core
