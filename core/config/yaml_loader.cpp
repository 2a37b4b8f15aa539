#include "core/config/yaml_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "core/util/fs.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

using sdk::ConfigError;
using sdk::ConfigValue;
using sdk::SourceLocation;

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string kind_of(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "null";
  return "a scalar";
}

// Converts a yaml-cpp document into a ConfigValue, checking what yaml-cpp lets through:
// duplicate keys (yaml-cpp keeps both), non-string keys, and alias cycles (`&a [*a]`, which
// would otherwise recurse forever).
class Builder {
 public:
  Builder(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  ConfigValue build(const YAML::Node& node, const std::string& path) {
    if (node.IsNull() || !node.IsDefined()) return ConfigValue::make_null(location(node.Mark()));
    if (node.IsScalar()) {
      // yaml-cpp tags every non-plain scalar (quoted, literal, folded) "!"; an explicit
      // `!!str` also makes the text a string.
      const std::string& tag = node.Tag();
      bool quoted = tag == "!" || tag == "tag:yaml.org,2002:str";
      return ConfigValue::make_scalar(node.Scalar(), location(node.Mark()), quoted);
    }
    for (const YAML::Node& a : ancestors_)
      if (a.is(node)) fail(location(node.Mark()), path, "recursive alias");
    ancestors_.push_back(node);
    ConfigValue out;
    if (node.IsSequence()) {
      out = ConfigValue::make_sequence(location(node.Mark()));
      std::size_t i = 0;
      for (const YAML::Node& item : node) {
        out.items().push_back(build(item, path + "[" + std::to_string(i) + "]"));
        ++i;
      }
    } else {
      out = ConfigValue::make_map(location(node.Mark()));
      for (auto it = node.begin(); it != node.end(); ++it) add_entry(out, it->first, it->second, path);
    }
    ancestors_.pop_back();
    return out;
  }

 private:
  void add_entry(ConfigValue& map, const YAML::Node& key, const YAML::Node& value, const std::string& path) {
    SourceLocation key_loc = location(key.Mark());
    if (!key.IsScalar()) fail(key_loc, path, "map keys must be strings, got " + kind_of(key));
    const std::string& name = key.Scalar();
    const std::string full = child_path(path, name);
    if (const sdk::ConfigEntry* first = map.find_entry(name)) {
      fail(key_loc, "",
           "duplicate key '" + full + "' (first defined at line " + std::to_string(first->key_location.line) + ")");
    }
    ConfigValue v = build(value, full);
    // An empty value (`key:` then a newline) gets the mark of the *next* token, often on a
    // later line; point at the key instead unless null was spelled out.
    if (v.is_null() && !null_spelled_at(value.Mark())) v.set_location(key_loc);
    map.entries().push_back(sdk::ConfigEntry{name, std::move(key_loc), std::move(v)});
  }

  bool null_spelled_at(const YAML::Mark& m) const {
    if (m.is_null() || m.pos < 0 || static_cast<std::size_t>(m.pos) >= text_.size()) return false;
    for (const char* word : {"~", "null", "Null", "NULL"})
      if (text_.compare(static_cast<std::size_t>(m.pos), std::strlen(word), word) == 0) return true;
    return false;
  }

  SourceLocation location(const YAML::Mark& m) const {
    if (m.is_null()) return SourceLocation{source_, 0, 0};
    return SourceLocation{source_, m.line + 1, m.column + 1};
  }

  [[noreturn]] static void fail(const SourceLocation& loc, const std::string& path, const std::string& message) {
    std::string where = loc.to_string();
    throw ConfigError((where.empty() ? "" : where + ": ") + (path.empty() ? "" : path + ": ") + message);
  }

  const std::string& text_;
  const std::string& source_;
  std::vector<YAML::Node> ancestors_;
};

// Bounds the tree before it is built. An alias copies its anchor's value wherever it is used, so a few
// hundred bytes of nested aliases (a "billion laughs" document) stand for 10^9 values: built, they would
// take gigabytes and many seconds before std::bad_alloc. Counting the expanded values on yaml-cpp's graph
// (which shares aliased nodes) allocates nothing and stops at the limit. Cycles are left to Builder, which
// names them.
class ExpansionCounter {
 public:
  explicit ExpansionCounter(const std::string& source) : source_(source) {}

