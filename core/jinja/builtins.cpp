// Filters, tests, globals, methods and operators with Jinja2's (3.1) and CPython's semantics.
// Long because it is one table of small functions: each filter is what jinja2/filters.py does,
// each method what the str/dict/list method does, with the arguments they accept.
#include "core/jinja/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <optional>

#include "core/jinja/pystring.h"
#include "grpo/sdk/utf8.h"

namespace grpo::core::jinja {
namespace {

constexpr std::size_t kMaxRange = 100000;              // jinja2.sandbox.MAX_RANGE
constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;  // results of * and %, like an output cap

// ---- argument binding ----------------------------------------------------------------------

// Binds positional and keyword arguments to `names` (Python's rules); unset ones are nullopt.
std::vector<std::optional<Value>> bind(const CallArgs& a, std::initializer_list<const char*> names,
                                       const std::string& what) {
  std::vector<std::optional<Value>> out(names.size());
  if (a.positional.size() > names.size())
    fail(what + " takes at most " + std::to_string(names.size()) + " argument(s), " +
         std::to_string(a.positional.size()) + " given");
  for (std::size_t i = 0; i < a.positional.size(); ++i) out[i] = a.positional[i];
  for (const auto& [key, v] : a.keyword) {
    std::size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size()) fail(what + " got an unexpected keyword argument '" + key + "'");
    if (out[i]) fail(what + " got multiple values for argument '" + key + "'");
    out[i] = v;
  }
  return out;
}

std::int64_t int_arg(const std::optional<Value>& v, std::int64_t def, const std::string& what) {
  if (!v || v->is_none()) return def;
  if (v->is_int() || v->is_bool()) return v->as_int();
  fail(what + ": expected an integer, got " + v->type_name());
}

bool bool_arg(const std::optional<Value>& v, bool def) { return v ? truthy(*v) : def; }

std::string str_arg(const std::optional<Value>& v, const std::string& what) {
  if (!v) fail(what + ": missing argument");
  if (!v->is_string()) fail(what + ": expected a string, got " + v->type_name());
  return v->as_string();
}

const std::string& need_string(const Value& v, const std::string& what) {
  require_defined(v);
  if (!v.is_string()) fail(what + " needs a string, got " + v.type_name());
  return v.as_string();
}

std::int64_t checked(long double r) {
  if (r > static_cast<long double>(std::numeric_limits<std::int64_t>::max()) ||
      r < static_cast<long double>(std::numeric_limits<std::int64_t>::min()))
    fail("integer overflow (values beyond 64 bits are not supported)");
  return static_cast<std::int64_t>(r);
}

Value make_tuple(List items) { return Value(std::move(items), /*tuple=*/true); }

std::shared_ptr<Callable> make_callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  return std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
}

// Jinja2's attribute lookup for filters taking `attribute=` ("a.b", "0").
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  for (const std::string& part : py::split(path, std::string("."), -1)) {
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      v = get_item(v, Value(static_cast<std::int64_t>(std::stoll(part))));
    else
      v = get_item(v, Value(part));
  }
  return v;
}

// Sort key of sort/unique/min/max/dictsort: lowercased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.as_string()));
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's int(str): whitespace around, optional sign, digits with single underscores.
std::optional<std::int64_t> parse_int(const std::string& text, int base) {
  std::string s = py::strip(text);
  if (s.empty()) return std::nullopt;
  std::string digits;
  std::size_t i = 0;
  if (s[0] == '+' || s[0] == '-') digits += s[i++];
  if (i >= s.size()) return std::nullopt;
  // 0x / 0o / 0b prefixes, allowed when they match the base (or base 0 infers it).
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == prefixed || base == 0)) {
      base = prefixed;
      i += 2;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) return std::nullopt;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && i + 1 < s.size() && s[i + 1] != '_' && digits.size() > 0 && digits.back() != '+' && digits.back() != '-') continue;
    const int d = std::isdigit(static_cast<unsigned char>(s[i])) ? s[i] - '0'
                  : std::isalpha(static_cast<unsigned char>(s[i])) ? std::tolower(static_cast<unsigned char>(s[i])) - 'a' + 10
                                                                     : 99;
    if (d >= base) return std::nullopt;
    digits += s[i];
  }
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno == ERANGE || *end != '\0') return std::nullopt;
  return v;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text);
  if (s.empty()) return std::nullopt;
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (*end != '\0' || end == clean.c_str()) return std::nullopt;
  // strtod accepts hex floats, Python does not.
  if (clean.find('x') != std::string::npos || clean.find('X') != std::string::npos) return std::nullopt;
  return d;
}

double python_round(double x, std::int64_t digits) {
  if (std::isnan(x) || std::isinf(x)) return x;
  if (digits > 300) return x;
  if (digits < -300) return 0.0 * x;
  if (digits == 0) return std::nearbyint(x);
  if (digits > 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);  // correctly rounded, half-even
    return std::strtod(buf, nullptr);
  }
  const double p = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / p) * p;
}

// ---- printf-style formatting: str % args ---------------------------------------------------

