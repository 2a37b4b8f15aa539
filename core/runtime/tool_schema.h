// What the host accepts as a tool's parameters schema (sdk::Tool::parameters(), a JSON Schema
// of an object). Checked when a tool plugin is created (core/runtime/components.cpp), so a bad
// schema fails the configuration at its `tools[i]` entry, and again by the tool-call parsers
// (core/tools/tool_call_parser.h), which check calls against it. Here, below core/tools, because
// the runtime creates the tools and sits below what runs them. Torch-free.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace grpo::core {

// Why `schema` cannot describe a tool's arguments (not an object schema, `required` not a list
// of strings naming properties, a property whose `type` is unknown), or nullopt.
std::optional<std::string> tool_schema_problem(const nlohmann::ordered_json& schema);

}  // namespace grpo::core