  void count(const YAML::Node& node) {
    if (++values_ > kMaxConfigValues) fail(node);
    if (!node.IsSequence() && !node.IsMap()) return;
    for (const YAML::Node& a : ancestors_)
      if (a.is(node)) return;
    ancestors_.push_back(node);
    if (node.IsSequence()) {
      std::size_t i = 0;
      for (const YAML::Node& item : node) {
        path_.push_back(Step{nullptr, i++});
        count(item);
        path_.pop_back();
      }
    } else {
      for (auto it = node.begin(); it != node.end(); ++it) {
        path_.push_back(Step{it->first.IsScalar() ? &it->first.Scalar() : nullptr, 0});
        count(it->second);
        path_.pop_back();
      }
    }
    ancestors_.pop_back();
  }

 private:
  struct Step {
    const std::string* key;  // null: a list index
    std::size_t index;
  };

  [[noreturn]] void fail(const YAML::Node& node) const {
    std::string path;
    for (const Step& s : path_) path += s.key ? (path.empty() ? "" : ".") + *s.key : "[" + std::to_string(s.index) + "]";
    const YAML::Mark m = node.Mark();
    // An aliased node's mark is its anchor's: the line shows which definition is being copied.
    const std::string where = m.is_null() ? SourceLocation{source_, 0, 0}.to_string()
                                          : SourceLocation{source_, m.line + 1, m.column + 1}.to_string();
    throw ConfigError((where.empty() ? "" : where + ": ") + (path.empty() ? "" : path + ": ") +
                      "the document holds more than " + std::to_string(kMaxConfigValues) +
                      " values once its aliases are expanded (each *alias copies its anchor's value); "
                      "a configuration never needs that many: is it an alias bomb?");
  }

