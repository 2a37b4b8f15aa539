// The schema of the runtime's own configuration keys.
//
// One table (config_schema()) lists every key with its type, default and one-line doc;
// defaults (default_config), validation (validate_config) and the reference documentation
// (config_reference_markdown, i.e. docs/config.md) are all derived from it, so adding a key
// is a one-line change in schema.cpp.
//
// Component nodes (verifiers, algorithm.*, rollout.backend) are checked only for their shape:
// null, a string shorthand `X` for `{name: X}`, or a map with a string `name`. Every other key
// of a component map is an option validated by the component itself when it is created.
#pragma once

#include <string>
#include <vector>

#include "grpo/sdk/config_value.h"

namespace grpo::core {

enum class ConfigType {
  kBool,
  kInt,
  kNumber,
  kString,
  kEnum,           // a string from `choices`
  kStringList,     // a list of strings (a single string is accepted as a one-element list)
  kIntList,        // a list of integers (a single integer is accepted as a one-element list)
  kComponent,      // null | "name" | {name: X, ...options}
  kComponentList,  // a list of component nodes; verifier entries may carry `weight`
  kDataSources,    // a list of data files: "path" or {path, weight | count}
  kMap,            // a map of free-form values (null = empty), e.g. chat template variables
};

struct ConfigKeySpec {
  const char* path;                  // dotted key path, e.g. "run.seed"
  ConfigType type;
  const char* default_yaml;          // the default written as YAML, e.g. "1", "\"runs/grpo\"", "[]", "null"
  const char* doc;                   // one line, shown in docs/config.md
  std::vector<std::string> choices;  // kEnum only
};

// Every key of the runtime, in documentation order.
const std::vector<ConfigKeySpec>& config_schema();

// "bool", "int", "number", "string", "enum", "list of strings", "list of integers", "component",
// "list of components", "list of data sources", "map".
const char* config_type_name(ConfigType type);

// Weight of a verifier entry without `weight`.
inline constexpr double kDefaultVerifierWeight = 1.0;

// The built-in defaults as a tree; every node's location has file "<default>".
sdk::ConfigValue default_config();

// Gives every node (and map key) of `v` the location `loc`: defaults and --set values come
// from one place each, not from a file position.
void relocate(sdk::ConfigValue& v, const sdk::SourceLocation& loc);

// Throws sdk::ConfigError on the first problem, naming the location and key path:
//   "FILE:LINE:COL: unknown key 'run.ouput_dir' (did you mean 'run.output_dir'?)"
//   "FILE:LINE:COL: run.seed: expected an integer, got \"abc\""
//   "FILE:LINE:COL: log.level: expected one of trace, debug, info, warn, error, got \"verbose\""
//   "FILE:LINE:COL: verifiers[0]: component map has no 'name' (a component is written `NAME`
//    or as a map `{name: NAME, ...options}`)"
//   "FILE:LINE:COL: verifiers[0].weight: expected a finite number, got \"heavy\""
//   "FILE:LINE:COL: run: expected a map, got \"5\""
// Accepts the short spellings normalize_config rewrites. Null is accepted for lists (meaning
// empty) and components (meaning none), not for other types.
void validate_config(const sdk::ConfigValue& root);

// validate_config for one top-level section alone: `node` is the value of the key `section`
// (e.g. grpo-generate's `generate:` block, whose file's other top-level keys are not read).
// Throws sdk::ConfigError as validate_config does: "FILE:LINE:COL: unknown key
// 'generate.temprature' (did you mean 'generate.temperature'?)".
void validate_config_section(const sdk::ConfigValue& node, const std::string& section);

// What the schema says about the node at `path` ("" is the root; list items are written
// "verifiers[0]"). Used to merge layers: sections merge, component nodes merge unless they
// name a different component, other values replace.
enum class ConfigNodeKind {
  kUnknown,    // not a runtime key (or inside a component's options)
  kSection,    // the root or a map of runtime keys, e.g. "run", "algorithm"
  kValue,      // a key of any type other than kComponent, e.g. "run.seed", "verifiers"
  kComponent,  // a kComponent key or an item of a kComponentList key
};
ConfigNodeKind config_node_kind(const std::string& path);

// The schema entry for a dotted key path, or nullptr.
const ConfigKeySpec* find_config_key(const std::string& path);

// Puts a configuration layer (a file's tree, or the whole tree after a --set) into canonical
// form, so that later layers and --set paths meet one shape and consumers of the effective
// configuration need not handle the short spellings:
//   - a component shorthand "X" (also as a component-list item) becomes {name: X};
//   - a single string for a list of strings becomes a one-element list;
//   - null for a list becomes [].
// New nodes keep the location of the value they replace. Anything else is left for
// validate_config to report.
void normalize_config(sdk::ConfigValue& root);

// The full text of docs/config.md.
std::string config_reference_markdown();

}  // namespace grpo::core
