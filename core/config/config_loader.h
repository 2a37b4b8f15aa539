// Building the effective configuration of a run from its sources.
//
// Precedence: built-in defaults (schema.h) -> each --config file in order (a later file
// wins) -> each --set override in order -> validate_config. Maps merge key by key; scalars
// and lists replace; a component node that names a different component replaces the earlier
// one instead of inheriting its options. The effective tree keeps the location of every
// value ("<default>", "path:line:col", or "--set #N"); write it with to_yaml (yaml_loader.h).
#pragma once

#include <string>
#include <vector>

#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct ConfigSources {
  std::vector<std::string> files;      // --config, in command-line order
  std::vector<std::string> overrides;  // --set KEY=VALUE, in command-line order
};

// Defaults, then files, then overrides, then validation. The result is in canonical form
// (schema.h normalize_config: components are maps or null, lists are lists). Throws sdk::ConfigError (see
// yaml_loader.h for file errors and schema.h for validation errors), and
//   "FILE:LINE:COL: expected a map of configuration keys at the top level, got a list"
// for a file whose top level is not a map (an empty file is fine).
sdk::ConfigValue load_config(const ConfigSources& sources);

// Merges one layer into `base`: maps merge recursively (a null section such as `run:` with
// every child commented out keeps what `base` has); a component map naming a different
// component than `base`'s replaces it; everything else replaces. `path` is `base`'s key path
// ("" for the root).
void merge_config(sdk::ConfigValue& base, const sdk::ConfigValue& layer, const std::string& path = "");

// Applies one `--set` assignment "a.b.c=VALUE". VALUE is YAML (`3`, `[a, b]`, `{name: x}`,
// `"007"`; empty is null) and is merged into the node at the key like a layer; numeric
// segments index lists (`verifiers.0.weight=2`; one past the end appends). New and replaced
// nodes get the location "--set #INDEX" (INDEX is 1-based, as shown to the user); the tree is
// normalized (normalize_config) before and after, so `verifiers.0.weight=2` reaches into a
// verifier written as the shorthand `- math`. Unknown
// keys are left for validate_config, which reports them at "--set #INDEX". Throws
// sdk::ConfigError "--set #INDEX 'TEXT': <problem>" for a malformed assignment (no '=', an
// empty key or key segment, a key inside a scalar, a bad list index, a YAML error in VALUE).
void apply_override(sdk::ConfigValue& root, const std::string& assignment, int index);

}  // namespace grpo::core
