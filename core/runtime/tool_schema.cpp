#include "core/runtime/tool_schema.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace grpo::core {

namespace {

using json = nlohmann::ordered_json;

const char* const kJsonTypes[] = {"string", "number", "integer", "boolean", "object", "array", "null"};

bool is_json_type_name(const std::string& t) {
  return std::find(std::begin(kJsonTypes), std::end(kJsonTypes), t) != std::end(kJsonTypes);
}

}  // namespace

std::optional<std::string> tool_schema_problem(const json& schema) {
  if (!schema.is_object()) return std::string("the parameters schema is not a JSON object");
  if (schema.contains("type") && schema["type"] != "object")
    return "the parameters schema's type is " + schema["type"].dump() + ", expected \"object\"";
  json properties = schema.value("properties", json::object());
  if (!properties.is_object()) return std::string("the schema's `properties` is not an object");
  for (const auto& [name, spec] : properties.items()) {
    if (!spec.is_object()) return "property '" + name + "' is not a schema object";
    if (!spec.contains("type")) continue;
    const json& type = spec["type"];
    std::vector<json> types = type.is_array() ? std::vector<json>(type.begin(), type.end()) : std::vector<json>{type};
    for (const json& t : types)
      if (!t.is_string() || !is_json_type_name(t.get<std::string>()))
        return "property '" + name + "' has type " + t.dump() + "; expected one of string, number, integer, boolean, object, array, null";
  }
  if (schema.contains("required")) {
    const json& required = schema["required"];
    if (!required.is_array()) return std::string("the schema's `required` is not a list");
    for (const json& r : required) {
      if (!r.is_string()) return "`required` holds " + r.dump() + ", not a property name";
      if (!properties.contains(r.get<std::string>()))
        return "`required` names '" + r.get<std::string>() + "', which is not among the properties";
    }
  }
  return std::nullopt;
}

}  // namespace grpo::core
