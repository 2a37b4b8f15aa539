#include "core/config/config_access.h"

#include "grpo/sdk/config_view.h"

namespace grpo::core {

const sdk::ConfigValue* find_config_node(const sdk::ConfigValue& root, std::initializer_list<const char*> keys) {
  const sdk::ConfigValue* node = &root;
  for (const char* k : keys) {
    if (!node->is_map()) return nullptr;
    node = node->find(k);
    if (!node) return nullptr;
  }
  return node;
}

void fail_at_key(const sdk::ConfigValue* node, const std::string& key, const std::string& message) {
  if (node) sdk::ConfigView::fail_at(*node, key, message);
  throw sdk::ConfigError(key + ": " + message);
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

std::string component_name(const sdk::ConfigValue& node, const std::string& key_path) {
  if (node.is_scalar()) return node.scalar();
  return sdk::ConfigView(&node, key_path).require_string("name");
}

}  // namespace grpo::core
