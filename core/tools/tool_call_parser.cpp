#include "core/tools/tool_call_parser.h"

#include <algorithm>
#include <stdexcept>

#include "core/util/strings.h"

namespace grpo::core {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
// Calls longer than this are not parsed (a runaway generation inside a tag).
constexpr std::size_t kMaxShownRaw = 200;

bool has_json_type(const json& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
  if (t == "boolean") return v.is_boolean();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "null") return v.is_null();
  return false;
}

const char* json_type_of(const json& v) {
  if (v.is_string()) return "string";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  return "null";
}

std::string shown(std::string_view raw) {
  std::string s(raw.substr(0, kMaxShownRaw));
  if (raw.size() > kMaxShownRaw) s += "...";
  return s;
}

std::string trimmed(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "legacy") return ToolCallFormat::kLegacy;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat format) {
  return format == ToolCallFormat::kHermes ? "hermes" : "legacy";
}

std::optional<std::string> legacy_argument_name(const json& schema) {
  if (!schema.is_object() || !schema.contains("required") || !schema["required"].is_array()) return std::nullopt;
  std::optional<std::string> found;
  for (const json& r : schema["required"]) {
    if (!r.is_string()) return std::nullopt;
    const std::string name = r.get<std::string>();
    const json spec = schema.value("properties", json::object()).value(name, json::object());
    if (spec.value("type", json("string")) != "string") return std::nullopt;
    if (found) return std::nullopt;  // two required properties: a tag body cannot fill both
    found = name;
  }
  return found;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, std::vector<ToolSignature> tools)
    : format_(format), tools_(std::move(tools)) {
  for (std::size_t i = 0; i < tools_.size(); ++i) {
    const ToolSignature& t = tools_[i];
    if (auto problem = tool_schema_problem(t.parameters))
      throw std::invalid_argument("tool '" + t.name + "': " + *problem);
    for (std::size_t j = 0; j < i; ++j)
      if (tools_[j].name == t.name) throw std::invalid_argument("two tools are named '" + t.name + "'");
    if (format_ == ToolCallFormat::kLegacy) {
      auto argument = legacy_argument_name(t.parameters);
      if (!argument)
        throw std::invalid_argument("tool '" + t.name +
                                    "' cannot be called in the legacy format: its schema must have exactly one required "
                                    "property, of type string, for the tag's body (use parser: hermes)");
      legacy_argument_.push_back(*argument);
    }
  }
}