std::string percent_format(const std::string& fmt, const Value& args) {
  List positional;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) positional = args.as_list();
  else if (args.is_dict()) mapping = &args.as_dict();
  else positional.push_back(args);
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    Value arg;
    if (fmt[i] == '(') {
      const std::size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) fail("format requires a mapping");
      const Value* v = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!v) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      arg = *v;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ 0#").find(fmt[i]) != std::string::npos) flags += fmt[i++];
    std::string width, precision;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = "";
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) precision += fmt[i++];
      if (precision.empty()) precision = "0";
    }
    if (i >= fmt.size()) fail("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (arg.is_undefined() && !mapping) {
      if (next >= positional.size()) fail("not enough arguments for format string");
      arg = positional[next++];
    }
    std::string piece;
    const std::string spec = "%" + flags + width + (fmt[i - 1] == '.' || !precision.empty() ? "." + precision : "");
    char buf[512];
    switch (conv) {
      case 's': piece = to_str(arg); break;
      case 'r':
      case 'a': piece = repr(arg); break;
      case 'd':
      case 'i':
      case 'u': {
        if (!arg.is_number()) fail("%" + std::string(1, conv) + " format: a real number is required, not " + arg.type_name());
        const std::int64_t v = arg.is_float() ? checked(std::trunc(arg.as_double())) : arg.as_int();
        std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), static_cast<long long>(v));
        piece = buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) fail("must be real number, not " + arg.type_name());
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg.as_double());
        piece = buf;
        break;
      }
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_int() && !arg.is_bool()) fail("%" + std::string(1, conv) + " format: an integer is required");
        std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(), static_cast<long long>(arg.as_int()));
        piece = buf;
        break;
      }
      case 'c': piece = arg.is_string() ? arg.as_string() : std::string(1, static_cast<char>(arg.as_int())); break;
      default: fail(std::string("unsupported format character '") + conv + "'");
    }
    if (conv == 's' || conv == 'r' || conv == 'a' || conv == 'c') {
      if (!precision.empty()) piece = py::from_code_points(py::code_points(piece), 0, std::stoul(precision));
      const std::size_t w = width.empty() ? 0 : std::stoul(width);
      const std::size_t len = py::length(piece);
      if (len < w) {
        if (flags.find('-') != std::string::npos) piece += std::string(w - len, ' ');
        else piece = std::string(w - len, ' ') + piece;
      }
    }
    out += piece;
    if (out.size() > kMaxStringBytes) fail("string too long");
  }
  if (!mapping && next < positional.size()) fail("not all arguments converted during string formatting");
  return out;
}

// str.format: {} {0} {name} and {name.attr}/{0[key]} fields; format specs are not supported.
std::string brace_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fail("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
      fail("str.format with a format spec or conversion ('" + field + "') is not supported");
    std::size_t end = field.find_first_of(".[");
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= a.positional.size()) fail("Replacement index " + std::to_string(auto_index) + " out of range");
      v = a.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const std::size_t idx = std::stoul(head);
      if (idx >= a.positional.size()) fail("Replacement index " + head + " out of range");
      v = a.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, x] : a.keyword)
        if (k == head) {
          v = x;
          found = true;
        }
      if (!found) fail("KeyError: '" + head + "'");
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        const std::size_t nxt = field.find_first_of(".[", end + 1);
        v = get_attribute(v, field.substr(end + 1, nxt == std::string::npos ? std::string::npos : nxt - end - 1));
        end = nxt;
      } else {
        const std::size_t rb = field.find(']', end);
        if (rb == std::string::npos) fail("Missing ']' in format string");
        const std::string key = field.substr(end + 1, rb - end - 1);
        const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); });
        v = get_item(v, numeric ? Value(static_cast<std::int64_t>(std::stoll(key))) : Value(key));
        end = rb + 1;
      }
    }
    require_defined(v);
    out += to_str(v);
  }
  return out;
}

// ---- methods --------------------------------------------------------------------------------

Value unsafe(const Value& obj, const std::string& name) {
  const std::string message =
      "access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe (chat templates may not modify values)";
  return Value(make_callable(name, [message](const CallArgs&) -> Value { fail(message); }));
}

