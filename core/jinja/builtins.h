// What the interpreter calls on values: Python's operators, attribute and item access with
// Jinja2's sandboxed getattr (methods of str, dict and list; mutating ones refused), and the
// registries of filters, tests and globals. Internal to core/jinja.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/jinja/jinja.h"
#include "core/jinja/value.h"

namespace grpo::core::jinja {

using FilterFn = Value (*)(const Value& input, const CallArgs& args);
using TestFn = bool (*)(const Value& input, const CallArgs& args);

// nullptr when unknown.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
std::vector<std::string> filter_names();
std::vector<std::string> test_names();

// The globals transformers' environment has: range, namespace, dict, raise_exception,
// strftime_now (its clock from `options`). Undefined when unknown.
Value global(const std::string& name, const RenderOptions& options);

// Fails with the undefined value's message (e.g. "'foo' is undefined") when `v` is undefined.
void require_defined(const Value& v);

// obj.name: a dict's key or method, a str/list method, a loop or namespace attribute.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key]: dict key, list/str index (negative from the end); undefined when absent.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] with Python's rules (null parts: undefined or none).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// What `for x in v` iterates: list items, dict keys, string characters, nothing for undefined.
List iterate(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);
// + - * / // % ** ~ with Python's semantics (str % args is printf-style formatting).
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);

}  // namespace grpo::core::jinja