const ToolSignature* ToolCallParser::find(std::string_view name) const {
  for (const auto& t : tools_)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> ToolCallParser::stop_strings() const {
  if (format_ == ToolCallFormat::kHermes) return {std::string(kHermesClose)};
  std::vector<std::string> out;
  for (const auto& t : tools_) out.push_back("</" + t.name + ">");
  return out;
}

ParsedToolCall ToolCallParser::check(std::string name, json arguments, std::string raw) const {
  ParsedToolCall call;
  call.tool = std::move(name);
  call.raw = std::move(raw);
  const ToolSignature* tool = find(call.tool);
  if (!tool) {
    std::vector<std::string> names;
    for (const auto& t : tools_) names.push_back(t.name);
    call.error = "Error: unknown tool '" + call.tool + "'; the tools are: " + join(names, ", ");
    return call;
  }
  if (!arguments.is_object()) {
    call.error = "Error: the arguments of " + call.tool + " must be a JSON object, got " + json_type_of(arguments);
    return call;
  }
  const json properties = tool->parameters.value("properties", json::object());
  for (const json& r : tool->parameters.value("required", json::array()))
    if (!arguments.contains(r.get<std::string>())) {
      call.error = "Error: " + call.tool + " needs the argument '" + r.get<std::string>() + "'";
      return call;
    }
  for (const auto& [key, value] : arguments.items()) {
    if (!properties.contains(key)) {
      if (tool->parameters.value("additionalProperties", json(true)) == json(false)) {
        call.error = "Error: " + call.tool + " has no argument '" + key + "'";
        return call;
      }
      continue;
    }
    const json& spec = properties[key];
    if (!spec.contains("type")) continue;
    const json& type = spec["type"];
    std::vector<json> types = type.is_array() ? std::vector<json>(type.begin(), type.end()) : std::vector<json>{type};
    const bool ok = std::any_of(types.begin(), types.end(), [&](const json& t) { return has_json_type(value, t.get<std::string>()); });
    if (!ok) {
      call.error = "Error: argument '" + key + "' of " + call.tool + " must be of type " +
                   (types.size() == 1 ? types[0].get<std::string>() : type.dump()) + ", got " + json_type_of(value);
      return call;
    }
  }
  call.arguments = arguments.dump();
  return call;
}

std::vector<ParsedToolCall> ToolCallParser::parse(std::string_view text, bool cut_at_limit) const {
  std::vector<ParsedToolCall> calls;
  if (format_ == ToolCallFormat::kHermes) {
    for (std::size_t at = text.find(kHermesOpen); at != std::string_view::npos; at = text.find(kHermesOpen, at)) {
      const std::size_t body = at + kHermesOpen.size();
      const std::size_t close = text.find(kHermesClose, body);
      if (close == std::string_view::npos) {
        if (cut_at_limit) break;  // an unfinished call: the turn ran out of room
        ParsedToolCall bad;
        bad.raw = std::string(text.substr(at));
        bad.error = "Error: the tool call is not closed with </tool_call>: " + shown(text.substr(body));
        calls.push_back(std::move(bad));
        break;
      }
      const std::string raw(text.substr(at, close + kHermesClose.size() - at));
      const std::string content = trimmed(text.substr(body, close - body));
      at = close + kHermesClose.size();
      json parsed = json::parse(content, nullptr, /*allow_exceptions=*/false);
      ParsedToolCall bad;
      bad.raw = raw;
      if (parsed.is_discarded()) {
        bad.error = "Error: the tool call is not valid JSON: " + shown(content);
      } else if (!parsed.is_object() || !parsed.contains("name") || !parsed["name"].is_string()) {
        bad.error = "Error: a tool call is a JSON object {\"name\": ..., \"arguments\": {...}}; got " + shown(content);
      } else {
        json arguments = parsed.value("arguments", json::object());
        // Some models write the arguments as a JSON string holding the object (OpenAI's wire form).
        if (arguments.is_string()) {
          json inner = json::parse(arguments.get<std::string>(), nullptr, false);
          if (!inner.is_discarded()) arguments = std::move(inner);
        }
        calls.push_back(check(parsed["name"].get<std::string>(), std::move(arguments), raw));
        continue;
      }
      calls.push_back(std::move(bad));
    }
    return calls;
  }
  // legacy: <name>body</name>, calls in the order of their opening tags.
  std::size_t at = 0;
  for (;;) {
    std::size_t best = std::string_view::npos, which = 0;
    for (std::size_t i = 0; i < tools_.size(); ++i) {
      const std::size_t p = text.find("<" + tools_[i].name + ">", at);
      if (p < best) best = p, which = i;
    }
    if (best == std::string_view::npos) break;
    const std::string open = "<" + tools_[which].name + ">", close = "</" + tools_[which].name + ">";
    const std::size_t body = best + open.size();
    const std::size_t end = text.find(close, body);
    if (end == std::string_view::npos) {
      if (cut_at_limit) break;
      ParsedToolCall bad;
      bad.tool = tools_[which].name;
      bad.raw = std::string(text.substr(best));
      bad.error = "Error: the call is not closed with " + close;
      calls.push_back(std::move(bad));
      break;
    }
    json arguments = json::object();
    arguments[legacy_argument_[which]] = std::string(text.substr(body, end - body));
    calls.push_back(check(tools_[which].name, std::move(arguments), std::string(text.substr(best, end + close.size() - best))));
    at = end + close.size();
  }
  return calls;
}

std::string ToolCallParser::wrap_output(std::string_view text) const {
  if (format_ == ToolCallFormat::kLegacy) return "<output>\n" + std::string(text) + "\n</output>\n";
  return "<tool_response>\n" + std::string(text) + "\n</tool_response>\n";
}

}  // namespace grpo::core