// Long because it is the list of Python str methods templates may call, one short branch each,
// read against Python's documentation; a table of factories would hold the same branches.
Value string_method(const std::string& s, const std::string& name) {
  using Fn = std::function<Value(const CallArgs&)>;
  auto m = [&](Fn fn) { return Value(make_callable(name, std::move(fn))); };
  const std::string what = "str." + name + "()";
  auto opt_str = [what](const std::optional<Value>& v) -> std::optional<std::string> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) fail(what + ": expected a string or None, got " + v->type_name());
    return v->as_string();
  };
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return m([s, starts, what](const CallArgs& a) {
      auto b = bind(a, {"prefix"}, what);
      if (!b[0]) fail(what + " takes at least 1 argument");
      std::vector<std::string> options;
      if (b[0]->is_list()) {
        for (const Value& v : b[0]->as_list()) options.push_back(need_string(v, what));
      } else {
        options.push_back(need_string(*b[0], what));
      }
      for (const auto& o : options)
        if (starts ? s.compare(0, o.size(), o) == 0 && s.size() >= o.size()
                   : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)
          return Value(true);
      return Value(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return m([s, right, what, opt_str](const CallArgs& a) {
      auto b = bind(a, {"sep", "maxsplit"}, what);
      const auto sep = opt_str(b[0]);
      if (sep && sep->empty()) fail(what + ": empty separator");
      const std::int64_t maxsplit = int_arg(b[1], -1, what);
      List out;
      for (auto& part : right ? py::rsplit(s, sep, maxsplit) : py::split(s, sep, maxsplit)) out.emplace_back(part);
      return Value(std::move(out));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return m([s, name, what, opt_str](const CallArgs& a) {
      auto b = bind(a, {"chars"}, what);
      const auto chars = opt_str(b[0]);
      return Value(name == "strip" ? py::strip(s, chars) : name == "lstrip" ? py::lstrip(s, chars) : py::rstrip(s, chars));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase") {
    return m([s, name, what](const CallArgs& a) {
      bind(a, {}, what);
      if (name == "upper") return Value(py::upper(s));
      if (name == "lower") return Value(py::lower(s));
      if (name == "title") return Value(py::title(s));
      if (name == "capitalize") return Value(py::capitalize(s));
      std::string out;
      for (const std::uint32_t c : py::code_points(s)) {
        std::string ch;
        ::grpo::sdk::append_utf8(ch, c);
        const std::string up = py::upper(ch);
        out += up != ch ? up : py::lower(ch);
      }
      return Value(out);
    });
  }
  if (name == "replace") {
    return m([s, what](const CallArgs& a) {
      auto b = bind(a, {"old", "new", "count"}, what);
      return Value(py::replace(s, str_arg(b[0], what), str_arg(b[1], what), int_arg(b[2], -1, what)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    return m([s, name, what](const CallArgs& a) {
      auto b = bind(a, {"sub"}, what);
      const std::string sub = str_arg(b[0], what);
      if (name == "count") return Value(static_cast<std::int64_t>(py::count(s, sub)));
      const long long r = (name == "find" || name == "index") ? py::find(s, sub) : py::rfind(s, sub);
      if (r < 0 && (name == "index" || name == "rindex")) fail("substring not found");
      return Value(static_cast<std::int64_t>(r));
    });
  }
  if (name == "splitlines") {
    return m([s, what](const CallArgs& a) {
      auto b = bind(a, {"keepends"}, what);
      List out;
      for (auto& line : py::splitlines(s, bool_arg(b[0], false))) out.emplace_back(line);
      return Value(std::move(out));
    });
  }
  if (name == "partition" || name == "rpartition") {
    const bool right = name == "rpartition";
    return m([s, right, what](const CallArgs& a) {
      auto b = bind(a, {"sep"}, what);
      const std::string sep = str_arg(b[0], what);
      if (sep.empty()) fail(what + ": empty separator");
      const std::size_t at = right ? s.rfind(sep) : s.find(sep);
      if (at == std::string::npos)
        return make_tuple(right ? List{Value(""), Value(""), Value(s)} : List{Value(s), Value(""), Value("")});
      return make_tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
    });
  }
  if (name == "casefold") {
    return m([s, what](const CallArgs& a) {
      bind(a, {}, what);
      return Value(py::casefold(s));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper" || name == "isnumeric" || name == "isdecimal") {
    return m([s, name, what](const CallArgs& a) {
      bind(a, {}, what);
      if (name == "isalpha") return Value(py::is_alpha_str(s));
      if (name == "isalnum") return Value(py::is_alnum_str(s));
      if (name == "isspace") return Value(py::is_space_str(s));
      if (name == "islower") return Value(py::is_lower_str(s));
      if (name == "isupper") return Value(py::is_upper_str(s));
      return Value(py::is_digit_str(s));
    });
  }
  if (name == "join") {
    return m([s, what](const CallArgs& a) {
      auto b = bind(a, {"iterable"}, what);
      if (!b[0]) fail(what + " takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*b[0])) {
        if (!first) out += s;
        first = false;
        out += need_string(v, what);
      }
      return Value(out);
    });
  }
  if (name == "format") return m([s](const CallArgs& a) { return Value(brace_format(s, a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    return m([s, name, what](const CallArgs& a) {
      auto b = bind(a, {"affix"}, what);
      const std::string x = str_arg(b[0], what);
      if (name == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 && s.size() >= x.size() ? s.substr(x.size()) : s);
      return Value(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
    });
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    return m([s, name, what](const CallArgs& a) {
      auto b = bind(a, {"width", "fillchar"}, what);
      const std::int64_t width = int_arg(b[0], 0, what);
      const std::string fill = b[1] ? str_arg(b[1], what) : (name == "zfill" ? "0" : " ");
      const std::int64_t len = static_cast<std::int64_t>(py::length(s));
      if (width <= len) return Value(s);
      if (width > static_cast<std::int64_t>(kMaxStringBytes)) fail(what + ": width too large");
      auto rep = [&](std::int64_t n) {
        std::string out;
        for (std::int64_t i = 0; i < n; ++i) out += fill;
        return out;
      };
      const std::int64_t pad = width - len;
      if (name == "ljust") return Value(s + rep(pad));
      if (name == "rjust") return Value(rep(pad) + s);
      if (name == "zfill") {
        if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value(s.substr(0, 1) + rep(pad) + s.substr(1));
        return Value(rep(pad) + s);
      }
      const std::int64_t left = pad / 2 + (pad & width & 1);
      return Value(rep(left) + s + rep(pad - left));
    });
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& obj, const std::string& name) {
  const Dict& d = obj.as_dict();
  const std::string what = "dict." + name + "()";
  auto keep = obj;  // the lambdas keep the dict alive
  if (name == "items" || name == "keys" || name == "values") {
    return Value(make_callable(name, [keep, name, what](const CallArgs& a) {
      bind(a, {}, what);
      List out;
      for (const auto& [k, v] : keep.as_dict().items) {
        if (name == "items") out.push_back(make_tuple({Value(k), v}));
        else if (name == "keys") out.emplace_back(k);
        else out.push_back(v);
      }
      return Value(std::move(out));
    }));
  }
  if (name == "get") {
    return Value(make_callable(name, [keep, what](const CallArgs& a) {
      auto b = bind(a, {"key", "default"}, what);
      if (!b[0]) fail(what + " takes at least 1 argument");
      const Value* v = b[0]->is_string() ? keep.as_dict().find(b[0]->as_string()) : nullptr;
      if (v) return *v;
      return b[1] ? *b[1] : Value::none();
    }));
  }
  if (name == "copy") {
    return Value(make_callable(name, [keep, what](const CallArgs& a) {
      bind(a, {}, what);
      return Value(std::make_shared<Dict>(Dict{keep.as_dict().items}));
    }));
  }
  if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
    return unsafe(obj, name);
  (void)d;
  return Value();
}

Value list_method(const Value& obj, const std::string& name) {
  const std::string what = "list." + name + "()";
  auto keep = obj;
  if (name == "index" || name == "count") {
    return Value(make_callable(name, [keep, name, what](const CallArgs& a) {
      auto b = bind(a, {"value"}, what);
      if (!b[0]) fail(what + " takes exactly one argument");
      const List& l = keep.as_list();
      std::int64_t n = 0;
      for (std::size_t i = 0; i < l.size(); ++i) {
        if (!equal(l[i], *b[0])) continue;
        if (name == "index") return Value(static_cast<std::int64_t>(i));
        ++n;
      }
      if (name == "index") fail(repr(*b[0]) + " is not in list");
      return Value(n);
    }));
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
      name == "sort" || name == "reverse" || name == "clear")
    return unsafe(obj, name);
  return Value();
}

// ---- filters ---------------------------------------------------------------------------------

Value f_length(const Value& v, const CallArgs& a) {
  bind(a, {}, "length");
  if (v.is_string()) return Value(static_cast<std::int64_t>(py::length(v.as_string())));
  if (v.is_list()) return Value(static_cast<std::int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<std::int64_t>(v.as_dict().items.size()));
  if (v.is_undefined()) return Value(0);
  fail("object of type '" + v.type_name() + "' has no len()");
}

Value f_trim(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"chars"}, "trim");
  std::optional<std::string> chars;
  if (b[0] && !b[0]->is_none()) chars = str_arg(b[0], "trim");
  return Value(py::strip(to_str(v), chars));
}

Value f_upper(const Value& v, const CallArgs& a) {
  bind(a, {}, "upper");
  return Value(py::upper(to_str(v)));
}
Value f_lower(const Value& v, const CallArgs& a) {
  bind(a, {}, "lower");
  return Value(py::lower(to_str(v)));
}
// Jinja2's do_title (not str.title): words begin after '-', whitespace, '(', '{', '[' or '<';
// each word's first character is uppercased and the rest lowercased.
Value f_title(const Value& v, const CallArgs& a) {
  bind(a, {}, "title");
  std::string out;
  bool word_start = true;
  for (const std::uint32_t c : py::code_points(to_str(v))) {
    std::string ch;
    ::grpo::sdk::append_utf8(ch, c);
    const bool boundary = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    if (boundary) {
      out += ch;
      word_start = true;
      continue;
    }
    out += word_start ? py::upper(ch) : py::lower(ch);
    word_start = false;
  }
  return Value(out);
}
Value f_capitalize(const Value& v, const CallArgs& a) {
  bind(a, {}, "capitalize");
  return Value(py::capitalize(to_str(v)));
}

Value f_replace(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"old", "new", "count"}, "replace");
  if (!b[0] || !b[1]) fail("replace takes at least 2 arguments");
  return Value(py::replace(to_str(v), to_str(*b[0]), to_str(*b[1]), int_arg(b[2], -1, "replace")));
}

Value f_string(const Value& v, const CallArgs& a) {
  bind(a, {}, "string");
  return Value(to_str(v));
}

Value f_int(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"default", "base"}, "int");
  const Value def = b[0] ? *b[0] : Value(0);
  const std::int64_t base = int_arg(b[1], 10, "int");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (std::isnan(v.as_double())) return def;
    if (std::isinf(v.as_double())) fail("cannot convert float infinity to integer");
    return Value(checked(std::trunc(v.as_double())));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), static_cast<int>(base))) return Value(*i);
    if (auto d = parse_float(v.as_string())) {
      if (std::isnan(*d)) return def;
      if (std::isinf(*d)) fail("cannot convert float infinity to integer");
      return Value(checked(std::trunc(*d)));
    }
  }
  return def;
}

Value f_float(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"default"}, "float");
  const Value def = b[0] ? *b[0] : Value(0.0);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return def;
}

Value f_abs(const Value& v, const CallArgs& a) {
  bind(a, {}, "abs");
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
    return Value(static_cast<std::int64_t>(std::llabs(v.as_int())));
  }
  require_defined(v);
  fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"precision", "method"}, "round");
  const std::int64_t precision = int_arg(b[0], 0, "round");
  const std::string method = b[1] ? str_arg(b[1], "round") : "common";
  require_defined(v);
  if (!v.is_number()) fail("round: expected a number, got " + v.type_name());
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // round(int, n) stays an int for n >= 0
    return Value(python_round(v.as_double(), precision));
  }
  if (method != "ceil" && method != "floor") fail("round: method must be 'common', 'ceil' or 'floor'");
  const double p = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_first(const Value& v, const CallArgs& a) {
  bind(a, {}, "first");
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, const CallArgs& a) {
  bind(a, {}, "last");
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_list(const Value& v, const CallArgs& a) {
  bind(a, {}, "list");
  return Value(iterate(v));
}

Value f_reverse(const Value& v, const CallArgs& a) {
  bind(a, {}, "reverse");
  if (v.is_string()) {
    auto cps = py::code_points(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(py::from_code_points(cps, 0, cps.size()));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value f_default(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"default_value", "boolean"}, "default");
  const Value def = b[0] ? *b[0] : Value("");
  if (v.is_undefined() || (bool_arg(b[1], false) && !truthy(v))) return def;
  return v;
}

Value f_join(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"d", "attribute"}, "join");
  const std::string sep = b[0] ? to_str(*b[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(b[1] && !b[1]->is_none() ? attribute_path(item, to_str(*b[1])) : item);
    if (out.size() > kMaxStringBytes) fail("string too long");
  }
  return Value(out);
}

Value f_items(const Value& v, const CallArgs& a) {
  bind(a, {}, "items");
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) fail("items: expected a mapping, got " + v.type_name());
  List out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(make_tuple({Value(k), x}));
  return Value(std::move(out));
}

Value f_tojson(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonDumpOptions o;
  o.ensure_ascii = bool_arg(b[0], false);
  if (b[1] && !b[1]->is_none()) {
    if (b[1]->is_string()) fail("tojson: a string indent is not supported");
    const std::int64_t indent = int_arg(b[1], 0, "tojson");
    if (indent < 0 || indent > 64) fail("tojson: indent must be 0..64");
    o.indent = static_cast<int>(indent);
    o.item_separator = ",";
  }
  if (b[2] && !b[2]->is_none()) {
    if (!b[2]->is_list() || b[2]->as_list().size() != 2) fail("tojson: separators must be an (item, key) pair");
    o.item_separator = need_string(b[2]->as_list()[0], "tojson separators");
    o.key_separator = need_string(b[2]->as_list()[1], "tojson separators");
  }
  o.sort_keys = bool_arg(b[3], false);
  return Value(json_dumps(v, o));
}

Value f_indent(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"width", "first", "blank"}, "indent");
  std::string indention;
  if (b[0] && b[0]->is_string()) {
    indention = b[0]->as_string();
  } else {
    const std::int64_t w = int_arg(b[0], 4, "indent");
    if (w > 4096) fail("indent: width too large");
    indention = std::string(static_cast<std::size_t>(std::max<std::int64_t>(w, 0)), ' ');
  }
  const std::string s = to_str(v) + "\n";  // jinja2's quirk, for splitlines
  const auto lines = py::splitlines(s);
  std::string rv;
  if (bool_arg(b[2], false)) {
    for (std::size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i == 0) rv = lines[0];
      else rv += "\n" + (lines[i].empty() ? lines[i] : indention + lines[i]);
    }
  }
  if (bool_arg(b[1], false)) rv = indention + rv;
  return Value(rv);
}

