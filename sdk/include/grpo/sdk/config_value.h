// ConfigValue: the SDK-owned configuration tree handed to components.
//
// The host parses YAML into this tree (keeping file:line:column of every node) so that
// plugins never depend on yaml-cpp or on its ABI. Scalars keep their source text; typed
// conversion happens in ConfigView, which names the key path and location on error.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

// Where a value came from. line/column are 1-based; 0 means "not known" (built-in default).
struct SourceLocation {
  std::string file;  // a path, "<default>", or "--set #N"
  int line = 0;
  int column = 0;

  bool known() const { return !file.empty(); }
  // "file:line:column", "file:line", "file", or "" when nothing is known.
  std::string to_string() const {
    if (file.empty()) return {};
    std::string s = file;
    if (line > 0) {
      s += ':' + std::to_string(line);
      if (column > 0) s += ':' + std::to_string(column);
    }
    return s;
  }
};

struct ConfigEntry;

class ConfigValue {
 public:
  enum class Type { kNull, kScalar, kSequence, kMap };

  ConfigValue() = default;
  static ConfigValue make_null(SourceLocation loc = {}) {
    ConfigValue v;
    v.location_ = std::move(loc);
    return v;
  }
  static ConfigValue make_scalar(std::string text, SourceLocation loc = {}, bool quoted = false) {
    ConfigValue v;
    v.type_ = Type::kScalar;
    v.scalar_ = std::move(text);
    v.quoted_ = quoted;
    v.location_ = std::move(loc);
    return v;
  }
  static ConfigValue make_sequence(SourceLocation loc = {}) {
    ConfigValue v;
    v.type_ = Type::kSequence;
    v.location_ = std::move(loc);
    return v;
  }
  static ConfigValue make_map(SourceLocation loc = {}) {
    ConfigValue v;
    v.type_ = Type::kMap;
    v.location_ = std::move(loc);
    return v;
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_scalar() const { return type_ == Type::kScalar; }
  bool is_sequence() const { return type_ == Type::kSequence; }
  bool is_map() const { return type_ == Type::kMap; }
  // "null", "a scalar", "a list", "a map": used in "expected X, got Y" messages.
  const char* type_description() const {
    switch (type_) {
      case Type::kNull: return "null";
      case Type::kScalar: return "a scalar";
      case Type::kSequence: return "a list";
      case Type::kMap: return "a map";
    }
    return "?";
  }

  // Scalar text as written (without quotes). Empty for non-scalars.
  const std::string& scalar() const { return scalar_; }
  // True when the scalar was quoted in the source. Typed getters accept quoted numerals and
  // booleans ("0.2" reads as 0.2); quoting matters when the config is written back as YAML.
  bool quoted() const { return quoted_; }

  const std::vector<ConfigValue>& items() const { return items_; }
  std::vector<ConfigValue>& items() { return items_; }

  // Map entries in source order.
  inline const std::vector<ConfigEntry>& entries() const;
  inline std::vector<ConfigEntry>& entries();
  inline const ConfigValue* find(const std::string& key) const;
  inline ConfigValue* find(const std::string& key);
  inline const ConfigEntry* find_entry(const std::string& key) const;
  // Inserts or replaces (keeping the original position); the value must be a map.
  inline ConfigValue& set(const std::string& key, ConfigValue value, SourceLocation key_location = {});
  inline bool erase(const std::string& key);

  const SourceLocation& location() const { return location_; }
  void set_location(SourceLocation loc) { location_ = std::move(loc); }

  // Access tracking. A ConfigView marks every node it reads; after a component's factory
  // returns, the host reports any option that was never read as unknown. Keys a component
  // asked for (present or not) feed the "did you mean" suggestion.
  void mark_used() const { used_ = true; }
  bool used() const { return used_; }
  void note_queried_key(const std::string& key) const {
    for (const auto& k : queried_keys_)
      if (k == key) return;
    queried_keys_.push_back(key);
  }
  const std::vector<std::string>& queried_keys() const { return queried_keys_; }
  // Clears access marks in the whole subtree.
  inline void reset_usage() const;

 private:
  Type type_ = Type::kNull;
  std::string scalar_;
  bool quoted_ = false;
  std::vector<ConfigValue> items_;
  std::vector<ConfigEntry> entries_;
  SourceLocation location_;
  mutable bool used_ = false;
  mutable std::vector<std::string> queried_keys_;
};

struct ConfigEntry {
  std::string key;
  SourceLocation key_location;
  ConfigValue value;
};

inline const std::vector<ConfigEntry>& ConfigValue::entries() const { return entries_; }
inline std::vector<ConfigEntry>& ConfigValue::entries() { return entries_; }

inline const ConfigEntry* ConfigValue::find_entry(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.key == key) return &e;
  return nullptr;
}
inline const ConfigValue* ConfigValue::find(const std::string& key) const {
  const ConfigEntry* e = find_entry(key);
  return e ? &e->value : nullptr;
}
inline ConfigValue* ConfigValue::find(const std::string& key) {
  for (auto& e : entries_)
    if (e.key == key) return &e.value;
  return nullptr;
}
inline ConfigValue& ConfigValue::set(const std::string& key, ConfigValue value, SourceLocation key_location) {
  if (type_ != Type::kMap) {
    type_ = Type::kMap;
    scalar_.clear();
    items_.clear();
  }
  for (auto& e : entries_) {
    if (e.key == key) {
      e.value = std::move(value);
      if (key_location.known()) e.key_location = std::move(key_location);
      return e.value;
    }
  }
  entries_.push_back(ConfigEntry{key, std::move(key_location), std::move(value)});
  return entries_.back().value;
}
inline bool ConfigValue::erase(const std::string& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key == key) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}
inline void ConfigValue::reset_usage() const {
  used_ = false;
  queried_keys_.clear();
  for (const auto& item : items_) item.reset_usage();
  for (const auto& e : entries_) e.value.reset_usage();
}

GRPO_SDK_NAMESPACE_END
