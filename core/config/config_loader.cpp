#include "core/config/config_loader.h"

#include <cstddef>
#include <string_view>

#include "core/config/schema.h"
#include "core/config/yaml_loader.h"
#include "core/util/strings.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

namespace {

using sdk::ConfigError;
using sdk::ConfigValue;
using sdk::SourceLocation;

// True when both component maps carry a name and the names differ: the later node selects a
// different component, whose options must not be mixed with the earlier one's.
bool names_other_component(const ConfigValue& base, const ConfigValue& layer) {
  const ConfigValue* a = base.find("name");
  const ConfigValue* b = layer.find("name");
  return a && b && a->is_scalar() && b->is_scalar() && a->scalar() != b->scalar();
}

[[noreturn]] void override_error(const std::string& context, const std::string& problem) {
  throw ConfigError(context + ": " + problem);
}

bool is_index(std::string_view s) {
  return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace

void merge_config(sdk::ConfigValue& base, const sdk::ConfigValue& layer, const std::string& path) {
  const ConfigNodeKind kind = config_node_kind(path);
  if (layer.is_null() && kind == ConfigNodeKind::kSection && base.is_map()) return;
  const bool merge_maps = base.is_map() && layer.is_map() &&
                          !(kind == ConfigNodeKind::kComponent && names_other_component(base, layer));
  if (!merge_maps) {
    base = layer;
    return;
  }
  for (const auto& e : layer.entries()) {
    if (ConfigValue* existing = base.find(e.key)) {
      merge_config(*existing, e.value, path.empty() ? e.key : path + "." + e.key);
      for (auto& be : base.entries())
        if (be.key == e.key) be.key_location = e.key_location;  // report the key where it last was set
    } else {
      base.entries().push_back(e);
    }
  }
  base.set_location(layer.location());
}

void apply_override(sdk::ConfigValue& root, const std::string& assignment, int index) {
  const std::string source = "--set #" + std::to_string(index);
  const std::string context = source + " '" + assignment + "'";
  auto fail = [&context](const std::string& problem) { override_error(context, problem); };

  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos) fail("expected KEY=VALUE");
  const std::string key(trim(std::string_view(assignment).substr(0, eq)));
  if (key.empty()) fail("empty key before '='");
  std::vector<std::string> segments;
  for (std::size_t start = 0;;) {
    std::size_t dot = key.find('.', start);
    segments.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (segments.back().empty()) fail("empty segment in key '" + key + "'");
    if (dot == std::string::npos) break;
    start = dot + 1;
  }

  ConfigValue value;
  try {
    // No source name: positions inside VALUE are worded here, relative to the value.
    value = parse_yaml(assignment.substr(eq + 1), "");
  } catch (const YamlSyntaxError& e) {
    std::string at = e.line() > 1 ? "line " + std::to_string(e.line()) + ", column " : "column ";
    fail("YAML syntax error in the value" + (e.column() > 0 ? " at " + at + std::to_string(e.column()) : "") + ": " +
         e.detail());
  } catch (const ConfigError& e) {
    fail(std::string("invalid value: ") + e.what());
  }
  const SourceLocation loc{source, 0, 0};
  relocate(value, loc);

  // Work on a copy so that a failed assignment leaves `root` untouched. A shorthand component
  // written by an earlier layer ("verifiers: [math]") becomes a map here, so that
  // `verifiers.0.weight=2` can reach into it.
  ConfigValue work = root;
  normalize_config(work);

  ConfigValue* node = &work;
  std::string schema_path;  // "verifiers[0].weight": what the schema and merge_config expect
  std::string shown;        // "verifiers.0.weight": as the user wrote it, for messages
  for (const std::string& seg : segments) {
    const std::string parent = shown;
    const std::string parent_shown = parent.empty() ? "the top level" : "'" + parent + "'";
    shown += (shown.empty() ? "" : ".") + seg;
    if (node->is_sequence()) {
      if (!is_index(seg))
        fail(parent_shown + " is a list; select an item with a numeric index, e.g. '" +
             (parent.empty() ? "" : parent + ".") + "0'");
      const std::size_t i = std::stoul(seg);
      auto& items = node->items();
      if (i > items.size())
        fail("index " + seg + " is out of range: " + parent_shown + " has " + std::to_string(items.size()) +
             " items (use " + std::to_string(items.size()) + " to append)");
      if (i == items.size()) items.push_back(ConfigValue::make_null(loc));
      node = &items[i];
      schema_path += "[" + seg + "]";
      continue;
    }
    if (node->is_scalar())
      fail(parent_shown + " is a scalar (\"" + node->scalar() + "\"); it has no key '" + seg + "'");
    if (node->is_null()) *node = ConfigValue::make_map(loc);
    ConfigValue* child = node->find(seg);
    node = child ? child : &node->set(seg, ConfigValue::make_null(loc), loc);
    schema_path += (schema_path.empty() ? "" : ".") + seg;
  }
  merge_config(*node, value, schema_path);
  normalize_config(work);
  root = std::move(work);
}

sdk::ConfigValue load_config(const ConfigSources& sources) {
  ConfigValue root = default_config();
  for (const std::string& file : sources.files) {
    ConfigValue layer = load_yaml_file(file);
    if (layer.is_null()) continue;  // an empty (or all-comment) file
    if (!layer.is_map()) {
      std::string where = layer.location().to_string();
      throw ConfigError(where + ": expected a map of configuration keys at the top level, got " +
                        sdk::detail::describe_value(layer));
    }
    normalize_config(layer);
    merge_config(root, layer, "");
  }
  for (std::size_t i = 0; i < sources.overrides.size(); ++i)
    apply_override(root, sources.overrides[i], static_cast<int>(i) + 1);
  validate_config(root);
  return root;
}

}  // namespace grpo::core
