#include "core/runtime/components.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/runtime/tool_schema.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/torch/advantage.h"
#include "grpo/sdk/torch/kl_estimator.h"
#include "grpo/sdk/torch/policy_loss.h"
#include "grpo/sdk/torch/rollout_backend.h"

namespace grpo::core {

namespace {

std::vector<std::string> string_list(const sdk::ConfigValue& root, const char* section, const char* key) {
  return sdk::ConfigView(find_config_node(root, {section}), section).get_string_list(key, {});
}

// Constructs the component at section.key into `slot` when the config names one.
template <class Interface>
void create_slot(PluginRegistry& registry, const sdk::ConfigValue& root, const char* section, const char* key,
                 ComponentSlot<Interface>& slot) {
  const sdk::ConfigValue* node = find_config_node(root, {section, key});
  if (!node || node->is_null()) return;
  slot.key_path = std::string(section) + "." + key;
  slot.name = component_name(*node, slot.key_path);
  slot.object = registry.create<Interface>(slot.name, node->is_map() ? node : nullptr, slot.key_path);
}

}  // namespace

std::vector<std::string> RuntimeComponents::configured_slots() const {
  std::vector<std::string> out;
  auto add = [&](const auto& slot) {
    if (slot) out.push_back(slot.key_path + "=" + slot.name);
  };
  add(rollout_backend);
  add(advantage);
  add(policy_loss);
  add(kl_estimator);
  return out;
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
  const sdk::ConfigValue* name_node = backend->find("name");
  // A copy: backend->set() below may move the map's entries.
  const std::string name = name_node && name_node->is_scalar() ? name_node->scalar() : std::string();
  if (name != "native" && name != "openai") return;
  auto fill = [&](const char* option, const sdk::ConfigValue* from) {
    if (backend->find(option) || !from || !from->is_scalar() || from->scalar().empty()) return;
    backend->set(option, *from, from->location());
  };
  fill("model", model_path);
  const sdk::ConfigValue* tokenizer_path = find_config_node(root, {"tokenizer", "path"});
  fill("tokenizer", tokenizer_path && tokenizer_path->is_scalar() && !tokenizer_path->scalar().empty() ? tokenizer_path : model_path);
  // openai: the server computes; it needs the folder (config.json, the weights a LoRA sync
  // overlays) and the tokenizer to compare with the server's, nothing of the engine's options.
  if (name == "openai") return;
  // The engine computes in bf16 under bf16-mixed (its weights are bf16 copies of the masters).
  const sdk::ConfigValue* precision = find_config_node(root, {"train", "precision"});
  if (precision && precision->is_scalar() && precision->scalar() == "bf16-mixed" && !backend->find("dtype"))
    backend->set("dtype", sdk::ConfigValue::make_scalar("bfloat16", precision->location()), precision->location());
  fill("dtype", find_config_node(root, {"model", "dtype"}));
  fill("device", find_config_node(root, {"model", "device"}));
  fill("attention", find_config_node(root, {"model", "attention"}));
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

VerifierSlot create_verifier_slot(PluginRegistry& registry, const std::string& name, const sdk::ConfigValue* options,
                                  const std::string& key_path) {
  VerifierSlot slot;
  slot.name = name;
  slot.key_path = key_path;
  if (options) {
    const sdk::ConfigView view(options, key_path);
    slot.weight = view.get_double("weight", 1.0);
    slot.labels = view.get_string_list("label", {});
    for (std::size_t i = 0; i < slot.labels.size(); ++i)
      if (slot.labels[i].empty())
        view.fail("label", "a label must be a non-empty string (rows without a label are scored by every verifier)");
    if (const sdk::ConfigValue* label = options->find("label"); label && label->is_sequence() && slot.labels.empty())
      view.fail("label", "expected a label or a non-empty list of labels, got an empty list");
  }
  std::uint32_t abi_minor = 0;
  slot.verifier = std::static_pointer_cast<sdk::Verifier>(registry.create(
      sdk::ComponentKind::kVerifier, name, options, key_path, PluginRegistry::verifier_host_keys(), &abi_minor));
  // A plugin built for ABI 1.0 has no such vtable slots: calling them would jump into
  // whatever follows verify() in its vtable.
  if (abi_minor >= 1) {
    slot.score_range = slot.verifier->score_range();
    if (slot.score_range != sdk::ScoreRange::kUnit && slot.score_range != sdk::ScoreRange::kUnbounded)
      throw PluginError(key_path + ": verifier '" + name + "' declares an unknown score range (" +
                        std::to_string(static_cast<std::uint32_t>(slot.score_range)) + ")");
    slot.concurrent_calls = slot.verifier->concurrent_calls();
  }
  return slot;
}

ToolSlot create_tool_slot(PluginRegistry& registry, const std::string& name, const sdk::ConfigValue* options,
                          const std::string& key_path) {
  ToolSlot slot;
  slot.name = name;
  slot.key_path = key_path;
  const std::size_t slash = name.rfind('/');
  slot.call_name = slash == std::string::npos ? name : name.substr(slash + 1);
  if (options) {
    const sdk::ConfigView view(options, key_path);
    slot.call_name = view.get_string("as", slot.call_name);
    const bool valid = !slot.call_name.empty() && std::all_of(slot.call_name.begin(), slot.call_name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!valid) view.fail("as", "a tool name is letters, digits, '_', '-' and '.', got '" + slot.call_name + "'");
  }
  slot.tool = std::static_pointer_cast<sdk::Tool>(
      registry.create(sdk::ComponentKind::kTool, name, options, key_path, PluginRegistry::tool_host_keys()));
  slot.description = slot.tool->description();
  slot.parameters = slot.tool->parameters();
  const auto schema = nlohmann::ordered_json::parse(slot.parameters, nullptr, false);
  if (schema.is_discarded())
    throw PluginError(key_path + ": tool '" + name + "' returned parameters that are not JSON: " + slot.parameters.substr(0, 200));
  if (auto problem = tool_schema_problem(schema))
    throw PluginError(key_path + ": tool '" + name + "' has an unusable parameters schema: " + *problem);
  return slot;
}

RuntimeComponents create_components(PluginRegistry& registry, const sdk::ConfigValue& root) {
  RuntimeComponents out;
  if (const sdk::ConfigValue* list = find_config_node(root, {"verifiers"}); list && list->is_sequence()) {
    for (std::size_t i = 0; i < list->items().size(); ++i) {
      const sdk::ConfigValue& node = list->items()[i];
      const std::string key_path = "verifiers[" + std::to_string(i) + "]";
      out.verifiers.push_back(
          create_verifier_slot(registry, component_name(node, key_path), node.is_map() ? &node : nullptr, key_path));
    }
  }
  if (const sdk::ConfigValue* list = find_config_node(root, {"tools"}); list && list->is_sequence()) {
    for (std::size_t i = 0; i < list->items().size(); ++i) {
      const sdk::ConfigValue& node = list->items()[i];
      const std::string key_path = "tools[" + std::to_string(i) + "]";
      out.tools.push_back(create_tool_slot(registry, component_name(node, key_path), node.is_map() ? &node : nullptr, key_path));
      for (std::size_t j = 0; j < i; ++j)
        if (out.tools[j].call_name == out.tools[i].call_name) {
          // At the second tool's `as` when it has one (that is the name to change), else at the tool.
          const sdk::ConfigValue* as = node.is_map() ? node.find("as") : nullptr;
          const std::string first_at = list->items()[j].location().to_string();
          fail_at_key(as ? as : &node, as ? key_path + ".as" : key_path,
                      "a second tool is called '" + out.tools[i].call_name + "' (first: " + out.tools[j].key_path +
                          (first_at.empty() ? std::string() : " at " + first_at) + "); rename one with `as`");
        }
    }
  }
  // Construction order: the backend first (it loads the model), then the algorithm.
  create_slot(registry, root, "rollout", "backend", out.rollout_backend);
  if (out.rollout_backend) {
    std::uint32_t minor = 0;
    for (const auto& c : registry.components())
      if (c.kind == sdk::ComponentKind::kRolloutBackend && (c.name == out.rollout_backend.name ||
                                                            c.plugin + "/" + c.name == out.rollout_backend.name))
        for (const auto& p : registry.plugins())
          if (p.name == c.plugin) minor = p.abi_minor;
    // A backend of an older minor has no such vtable slot.
    out.backend_supports_turns = minor >= 2 && out.rollout_backend->supports_turns();
  }
  create_slot(registry, root, "algorithm", "advantage", out.advantage);
  create_slot(registry, root, "algorithm", "policy_loss", out.policy_loss);
  create_slot(registry, root, "algorithm", "kl_estimator", out.kl_estimator);
  return out;
}

}  // namespace grpo::core
