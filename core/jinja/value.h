// The values a Jinja template computes with, in Python's semantics (what transformers renders
// chat templates with: Jinja2 on CPython). Strings are UTF-8 and indexed by code point; ints are
// 64-bit; dicts keep insertion order (JSON objects keep their key order through tojson);
// undefined is Jinja2's default `Undefined` (prints as "", iterates as empty, fails on use).
//
// Lists and dicts are shared by reference, as in Python; the sandbox never mutates them, except
// a namespace's attributes (`{% set ns.x = ... %}`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace grpo::core::jinja {

// A template error: parsing, rendering, or raise_exception(). what() is
// "NAME:LINE: message"; message() is the bare message (raise_exception's own text).
class JinjaError : public std::runtime_error {
 public:
  JinjaError(std::string name, int line, std::string message, bool raised = false);
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  // True when the template called raise_exception(message).
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_;
  bool raised_;
};

// Thrown inside the engine without a location; the interpreter adds the template line.
struct EvalError {
  std::string message;
  bool raised = false;
};
[[noreturn]] void fail(std::string message);

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int i) : kind_(Kind::kInt), int_(i) {}
  Value(std::int64_t i) : kind_(Kind::kInt), int_(i) {}
  Value(double f) : kind_(Kind::kFloat), float_(f) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), str_(s) {}
  Value(std::string_view s) : kind_(Kind::kString), str_(s) {}
  // A string marked safe (Jinja2's Markup, from |safe and |escape): `+` escapes the other side.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.tuple_ = true;
    return v;
  }
  Value(List l, bool tuple = false);
  Value(std::shared_ptr<Dict> d);
  Value(std::shared_ptr<Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // bool excluded
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_markup() const { return kind_ == Kind::kString && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  std::int64_t as_int() const { return int_; }  // ints and bools
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  // The name an undefined value was looked up by (for error messages).
  const std::string& undefined_hint() const { return str_; }
  const List& as_list() const { return *list_; }
  const std::shared_ptr<List>& list_ptr() const { return list_; }
  Dict& as_dict() const { return *dict_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  const Callable& as_callable() const { return *callable_; }

  // Python's type name ("str", "int", "list", "dict", "NoneType", "Undefined", ...).
  std::string type_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;  // lists: a tuple; strings: Markup
  std::int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> callable_;
};

// A dict with string keys in insertion order. Small dicts dominate (messages, tool schemas), so
// lookup is a linear scan.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace(): its attributes may be assigned
  bool is_loop = false;       // a for loop's `loop`
  std::shared_ptr<Callable> call;  // a recursive loop's `loop(...)`

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

// Python's bool(v). Undefined is false.
bool truthy(const Value& v);
// Python's str(v) (what {{ v }} prints): None -> "None", True -> "True", 1.0 -> "1.0",
// lists and dicts as their repr, undefined -> "".
std::string to_str(const Value& v);
// Python's repr(v): strings quoted and escaped as CPython does.
std::string repr(const Value& v);
// Python's repr(float): the shortest text that reads back to the same double.
std::string float_repr(double d);
// Python's ==.
bool equal(const Value& a, const Value& b);
// Python's <, for numbers, strings (code point order) and lists; other pairs fail.
bool less(const Value& a, const Value& b);

// JSON <-> values. Object key order is kept.
Value from_json(const nlohmann::ordered_json& j);
nlohmann::ordered_json to_json(const Value& v);  // fails on undefined and callables

struct JsonDumpOptions {
  std::optional<int> indent;
  std::string item_separator = ", ";  // (',', ': ') by default when indent is set, as Python
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python's json.dumps(v, ...), as transformers' tojson filter calls it.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace grpo::core::jinja
