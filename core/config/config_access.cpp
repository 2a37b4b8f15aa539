#include "core/config/config_access.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

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

namespace {

nlohmann::ordered_json to_json(const sdk::ConfigValue& v) {
  if (v.is_map()) {
    auto o = nlohmann::ordered_json::object();
    for (const auto& e : v.entries()) o[e.key] = to_json(e.value);
    return o;
  }
  if (v.is_sequence()) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& item : v.items()) a.push_back(to_json(item));
    return a;
  }
  if (!v.is_scalar()) return nullptr;
  const std::string& s = v.scalar();
  if (v.quoted()) return s;
  static const std::regex int_re("[-+]?[0-9]+");
  static const std::regex float_re("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (std::regex_match(s, int_re)) {
    std::int64_t i = 0;
    if (sdk::detail::parse_int(s, &i)) return i;
  }
  if (std::regex_match(s, float_re)) {
    double d = 0;
    if (sdk::detail::parse_double(s, &d) && std::isfinite(d)) return d;
  }
  return s;
}

}  // namespace

std::string config_to_json_text(const sdk::ConfigValue& value) { return to_json(value).dump(); }

}  // namespace grpo::core
