// ConfigView: a read-only, typed view of one component's configuration subtree.
//
// Every getter names the full key path and the source location when the value has the
// wrong type, e.g.
//   configs/dapo.yaml:12:16: algorithm.policy_loss.clip_high: expected a number, got "abc"
// Reading a key marks it used; after a factory returns, the host rejects any option the
// component never read (so a typo cannot silently fall back to a default).
// The range-checked getters (get_positive_double, get_double_in_range, get_int_at_least, ...)
// also name the range and the value as written:
//   configs/reinforce_pp.yaml:9:12: algorithm.advantage.gamma: must be in [0, 1], got 1.5
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "grpo/sdk/config_value.h"
#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

// Thrown by ConfigView getters (and by components rejecting their configuration). The
// message is complete: location, key path and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline bool parse_double(const std::string& text, double* out) {
  if (text == ".inf" || text == ".Inf" || text == ".INF" || text == "+.inf") {
    *out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == "-.inf" || text == "-.Inf" || text == "-.INF") {
    *out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  // strtod would accept "nan", "inf", hex floats: YAML spells those differently.
  for (char c : text) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return false;
  }
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE) return false;
  *out = v;
  return true;
}

inline bool parse_int(const std::string& text, std::int64_t* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno == ERANGE) return false;
  *out = static_cast<std::int64_t>(v);
  return true;
}

inline bool parse_bool(const std::string& t, bool* out) {
  if (t == "true" || t == "True" || t == "TRUE" || t == "yes" || t == "Yes" || t == "YES" || t == "on" ||
      t == "On" || t == "ON") {
    *out = true;
    return true;
  }
  if (t == "false" || t == "False" || t == "FALSE" || t == "no" || t == "No" || t == "NO" || t == "off" ||
      t == "Off" || t == "OFF") {
    *out = false;
    return true;
  }
  return false;
}

// `got "abc"` for scalars, `got a map` otherwise.
inline std::string describe_value(const ConfigValue& v) {
  if (v.is_scalar()) return "\"" + v.scalar() + "\"";
  return v.type_description();
}

// A number as YAML would write it: whole numbers in full ("3600"), others the shortest text
// that reads back as `v` ("0.2", "1e-9"), ".inf", "-.inf" or ".nan".
inline std::string format_number(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // whole numbers in full: "3600", not "3.6e3"
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  const std::size_t e = s.find('e');  // "1e-09" -> "1e-9", "4e+09" -> "4e9"
  if (e != std::string::npos) {
    std::size_t digits = e + 1;
    if (s[digits] == '+') s.erase(digits, 1);
    else if (s[digits] == '-') ++digits;
    while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  }
  return s;
}

}  // namespace detail

// Which ends of [lo, hi] belong to a range (ConfigView::get_double_in_range).
enum class Interval {
  kClosed,     // [lo, hi]
  kLeftOpen,   // (lo, hi]
  kRightOpen,  // [lo, hi)
  kOpen,       // (lo, hi)
};

class ConfigView {
 public:
  // `node` may be null: the component then sees an empty configuration (all defaults).
  // `path` is the node's full key path, e.g. "algorithm.policy_loss" or "verifiers[0]".
  ConfigView(const ConfigValue* node, std::string path) : node_(node), path_(std::move(path)) {
    if (node_) node_->mark_used();
  }

  const ConfigValue* node() const { return node_; }
  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // True when the key is present and not null.
  bool has(const std::string& key) const {
    const ConfigValue* v = lookup(key);
    return v && !v->is_null();
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    if (node_ && node_->is_map())
      for (const auto& e : node_->entries()) out.push_back(e.key);
    return out;
  }

  double get_double(const std::string& key, double default_value) const {
    const ConfigValue* v = lookup(key);
    return (v && !v->is_null()) ? to_double(key, *v) : default_value;
  }
  double require_double(const std::string& key) const { return to_double(key, require(key, "a number")); }

  std::int64_t get_int(const std::string& key, std::int64_t default_value) const {
    const ConfigValue* v = lookup(key);
    return (v && !v->is_null()) ? to_int(key, *v) : default_value;
  }
  std::int64_t require_int(const std::string& key) const { return to_int(key, require(key, "an integer")); }

  bool get_bool(const std::string& key, bool default_value) const {
    const ConfigValue* v = lookup(key);
    return (v && !v->is_null()) ? to_bool(key, *v) : default_value;
  }
  bool require_bool(const std::string& key) const { return to_bool(key, require(key, "true or false")); }

