// Finding keys in a configuration tree and failing at them: every module that reads its own
// settings from the validated configuration (data, algorithm, optimizer, trainer, dist, apps)
// uses these, so an error always reads "<file>:<line>:<col>: <key.path>: <what was expected>".
// Torch-free and plugin-free: the lowest layer of the core that knows the configuration.
#pragma once

#include <cstdint>

#include <initializer_list>
#include <string>

#include "grpo/sdk/config_value.h"

namespace grpo::core {

// The node at root.k1.k2..., or nullptr when a key is missing or a parent is not a map.
const sdk::ConfigValue* find_config_node(const sdk::ConfigValue& root, std::initializer_list<const char*> keys);

// Throws sdk::ConfigError "<node's file:line:col>: <key>: <message>" (without a location when
// `node` is null): errors about a value found by find_config_node.
[[noreturn]] void fail_at_key(const sdk::ConfigValue* node, const std::string& key, const std::string& message);

// fail_at_key for the key path {"train", "pack_length"} of `root` ("train.pack_length").
[[noreturn]] void fail_at_config_key(const sdk::ConfigValue& root, std::initializer_list<const char*> keys,
                                     const std::string& message);

// `value`, the integer key section.key of `root`, when it is >= min; else a ConfigError naming
// the key: "expected an integer >= MIN, got VALUE".
std::int64_t int_at_least(const sdk::ConfigValue& root, const char* section, const char* key, std::int64_t value,
                          std::int64_t min);

// A configuration value as JSON text (free-form maps such as tokenizer.chat_template_kwargs):
// maps and lists as such, unquoted scalars typed by YAML 1.2's core schema (true/false, null
// or ~, integers, floats, else strings); quoted scalars are strings ("false" stays text).
std::string config_to_json_text(const sdk::ConfigValue& value);

// The component name of a component node (`verifier: math` or `{name: math, ...}`): the string
// itself, or its `name` key.
std::string component_name(const sdk::ConfigValue& node, const std::string& key_path);

}  // namespace grpo::core