Value f_center(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"width"}, "center");
  CallArgs m;
  m.positional.push_back(Value(int_arg(b[0], 80, "center")));
  return string_method(to_str(v), "center").as_callable().fn(m);
}

Value f_wordcount(const Value& v, const CallArgs& a) {
  bind(a, {}, "wordcount");
  // len(re.findall(r"\w+", s)): runs of letters, digits and underscores.
  std::int64_t n = 0;
  bool in_word = false;
  for (const std::uint32_t c : py::code_points(to_str(v))) {
    std::string ch;
    ::grpo::sdk::append_utf8(ch, c);
    const bool w = c == '_' || py::is_alnum_str(ch);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_safe(const Value& v, const CallArgs& a) {
  bind(a, {}, "safe");
  return Value::markup(to_str(v));
}

Value f_escape(const Value& v, const CallArgs& a) {
  bind(a, {}, "escape");
  if (v.is_markup()) return v;
  return Value::markup(html_escape(to_str(v)));
}

// jinja2's do_truncate with the default policy leeway of 5.
Value f_truncate(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"length", "killwords", "end", "leeway"}, "truncate");
  const std::int64_t length = int_arg(b[0], 255, "truncate");
  const std::string end = b[2] ? str_arg(b[2], "truncate") : "...";
  const std::int64_t leeway = int_arg(b[3], 5, "truncate");
  const auto end_len = static_cast<std::int64_t>(py::length(end));
  if (length < end_len) fail("truncate: expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) fail("truncate: expected leeway >= 0");
  const std::string s = to_str(v);
  const auto cps = py::code_points(s);
  if (static_cast<std::int64_t>(cps.size()) <= length + leeway) return Value(s);
  const std::string head = py::from_code_points(cps, 0, static_cast<std::size_t>(length - end_len));
  if (bool_arg(b[1], false)) return Value(head + end);
  return Value(py::rsplit(head, std::string(" "), 1).front() + end);
}

// jinja2's do_slice: `slices` lists of about equal length, the first ones longer.
Value f_slice(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"slices", "fill_with"}, "slice");
  const std::int64_t slices = int_arg(b[0], 0, "slice");
  if (slices <= 0 || slices > 100000) fail("slice: the number of slices must be in 1..100000");
  const List seq = iterate(v);
  const auto length = static_cast<std::int64_t>(seq.size());
  const std::int64_t per = length / slices, extra = length % slices;
  std::int64_t offset = 0;
  List out;
  for (std::int64_t n = 0; n < slices; ++n) {
    const std::int64_t start = offset + n * per;
    if (n < extra) ++offset;
    const std::int64_t end = offset + (n + 1) * per;
    List part(seq.begin() + start, seq.begin() + end);
    if (b[1] && !b[1]->is_none() && n >= extra) part.push_back(*b[1]);
    out.emplace_back(std::move(part));
  }
  return Value(std::move(out));
}