  std::string get_string(const std::string& key, const std::string& default_value) const {
    const ConfigValue* v = lookup(key);
    return (v && !v->is_null()) ? to_string(key, *v) : default_value;
  }
  std::string require_string(const std::string& key) const { return to_string(key, require(key, "a string")); }

  // A string restricted to `choices`; the error lists them.
  std::string get_choice(const std::string& key, const std::string& default_value,
                         std::initializer_list<const char*> choices) const {
    std::string s = get_string(key, default_value);
    std::string list;
    for (const char* c : choices) {
      if (s == c) return s;
      list += list.empty() ? "" : ", ";
      list += c;
    }
    fail(key, "expected one of " + list + ", got \"" + s + "\"");
  }

  // A list of strings; a single scalar is accepted as a one-element list.
  std::vector<std::string> get_string_list(const std::string& key, std::vector<std::string> default_value) const {
    const ConfigValue* v = lookup(key);
    if (!v || v->is_null()) return default_value;
    std::vector<std::string> out;
    if (v->is_scalar()) {
      out.push_back(v->scalar());
      return out;
    }
    if (!v->is_sequence()) fail_at(*v, key_path(key), std::string("expected a list of strings, got ") + v->type_description());
    for (size_t i = 0; i < v->items().size(); ++i) {
      const ConfigValue& item = v->items()[i];
      item.mark_used();
      if (!item.is_scalar())
        fail_at(item, key_path(key) + "[" + std::to_string(i) + "]",
                std::string("expected a string, got ") + item.type_description());
      out.push_back(item.scalar());
    }
    return out;
  }

  std::vector<double> get_double_list(const std::string& key, std::vector<double> default_value) const {
    const ConfigValue* v = lookup(key);
    if (!v || v->is_null()) return default_value;
    if (!v->is_sequence()) fail_at(*v, key_path(key), std::string("expected a list of numbers, got ") + v->type_description());
    std::vector<double> out;
    for (size_t i = 0; i < v->items().size(); ++i) {
      const ConfigValue& item = v->items()[i];
      item.mark_used();
      double d = 0;
      if (!item.is_scalar() || !detail::parse_double(item.scalar(), &d))
        fail_at(item, key_path(key) + "[" + std::to_string(i) + "]",
                "expected a number, got " + detail::describe_value(item));
      out.push_back(d);
    }
    return out;
  }

  // ---- Range-checked numbers
  // Each reads like get_double / get_int (absent or null: the default), then rejects a value
  // outside the range, NaN included, with "<location>: <path>.<key>: must be <range>[ <note>],
  // got <value as written>". `note` says more, e.g. "(0 = the number of cores)". A bound at
  // +-infinity reads "must be > lo" / "must be <= hi"; an open one at infinity adds "a finite
  // number": get_double_in_range(key, d, 0, +inf, Interval::kOpen) -> "must be a finite
  // number > 0", get_double_in_range(key, d, 0, +inf, Interval::kLeftOpen) -> "must be > 0"
  // (.inf accepted).

  // A number in [lo, hi], or with open ends as `ends` says.
  double get_double_in_range(const std::string& key, double default_value, double lo, double hi,
                             Interval ends = Interval::kClosed, const std::string& note = "") const {
    const double v = get_double(key, default_value);
    const bool lo_open = ends == Interval::kLeftOpen || ends == Interval::kOpen;
    const bool hi_open = ends == Interval::kRightOpen || ends == Interval::kOpen;
    if ((lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi)) return v;
    std::string range;
    const bool no_lo = std::isinf(lo) && lo < 0, no_hi = std::isinf(hi) && hi > 0;
    if (no_lo && no_hi) {
      range = "a number";
    } else if (no_hi) {
      range = std::string(lo_open ? "> " : ">= ") + detail::format_number(lo);
    } else if (no_lo) {
      range = std::string(hi_open ? "< " : "<= ") + detail::format_number(hi);
    } else {
      range = std::string("in ") + (lo_open ? "(" : "[") + detail::format_number(lo) + ", " +
              detail::format_number(hi) + (hi_open ? ")" : "]");
    }
    if ((no_lo && lo_open) || (no_hi && hi_open)) range = "a finite number" + (no_lo && no_hi ? "" : " " + range);
    fail(key, "must be " + range + (note.empty() ? "" : " " + note) + ", got " + written(key, detail::format_number(v)));
  }
  // A finite number > 0.
  double get_positive_double(const std::string& key, double default_value, const std::string& note = "") const {
    return get_double_in_range(key, default_value, 0.0, std::numeric_limits<double>::infinity(), Interval::kOpen, note);
  }
  // A finite number >= 0.
  double get_non_negative_double(const std::string& key, double default_value, const std::string& note = "") const {
    return get_double_in_range(key, default_value, 0.0, std::numeric_limits<double>::infinity(), Interval::kRightOpen,
                               note);
  }

