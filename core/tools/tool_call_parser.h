// Tool calls in generated text: the parser formats (rollout.tools.parser), the stop strings
// that end a turn at a call, the check of a call's arguments against the tool's schema, and
// the text an observation is wrapped in. Torch-free.
//
//   hermes  Hermes / Qwen2.5 / Qwen3 (vLLM's `hermes` tool parser):
//             <tool_call>
//             {"name": "calculator", "arguments": {"expression": "12*34"}}
//             </tool_call>
//           One turn may hold several calls; they run in order and their outputs are
//           returned together. The stop string is "</tool_call>".
//   legacy  open-instruct's original tools: the tool's name as a tag around its one string
//           argument, <python>print(1)</python>, <calculator>12*34</calculator>; the stop
//           strings are the closing tags; the output is wrapped "<output>\n...\n</output>\n".
//
// A malformed call (bad JSON, no name, an unknown tool, arguments missing a required property
// or of the wrong JSON type, an opening tag never closed) is still a call: it gets an error
// observation saying what is wrong, so the policy is told, and the rollout goes on.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/runtime/tool_schema.h"

namespace grpo::core {

enum class ToolCallFormat { kHermes, kLegacy };

// "hermes" / "legacy"; nullopt for anything else.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat format);

// What the parser knows of a tool: its name and JSON Schema (an object schema).
struct ToolSignature {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
};

// The schema's one required property of type string, which a legacy call's body binds to;
// nullopt when the schema has none or several.
std::optional<std::string> legacy_argument_name(const nlohmann::ordered_json& schema);

struct ParsedToolCall {
  std::string tool;       // the called name ("" when the call names none)
  std::string arguments;  // a JSON object text (valid when error is empty)
  std::string error;      // non-empty: the call is malformed; this is the error observation
  std::string raw;        // the call's text as generated, for logs
};

class ToolCallParser {
 public:
  // Throws std::invalid_argument when a tool's schema is unusable (tool_schema_problem) or,
  // for `legacy`, lacks the one required string property a tag body binds to, or when two
  // tools share a name.
  ToolCallParser(ToolCallFormat format, std::vector<ToolSignature> tools);

  ToolCallFormat format() const { return format_; }
  // The strings that end a turn at a call.
  std::vector<std::string> stop_strings() const;
  // The calls in one turn's text (the turn's decoded tokens, the stop string included), in
  // order. Empty: the turn made no call, so the trajectory ends. `cut_at_limit`: the turn ended
  // at its length limit, so an opening tag without its closing one is an unfinished call, not
  // a malformed one, and is dropped.
  std::vector<ParsedToolCall> parse(std::string_view turn_text, bool cut_at_limit = false) const;
  // The text around one observation for the policy in this format when no chat template
  // provides it: legacy "<output>\n" + text + "\n</output>\n"; hermes "<tool_response>\n" + text
  // + "\n</tool_response>\n".
  std::string wrap_output(std::string_view text) const;

 private:
  ParsedToolCall check(std::string name, nlohmann::ordered_json arguments, std::string raw) const;
  const ToolSignature* find(std::string_view name) const;

  ToolCallFormat format_;
  std::vector<ToolSignature> tools_;
  std::vector<std::string> legacy_argument_;  // parallel to tools_ (legacy format)
};

}  // namespace grpo::core