Value f_attr(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"name"}, "attr");
  return get_attribute(v, str_arg(b[0], "attr"));
}

Value f_format(const Value& v, const CallArgs& a) {
  if (!a.keyword.empty() && !a.positional.empty()) fail("format: can't handle positional and keyword arguments at the same time");
  if (!a.keyword.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, x] : a.keyword) d->set(k, x);
    return Value(percent_format(to_str(v), Value(d)));
  }
  return Value(percent_format(to_str(v), make_tuple(a.positional)));
}

// select / reject / selectattr / rejectattr
Value select_impl(const Value& v, const CallArgs& a, bool with_attr, bool keep, const char* what) {
  std::size_t i = 0;
  std::string attribute;
  if (with_attr) {
    if (a.positional.empty()) fail(std::string(what) + ": missing the attribute argument");
    attribute = need_string(a.positional[0], what);
    i = 1;
  }
  if (!a.keyword.empty()) fail(std::string(what) + " takes no keyword arguments");
  TestFn test = nullptr;
  CallArgs test_args;
  if (i < a.positional.size()) {
    const std::string name = need_string(a.positional[i], what);
    test = find_test(name);
    if (!test) fail(std::string(what) + ": no test named '" + name + "'");
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(i) + 1, a.positional.end());
  }
  List out;
  for (const Value& item : iterate(v)) {
    const Value x = with_attr ? attribute_path(item, attribute) : item;
    const bool ok = test ? test(x, test_args) : truthy(x);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true, "select"); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false, "reject"); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true, "selectattr"); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false, "rejectattr"); }

Value f_map(const Value& v, const CallArgs& a) {
  List out;
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, x] : a.keyword) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") def = &x;
    else if (a.positional.empty()) fail("map got an unexpected keyword argument '" + k + "'");
  }
  if (attribute) {
    if (!a.positional.empty()) fail("map: attribute= takes no positional arguments");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, to_str(*attribute));
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) fail("map: expected a filter name or attribute=");
  const std::string name = need_string(a.positional[0], "map");
  const FilterFn f = find_filter(name);
  if (!f) fail("map: no filter named '" + name + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v)) out.push_back(f(item, rest));
  return Value(std::move(out));
}