  const std::string& source_;
  std::size_t values_ = 0;
  std::vector<YAML::Node> ancestors_;
  std::vector<Step> path_;
};

// ---- enclosing_key_path helpers ----

struct KeyOnLine {
  std::string key;
  std::size_t colon = std::string::npos;  // 0-based column of the ':' after the key
  bool block_scalar = false;              // value starts a literal/folded block (| or >)
};

// Recognizes `key:` / `"key":` at `pos`; leaves `found.colon` npos when the line has no key.
KeyOnLine key_at(const std::string& line, std::size_t pos) {
  KeyOnLine found;
  if (pos >= line.size()) return found;
  std::size_t after = std::string::npos;
  std::string key;
  char c = line[pos];
  if (c == '"' || c == '\'') {
    std::size_t close = line.find(c, pos + 1);
    if (close == std::string::npos) return found;
    key = line.substr(pos + 1, close - pos - 1);
    after = close + 1;
    while (after < line.size() && line[after] == ' ') ++after;
    if (after >= line.size() || line[after] != ':') return found;
  } else {
    if (std::strchr("[{&*!|>%@`?#", c)) return found;
    for (std::size_t i = pos; i < line.size(); ++i) {
      if (line[i] == '#' && i > pos && (line[i - 1] == ' ' || line[i - 1] == '\t')) return found;
      if (line[i] == ':' && (i + 1 == line.size() || line[i + 1] == ' ' || line[i + 1] == '\t')) {
        after = i;
        break;
      }
    }
    if (after == std::string::npos) return found;
    key = std::string(trim(std::string_view(line).substr(pos, after - pos)));
    if (key.empty()) return found;
  }
  found.key = key;
  found.colon = after;
  std::string_view rest = trim(std::string_view(line).substr(after + 1));
  found.block_scalar = !rest.empty() && (rest.front() == '|' || rest.front() == '>');
  return found;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

// True when `s`, written plain, parses back as a plain scalar with exactly this text. Asking
// the parser itself is the only reliable test against YAML's many special spellings.
bool plain_round_trips(const std::string& s) {
  if (s.empty()) return false;
  try {
    YAML::Node n = YAML::Load(s);
    return n.IsScalar() && n.Tag() == "?" && n.Scalar() == s;
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string scalar_text(const ConfigValue& v) {
  return (v.quoted() || !plain_round_trips(v.scalar())) ? quote(v.scalar()) : v.scalar();
}

std::string key_text(const std::string& key) { return plain_round_trips(key) ? key : quote(key); }

bool is_inline(const ConfigValue& v) {
  return !((v.is_map() && !v.entries().empty()) || (v.is_sequence() && !v.items().empty()));
}

std::string inline_text(const ConfigValue& v) {
  if (v.is_null()) return "null";
  if (v.is_scalar()) return scalar_text(v);
  return v.is_map() ? "{}" : "[]";
}

// Writes a non-empty map or list as block lines indented by `indent`.
void emit_block(std::string& out, const ConfigValue& v, std::size_t indent) {
  const std::string pad(indent, ' ');
  if (v.is_map()) {
    for (const auto& e : v.entries()) {
      out += pad + key_text(e.key) + ":";
      if (is_inline(e.value)) {
        out += " " + inline_text(e.value) + "\n";
      } else {
        out += "\n";
        emit_block(out, e.value, indent + 2);
      }
    }
    return;
  }
  for (const ConfigValue& item : v.items()) {
    if (is_inline(item)) {
      out += pad + "- " + inline_text(item) + "\n";
      continue;
    }
    // Compact form: the item's first line shares the dash ("- name: x", "- - a").
    std::string nested;
    emit_block(nested, item, indent + 2);
    out += pad + "- " + nested.substr(indent + 2);
  }
}

}  // namespace

std::string enclosing_key_path(const std::string& text, int line, int column) {
  struct Frame {
    std::size_t indent;
    bool item;
    std::size_t index;  // list index for items
    std::string key;    // key name for keys
  };
  std::vector<Frame> stack;
  std::size_t block_scalar_owner = std::string::npos;  // indent of the key owning a | or > block

  std::size_t start = 0;
  for (int line_no = 1; line_no <= line && start <= text.size(); ++line_no) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string s = text.substr(start, end - start);
    start = end + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();

    std::size_t indent = s.find_first_not_of(' ');
    if (indent == std::string::npos || s[indent] == '#') continue;
    if (block_scalar_owner != std::string::npos) {
      if (indent > block_scalar_owner) continue;  // inside a literal block: not keys
      block_scalar_owner = std::string::npos;
    }
    if (indent == 0 && (s.compare(0, 3, "---") == 0 || s.compare(0, 3, "...") == 0)) {
      stack.clear();
      continue;
    }

    // On the error line itself, only a key that ends before the error column encloses it.
    std::vector<Frame> saved;
    if (line_no == line) saved = stack;

    std::size_t pos = indent;
    while (pos < s.size() && s[pos] == '-' && (pos + 1 == s.size() || s[pos + 1] == ' ')) {
      std::size_t next_index = 0;
      while (!stack.empty() && (stack.back().indent > pos || (stack.back().indent == pos && stack.back().item))) {
        if (stack.back().item && stack.back().indent == pos) next_index = stack.back().index + 1;
        stack.pop_back();
      }
      stack.push_back(Frame{pos, true, next_index, {}});
      pos = s.find_first_not_of(' ', pos + 1);
      if (pos == std::string::npos) pos = s.size();
    }
    KeyOnLine key = key_at(s, pos);
    if (line_no == line && (key.colon == std::string::npos || static_cast<int>(key.colon) + 1 >= column)) {
      stack = std::move(saved);
      break;
    }
    if (key.colon == std::string::npos) continue;
    while (!stack.empty() && stack.back().indent >= pos) stack.pop_back();
    stack.push_back(Frame{pos, false, 0, key.key});
    if (key.block_scalar) block_scalar_owner = pos;
  }

  std::string path;
  for (const Frame& f : stack) {
    if (f.item) {
      path += "[" + std::to_string(f.index) + "]";
    } else {
      path += (path.empty() ? "" : ".") + f.key;
    }
  }
  return path;
}

sdk::ConfigValue parse_yaml(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    int column = e.mark.is_null() ? 0 : e.mark.column + 1;
    std::string where = SourceLocation{source, line, column}.to_string();
    std::string key = line > 0 ? enclosing_key_path(text, line, column) : "";
    throw YamlSyntaxError((where.empty() ? "" : where + ": ") + "YAML syntax error: " + e.msg + (key.empty() ? "" : " (in key '" + key + "')"),
                          line, column, e.msg);
  }
  if (docs.empty()) return ConfigValue::make_null(SourceLocation{source, 0, 0});
  if (docs.size() > 1)
    throw ConfigError((source.empty() ? "" : source + ": ") + "contains " + std::to_string(docs.size()) +
                      " YAML documents; expected one");
  ExpansionCounter(source).count(docs.front());
  return Builder(text, source).build(docs.front(), "");
}

sdk::ConfigValue load_yaml_file(const std::string& path) {
  // Open once ourselves to report the OS reason in the documented format (read_file's
  // message has a different shape, and a directory only fails later, on read).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError("config file '" + path + "': cannot open: " + std::strerror(errno));
  struct stat st {};
  bool is_dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(fd);
  if (is_dir) throw ConfigError("config file '" + path + "': cannot open: " + std::strerror(EISDIR));
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception& e) {
    throw ConfigError("config file '" + path + "': " + e.what());
  }
  return parse_yaml(text, path);
}

std::string to_yaml(const sdk::ConfigValue& value) {
  if (is_inline(value)) return inline_text(value) + "\n";
  std::string out;
  emit_block(out, value, 0);
  return out;
}

}  // namespace grpo::core
