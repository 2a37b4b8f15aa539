// YAML <-> sdk::ConfigValue.
//
// The runtime parses YAML once, here, into the SDK-owned ConfigValue tree (keeping the
// file:line:column of every key and value, and whether a scalar was quoted) so that nothing
// downstream, plugins included, depends on yaml-cpp. yaml-cpp stays private to the .cpp.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "grpo/sdk/config_value.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

// Thrown by parse_yaml for text that is not YAML. what() is the complete message; the parts
// let callers that parse a fragment (a --set value) word the error themselves.
class YamlSyntaxError : public sdk::ConfigError {
 public:
  YamlSyntaxError(const std::string& message, int line, int column, std::string detail)
      : sdk::ConfigError(message), line_(line), column_(column), detail_(std::move(detail)) {}
  int line() const { return line_; }      // 1-based; 0 when yaml-cpp gave no position
  int column() const { return column_; }  // 1-based; 0 when yaml-cpp gave no position
  const std::string& detail() const { return detail_; }  // yaml-cpp's message

 private:
  int line_;
  int column_;
  std::string detail_;
};

// The most values (scalars, lists, maps, nulls) a document may hold once its aliases are
// expanded: far above any configuration, far below what exhausts memory.
inline constexpr std::size_t kMaxConfigValues = 1'000'000;

// Parses one YAML document. `source` names the text in locations and errors (a path, or
// "--set #2"; "" leaves locations unknown and messages without a prefix); lines and columns
// are 1-based. An empty document gives a null value.
// Throws YamlSyntaxError (an sdk::ConfigError):
//   "SOURCE:LINE:COL: YAML syntax error: <yaml-cpp message> (in key 'a.b')"
// and sdk::ConfigError:
//   "SOURCE:LINE:COL: duplicate key 'a.b' (first defined at line N)"
//   "SOURCE:LINE:COL: a.b: map keys must be strings, got a list"
//   "SOURCE:LINE:COL: a.b: recursive alias"
//   "SOURCE:LINE:COL: a.b: the document holds more than 1000000 values once its aliases are
//    expanded ..." (kMaxConfigValues; LINE is the anchor of the value being copied)
//   "SOURCE: contains N YAML documents; expected one"
sdk::ConfigValue parse_yaml(const std::string& text, const std::string& source);

// Reads and parses a YAML file; locations name `path` as given.
// Throws sdk::ConfigError "config file 'PATH': cannot open: <strerror>" when the file is
// missing or unreadable, and the parse_yaml errors above otherwise.
sdk::ConfigValue load_yaml_file(const std::string& path);

// Block-style YAML for a tree such that parse_yaml(to_yaml(v)) has the same structure, the
// same scalar text and the same quoted-ness (a scalar that was quoted stays quoted; a plain
// scalar whose text would not re-parse as itself, such as "null", "a: b" or "", is quoted).
// Empty lists are written `[]`, empty maps `{}`, null `null`. Ends with a newline. The
// effective configuration of a run is written with this function.
std::string to_yaml(const sdk::ConfigValue& value);

// The innermost key enclosing LINE:COLUMN (1-based) of YAML `text`, e.g. "algorithm.policy_loss"
// or "verifiers[1].name", found by scanning block-style lines with an indentation stack.
// Best effort (used only to improve syntax-error messages): "" when no key is found.
std::string enclosing_key_path(const std::string& text, int line, int column);

}  // namespace grpo::core