List sorted_items(const Value& v, bool case_sensitive, const std::optional<Value>& attribute, bool reverse) {
  List items = iterate(v);
  std::vector<std::pair<Value, std::size_t>> keyed;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value k = attribute && !attribute->is_none() ? attribute_path(items[i], to_str(*attribute)) : items[i];
    keyed.emplace_back(sort_key(k, case_sensitive), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  List out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return out;
}

Value f_sort(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"reverse", "case_sensitive", "attribute"}, "sort");
  return Value(sorted_items(v, bool_arg(b[1], false), b[2], bool_arg(b[0], false)));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"case_sensitive", "by", "reverse"}, "dictsort");
  const std::string by = b[1] ? str_arg(b[1], "dictsort") : "key";
  if (by != "key" && by != "value") fail("dictsort: by must be 'key' or 'value'");
  const Value pairs = f_items(v, CallArgs{});
  const bool cs = bool_arg(b[0], false);
  List items = pairs.as_list();
  const std::size_t pos = by == "key" ? 0 : 1;
  const bool reverse = bool_arg(b[2], false);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.as_list()[pos], cs), ky = sort_key(y.as_list()[pos], cs);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"case_sensitive", "attribute"}, "unique");
  const bool cs = bool_arg(b[0], false);
  List out, seen;
  for (const Value& item : iterate(v)) {
    const Value key = sort_key(b[1] && !b[1]->is_none() ? attribute_path(item, to_str(*b[1])) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value(std::move(out));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max, const char* what) {
  auto b = bind(a, {"case_sensitive", "attribute"}, what);
  const bool cs = bool_arg(b[0], false);
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  auto key = [&](std::size_t i) {
    return sort_key(b[1] && !b[1]->is_none() ? attribute_path(items[i], to_str(*b[1])) : items[i], cs);
  };
  for (std::size_t i = 1; i < items.size(); ++i)
    if (want_max ? less(key(best), key(i)) : less(key(i), key(best))) best = i;
  return items[best];
}

Value f_min(const Value& v, const CallArgs& a) { return min_max(v, a, false, "min"); }
Value f_max(const Value& v, const CallArgs& a) { return min_max(v, a, true, "max"); }

Value f_sum(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"attribute", "start"}, "sum");
  Value total = b[1] ? *b[1] : Value(0);
  for (const Value& item : iterate(v))
    total = binary_op("+", total, b[0] && !b[0]->is_none() ? attribute_path(item, to_str(*b[0])) : item);
  return total;
}

Value f_batch(const Value& v, const CallArgs& a) {
  auto b = bind(a, {"linecount", "fill_with"}, "batch");
  const std::int64_t n = int_arg(b[0], 0, "batch");
  if (n <= 0) fail("batch: linecount must be positive");
  List out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<std::int64_t>(cur.size()) == n) {
      out.emplace_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (b[1] && !b[1]->is_none())
      while (static_cast<std::int64_t>(cur.size()) < n) cur.push_back(*b[1]);
    out.emplace_back(std::move(cur));
  }
  return Value(std::move(out));
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> f = {
      {"abs", f_abs},          {"attr", f_attr},           {"batch", f_batch},         {"capitalize", f_capitalize},
      {"center", f_center},    {"count", f_length},        {"d", f_default},           {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},           {"escape", f_escape},       {"first", f_first},
      {"float", f_float},      {"format", f_format},       {"indent", f_indent},       {"int", f_int},
      {"items", f_items},      {"join", f_join},           {"last", f_last},           {"length", f_length},
      {"list", f_list},        {"lower", f_lower},         {"map", f_map},             {"max", f_max},
      {"min", f_min},          {"reject", f_reject},       {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse},  {"round", f_round},         {"safe", f_safe},           {"select", f_select},
      {"selectattr", f_selectattr}, {"slice", f_slice},    {"sort", f_sort},           {"string", f_string},
      {"sum", f_sum},          {"title", f_title},         {"tojson", f_tojson},       {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},      {"wordcount", f_wordcount},
  };
  return f;
}

// ---- tests -----------------------------------------------------------------------------------

const Value& one_arg(const CallArgs& a, const char* what) {
  if (a.positional.size() != 1 || !a.keyword.empty()) fail(std::string("test '") + what + "' takes one argument");
  return a.positional[0];
}
void no_args(const CallArgs& a, const char* what) {
  if (!a.positional.empty() || !a.keyword.empty()) fail(std::string("test '") + what + "' takes no arguments");
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> t = {
      {"defined", [](const Value& v, const CallArgs& a) { no_args(a, "defined"); return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs& a) { no_args(a, "undefined"); return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs& a) { no_args(a, "none"); return v.is_none(); }},
      {"boolean", [](const Value& v, const CallArgs& a) { no_args(a, "boolean"); return v.is_bool(); }},
      {"true", [](const Value& v, const CallArgs& a) { no_args(a, "true"); return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const CallArgs& a) { no_args(a, "false"); return v.is_bool() && !v.as_bool(); }},
      {"integer", [](const Value& v, const CallArgs& a) { no_args(a, "integer"); return v.is_int(); }},
      {"float", [](const Value& v, const CallArgs& a) { no_args(a, "float"); return v.is_float(); }},
      {"number", [](const Value& v, const CallArgs& a) { no_args(a, "number"); return v.is_number(); }},
      {"string", [](const Value& v, const CallArgs& a) { no_args(a, "string"); return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs& a) { no_args(a, "mapping"); return v.is_dict() && !v.as_dict().is_namespace && !v.as_dict().is_loop; }},
      // jinja2: len() and __getitem__ work; Undefined has both.
      {"sequence", [](const Value& v, const CallArgs& a) { no_args(a, "sequence"); return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace && !v.as_dict().is_loop); }},
      {"iterable", [](const Value& v, const CallArgs& a) { no_args(a, "iterable"); return v.is_string() || v.is_list() || v.is_undefined() || (v.is_dict() && !v.as_dict().is_namespace && !v.as_dict().is_loop); }},
      {"callable", [](const Value& v, const CallArgs& a) { no_args(a, "callable"); return v.is_callable(); }},
      {"odd", [](const Value& v, const CallArgs& a) {
         no_args(a, "odd");
         if (!v.is_int() && !v.is_bool()) fail("test 'odd' needs an integer, got " + v.type_name());
         return v.as_int() % 2 != 0;
       }},
      {"even", [](const Value& v, const CallArgs& a) {
         no_args(a, "even");
         if (!v.is_int() && !v.is_bool()) fail("test 'even' needs an integer, got " + v.type_name());
         return v.as_int() % 2 == 0;
       }},
      {"divisibleby", [](const Value& v, const CallArgs& a) {
         const Value& n = one_arg(a, "divisibleby");
         if (!(v.is_int() || v.is_bool()) || !(n.is_int() || n.is_bool())) fail("test 'divisibleby' needs integers");
         if (n.as_int() == 0) fail("integer division or modulo by zero");
         return v.as_int() % n.as_int() == 0;
       }},
      {"eq", [](const Value& v, const CallArgs& a) { return equal(v, one_arg(a, "eq")); }},
      {"equalto", [](const Value& v, const CallArgs& a) { return equal(v, one_arg(a, "equalto")); }},
      {"==", [](const Value& v, const CallArgs& a) { return equal(v, one_arg(a, "==")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equal(v, one_arg(a, "ne")); }},
      {"!=", [](const Value& v, const CallArgs& a) { return !equal(v, one_arg(a, "!=")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return less(v, one_arg(a, "lt")); }},
      {"lessthan", [](const Value& v, const CallArgs& a) { return less(v, one_arg(a, "lessthan")); }},
      {"<", [](const Value& v, const CallArgs& a) { return less(v, one_arg(a, "<")); }},
      {"le", [](const Value& v, const CallArgs& a) { return !less(one_arg(a, "le"), v); }},
      {"<=", [](const Value& v, const CallArgs& a) { return !less(one_arg(a, "<="), v); }},
      {"gt", [](const Value& v, const CallArgs& a) { return less(one_arg(a, "gt"), v); }},
      {"greaterthan", [](const Value& v, const CallArgs& a) { return less(one_arg(a, "greaterthan"), v); }},
      {">", [](const Value& v, const CallArgs& a) { return less(one_arg(a, ">"), v); }},
      {"ge", [](const Value& v, const CallArgs& a) { return !less(v, one_arg(a, "ge")); }},
      {">=", [](const Value& v, const CallArgs& a) { return !less(v, one_arg(a, ">=")); }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(one_arg(a, "in"), v); }},
      {"sameas", [](const Value& v, const CallArgs& a) {
         const Value& o = one_arg(a, "sameas");
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.is_bool()) return v.as_bool() == o.as_bool();
         if (v.is_list()) return v.list_ptr() == o.list_ptr();
         if (v.is_dict()) return v.dict_ptr() == o.dict_ptr();
         return false;
       }},
      {"lower", [](const Value& v, const CallArgs& a) { no_args(a, "lower"); return py::is_lower_str(to_str(v)); }},
      {"upper", [](const Value& v, const CallArgs& a) { no_args(a, "upper"); return py::is_upper_str(to_str(v)); }},
      {"filter", [](const Value& v, const CallArgs& a) { no_args(a, "filter"); return v.is_string() && find_filter(v.as_string()) != nullptr; }},
      {"test", [](const Value& v, const CallArgs& a) { no_args(a, "test"); return v.is_string() && find_test(v.as_string()) != nullptr; }},
  };
  return t;
}