  // An integer in [lo, hi] ("must be >= lo" when hi is the largest int64, "must be <= hi"
  // when lo is the smallest).
  std::int64_t get_int_in_range(const std::string& key, std::int64_t default_value, std::int64_t lo, std::int64_t hi,
                                const std::string& note = "") const {
    const std::int64_t v = get_int(key, default_value);
    if (v >= lo && v <= hi) return v;
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    const std::string range = hi == kMax   ? ">= " + std::to_string(lo)
                              : lo == kMin ? "<= " + std::to_string(hi)
                                           : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    fail(key, "must be " + range + (note.empty() ? "" : " " + note) + ", got " + written(key, std::to_string(v)));
  }
  // An integer >= min.
  std::int64_t get_int_at_least(const std::string& key, std::int64_t default_value, std::int64_t min,
                                const std::string& note = "") const {
    return get_int_in_range(key, default_value, min, std::numeric_limits<std::int64_t>::max(), note);
  }

  // A nested map. Absent or null gives an empty view; a non-map value is an error.
  ConfigView child(const std::string& key) const {
    const ConfigValue* v = lookup(key);
    if (v && !v->is_null() && !v->is_map())
      fail_at(*v, key_path(key), std::string("expected a map, got ") + v->type_description());
    return ConfigView((v && v->is_map()) ? v : nullptr, key_path(key));
  }

  // Throws ConfigError "<location>: <path>.<key>: <message>" for a value the component
  // rejects (out of range, inconsistent with another option, ...).
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    const ConfigValue* v = peek(key);
    if (v) fail_at(*v, key_path(key), message);
    SourceLocation loc = node_ ? node_->location() : SourceLocation{};
    throw ConfigError(prefix(loc) + key_path(key) + ": " + message);
  }

  [[noreturn]] static void fail_at(const ConfigValue& value, const std::string& path, const std::string& message) {
    throw ConfigError(prefix(value.location()) + path + ": " + message);
  }

 private:
  static std::string prefix(const SourceLocation& loc) {
    std::string s = loc.to_string();
    return s.empty() ? std::string() : s + ": ";
  }

  const ConfigValue* peek(const std::string& key) const {
    if (!node_ || !node_->is_map()) return nullptr;
    return node_->find(key);
  }

  // The key's value as written in the file ("1.5", "-.inf"), else `fallback` (the default).
  std::string written(const std::string& key, const std::string& fallback) const {
    const ConfigValue* v = peek(key);
    return (v && v->is_scalar()) ? v->scalar() : fallback;
  }

  const ConfigValue* lookup(const std::string& key) const {
    if (!node_) return nullptr;
    node_->note_queried_key(key);
    if (!node_->is_map()) return nullptr;
    const ConfigValue* v = node_->find(key);
    if (v) v->mark_used();
    return v;
  }

  const ConfigValue& require(const std::string& key, const char* what) const {
    const ConfigValue* v = lookup(key);
    if (!v || v->is_null()) fail(key, std::string("required option is missing (expected ") + what + ")");
    return *v;
  }

  double to_double(const std::string& key, const ConfigValue& v) const {
    double d = 0;
    if (!v.is_scalar() || !detail::parse_double(v.scalar(), &d))
      fail_at(v, key_path(key), "expected a number, got " + detail::describe_value(v));
    return d;
  }
  std::int64_t to_int(const std::string& key, const ConfigValue& v) const {
    std::int64_t i = 0;
    if (!v.is_scalar() || !detail::parse_int(v.scalar(), &i))
      fail_at(v, key_path(key), "expected an integer, got " + detail::describe_value(v));
    return i;
  }
  bool to_bool(const std::string& key, const ConfigValue& v) const {
    bool b = false;
    if (!v.is_scalar() || !detail::parse_bool(v.scalar(), &b))
      fail_at(v, key_path(key), "expected true or false, got " + detail::describe_value(v));
    return b;
  }
  std::string to_string(const std::string& key, const ConfigValue& v) const {
    if (!v.is_scalar()) fail_at(v, key_path(key), std::string("expected a string, got ") + v.type_description());
    return v.scalar();
  }

  const ConfigValue* node_;
  std::string path_;
};

GRPO_SDK_NAMESPACE_END