std::string strftime_local(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  if (format.empty()) return "";
  std::vector<char> buf(format.size() * 8 + 256);
  const std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  if (n == 0) fail("strftime_now: the format produced nothing or is too long");
  return std::string(buf.data(), n);
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

std::vector<std::string> filter_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : filters()) out.push_back(k);
  return out;
}

std::vector<std::string> test_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : tests())
    if (std::isalpha(static_cast<unsigned char>(k[0]))) out.push_back(k);
  return out;
}

Value global(const std::string& name, const RenderOptions& options) {
  if (name == "range") {
    return Value(make_callable("range", [](const CallArgs& a) {
      if (!a.keyword.empty()) fail("range() takes no keyword arguments");
      std::int64_t start = 0, stop = 0, step = 1;
      auto n = [](const Value& v) {
        if (!v.is_int() && !v.is_bool()) fail("range(): '" + v.type_name() + "' object cannot be interpreted as an integer");
        return v.as_int();
      };
      if (a.positional.size() == 1) stop = n(a.positional[0]);
      else if (a.positional.size() == 2 || a.positional.size() == 3) {
        start = n(a.positional[0]);
        stop = n(a.positional[1]);
        if (a.positional.size() == 3) step = n(a.positional[2]);
      } else {
        fail("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
      }
      if (step == 0) fail("range() arg 3 must not be zero");
      const long double count = step > 0 ? std::ceil(static_cast<long double>(stop - static_cast<long double>(start)) / step)
                                         : std::ceil(static_cast<long double>(start - static_cast<long double>(stop)) / -step);
      if (count > kMaxRange) fail("range too big, the sandbox blocks ranges larger than MAX_RANGE (100000)");
      List out;
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      return Value(std::move(out));
    }));
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value(make_callable(name, [ns, name](const CallArgs& a) {
      auto d = std::make_shared<Dict>();
      d->is_namespace = ns;
      if (a.positional.size() > 1) fail(name + "() takes at most one positional argument");
      if (!a.positional.empty()) {
        const Value& init = a.positional[0];
        if (init.is_dict()) {
          for (const auto& [k, v] : init.as_dict().items) d->set(k, v);
        } else {
          for (const Value& pair : iterate(init)) {
            if (!pair.is_list() || pair.as_list().size() != 2) fail(name + "(): expected (key, value) pairs");
            d->set(need_string(pair.as_list()[0], name + "() key"), pair.as_list()[1]);
          }
        }
      }
      for (const auto& [k, v] : a.keyword) d->set(k, v);
      return Value(d);
    }));
  }
  if (name == "raise_exception") {
    return Value(make_callable(name, [](const CallArgs& a) -> Value {
      auto b = bind(a, {"message"}, "raise_exception");
      throw EvalError{b[0] ? to_str(*b[0]) : "", true};
    }));
  }
  if (name == "strftime_now") {
    auto clock = options.strftime_now;
    return Value(make_callable(name, [clock](const CallArgs& a) {
      auto b = bind(a, {"format"}, "strftime_now");
      const std::string fmt = str_arg(b[0], "strftime_now");
      return Value(clock ? clock(fmt) : strftime_local(fmt));
    }));
  }
  return Value::undefined("'" + name + "' is undefined");
}

void require_defined(const Value& v) {
  if (v.is_undefined()) fail(v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
}

Value get_attribute(const Value& obj, const std::string& name) {
  require_defined(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      const Dict& d = obj.as_dict();
      if (d.is_namespace || d.is_loop) {
        if (const Value* v = d.find(name)) return *v;
        return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
      }
      // Jinja2's getattr: the dict's methods first, then its keys.
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      if (const Value* v = d.find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::kString: return string_method(obj.as_string(), name);
    case Value::Kind::kList: {
      Value m = list_method(obj, name);
      if (!m.is_undefined()) return m;
      break;
    }
    default: break;
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      if (obj.as_dict().is_namespace || obj.as_dict().is_loop) return get_attribute(obj, key.as_string());
    }
    return Value::undefined("'dict object' has no attribute " + repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<std::int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return obj.as_list()[static_cast<std::size_t>(i)];
    }
    const auto cps = py::code_points(obj.as_string());
    const auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value(py::from_code_points(cps, static_cast<std::size_t>(i), static_cast<std::size_t>(i) + 1));
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());  // Jinja2 falls back to getattr
  return Value::undefined("'" + obj.type_name() + " object' has no attribute " + repr(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto idx = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer or None, got " + v.type_name());
    return v.as_int();
  };
  const auto o_start = idx(start, "start"), o_stop = idx(stop, "stop"), o_step = idx(step, "step");
  const std::int64_t st = o_step.value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  std::vector<std::uint32_t> cps;
  std::int64_t n;
  if (obj.is_string()) {
    cps = py::code_points(obj.as_string());
    n = static_cast<std::int64_t>(cps.size());
  } else if (obj.is_list()) {
    n = static_cast<std::int64_t>(obj.as_list().size());
  } else {
    fail("'" + obj.type_name() + "' object is not subscriptable");
  }
  // PySlice_AdjustIndices
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t def_pos, std::int64_t def_neg) {
    if (!v) return st > 0 ? def_pos : def_neg;
    std::int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const std::int64_t b = adjust(o_start, 0, n - 1);
  const std::int64_t e = adjust(o_stop, n, -1);
  std::vector<std::size_t> picks;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<std::size_t>(i));
  if (obj.is_string()) {
    std::string out;
    for (std::size_t i : picks) ::grpo::sdk::append_utf8(out, cps[i]);
    return Value(out);
  }
  List out;
  for (std::size_t i : picks) out.push_back(obj.as_list()[i]);
  return Value(std::move(out), obj.is_tuple());
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace || v.as_dict().is_loop) break;
      List keys;
      for (const auto& [k, x] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const auto cps = py::code_points(v.as_string());
      for (std::size_t i = 0; i < cps.size(); ++i) chars.emplace_back(py::from_code_points(cps, i, i + 1));
      return chars;
    }
    default: break;
  }
  fail("'" + v.type_name() + "' object is not iterable");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    require_defined(item);
    if (!item.is_string()) fail("'in <string>' requires string as left operand, not " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict() && !container.as_dict().is_namespace && !container.as_dict().is_loop)
    return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  if (container.is_list()) {
    for (const Value& x : container.as_list())
      if (equal(x, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  fail("argument of type '" + container.type_name() + "' is not iterable");
}

Value unary_op(const std::string& op, const Value& a) {
  require_defined(a);
  if (op == "not") return Value(!truthy(a));
  if (!a.is_number()) fail("bad operand type for unary " + op + ": '" + a.type_name() + "'");
  if (op == "+") return a.is_float() ? Value(a.as_double()) : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_double());
  return Value(checked(-static_cast<long double>(a.as_int())));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    if (s.size() > kMaxStringBytes) fail("string too long");
    return Value(std::move(s));
  }
  require_defined(a);
  require_defined(b);
  auto unsupported = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool flt = a.is_float() || b.is_float();
    const double x = a.as_double(), y = b.as_double();
    const std::int64_t i = a.as_int(), j = b.as_int();
    if (op == "+") return flt ? Value(x + y) : Value(checked(static_cast<long double>(i) + j));
    if (op == "-") return flt ? Value(x - y) : Value(checked(static_cast<long double>(i) - j));
    if (op == "*") return flt ? Value(x * y) : Value(checked(static_cast<long double>(i) * j));
    if (op == "/") {
      if (y == 0) fail("division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (flt ? y == 0 : j == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (flt) {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        if (op == "%") return Value(m);
        return Value(std::floor((x - m) / y + 0.5));
      }
      if (i == std::numeric_limits<std::int64_t>::min() && j == -1) fail("integer overflow");
      std::int64_t q = i / j, r = i % j;
      if (r != 0 && ((r < 0) != (j < 0))) {
        --q;
        r += j;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    if (op == "**") {
      if (!flt && j >= 0) {
        long double r = 1;
        for (std::int64_t k = 0; k < j; ++k) {
          r *= i;
          if (std::fabs(static_cast<double>(r)) > 9.3e18) fail("integer overflow (values beyond 64 bits are not supported)");
          if (r == 0 || r == 1) break;
        }
        if (r == 1 && i == -1) return Value(static_cast<std::int64_t>(j % 2 ? -1 : 1));
        return Value(checked(r));
      }
      if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
      return Value(std::pow(x, y));
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxStringBytes) fail("string too long");
      // Markup + str escapes the str (Markup.__add__ / __radd__); autoescaping is off otherwise.
      if (a.is_markup() || b.is_markup())
        return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                             (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value(std::move(out), a.is_tuple());
    }
    return unsupported();
  }
  if (op == "*") {
    const Value* seq = (a.is_string() || a.is_list()) ? &a : (b.is_string() || b.is_list()) ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (!seq || !(count->is_int() || count->is_bool())) return unsupported();
    const std::int64_t n = std::max<std::int64_t>(count->as_int(), 0);
    if (seq->is_string()) {
      if (static_cast<long double>(seq->as_string().size()) * n > kMaxStringBytes) fail("string too long");
      std::string out;
      for (std::int64_t k = 0; k < n; ++k) out += seq->as_string();
      return Value(std::move(out));
    }
    if (static_cast<long double>(seq->as_list().size()) * n > 1e6) fail("list too long");
    List out;
    for (std::int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
    return Value(std::move(out), seq->is_tuple());
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  return unsupported();
}

}  // namespace grpo::core::jinja
