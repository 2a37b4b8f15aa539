// The tool-call parsers (core/tools/tool_call_parser.h) on well-formed, malformed and partial
// calls. Expected values are written out by hand from the formats' definitions (Hermes /
// Qwen2.5 `<tool_call>` JSON as vLLM's hermes parser reads it; open-instruct's legacy tags).
#include <gtest/gtest.h>

#include "core/tools/tool_call_parser.h"

using grpo::core::ParsedToolCall;
using grpo::core::ToolCallFormat;
using grpo::core::ToolCallParser;
using grpo::core::ToolSignature;
using json = nlohmann::ordered_json;

namespace {

std::vector<ToolSignature> tools() {
  return {{"calculator", json::parse(R"({"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]})")},
          {"python", json::parse(R"({"type": "object", "properties": {"code": {"type": "string"}, "timeout": {"type": "integer"}}, "required": ["code"]})")}};
}

ToolCallParser hermes() { return ToolCallParser(ToolCallFormat::kHermes, tools()); }
ToolCallParser legacy() { return ToolCallParser(ToolCallFormat::kLegacy, tools()); }

}  // namespace

TEST(ToolCallParser, HermesWellFormedCall) {
  const auto calls = hermes().parse("Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n</tool_call>");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].tool, "calculator");
  EXPECT_EQ(calls[0].error, "");
  EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"expression": "12*34"})"));
  EXPECT_EQ(calls[0].raw, "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n</tool_call>");
}

TEST(ToolCallParser, HermesSeveralCallsInOrderAndArgumentsAsAJsonString) {
  const auto calls = hermes().parse(
      "<tool_call>{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}</tool_call> and "
      "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}</tool_call>");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].tool, "python");
  EXPECT_EQ(json::parse(calls[0].arguments)["code"], "print(1)");
  EXPECT_EQ(calls[1].tool, "calculator");
  EXPECT_EQ(calls[1].error, "");
}

TEST(ToolCallParser, NoCallIsNoCall) {
  EXPECT_TRUE(hermes().parse("The answer is \\boxed{4}.").empty());
  EXPECT_TRUE(legacy().parse("The answer is 4; <calc>1</calc> is not a tool here.").empty());
  EXPECT_TRUE(hermes().parse("").empty());
}

TEST(ToolCallParser, MalformedHermesCallsAreErrorObservations) {
  struct Case {
    const char* text;
    const char* error_has;
  } cases[] = {
      {"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+\"</tool_call>", "not valid JSON"},
      {"<tool_call>[1, 2]</tool_call>", "a tool call is a JSON object"},
      {"<tool_call>{\"arguments\": {}}</tool_call>", "a tool call is a JSON object"},
      {"<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>", "unknown tool 'search'; the tools are: calculator, python"},
      {"<tool_call>{\"name\": \"calculator\", \"arguments\": {}}</tool_call>", "needs the argument 'expression'"},
      {"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": 12}}</tool_call>",
       "argument 'expression' of calculator must be of type string, got integer"},
      {"<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"x\", \"timeout\": 1.5}}</tool_call>",
       "argument 'timeout' of python must be of type integer, got number"},
      {"<tool_call>{\"name\": \"calculator\", \"arguments\": [\"1+1\"]}</tool_call>", "must be a JSON object, got array"},
  };
  for (const auto& c : cases) {
    const auto calls = hermes().parse(c.text);
    ASSERT_EQ(calls.size(), 1u) << c.text;
    EXPECT_NE(calls[0].error.find(c.error_has), std::string::npos) << c.text << " -> " << calls[0].error;
    EXPECT_EQ(calls[0].error.rfind("Error: ", 0), 0u) << calls[0].error;
    EXPECT_EQ(calls[0].arguments, "");
  }
}

// A turn that stopped at EOS with a call never closed is told so; one cut at the length limit
// had no room to finish it, so it is not a call at all.
TEST(ToolCallParser, PartialCalls) {
  const std::string partial = "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expr";
  const auto stopped = hermes().parse(partial, /*cut_at_limit=*/false);
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_NE(stopped[0].error.find("not closed with </tool_call>"), std::string::npos) << stopped[0].error;
  EXPECT_TRUE(hermes().parse(partial, /*cut_at_limit=*/true).empty());
  // A complete call before the partial one still runs.
  const auto mixed = hermes().parse(
      "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2\"}}</tool_call>" + partial, true);
  ASSERT_EQ(mixed.size(), 1u);
  EXPECT_EQ(mixed[0].error, "");

  const auto legacy_partial = legacy().parse("<python>print(1)", false);
  ASSERT_EQ(legacy_partial.size(), 1u);
  EXPECT_EQ(legacy_partial[0].error, "Error: the call is not closed with </python>");
  EXPECT_TRUE(legacy().parse("<python>print(1)", true).empty());
}

TEST(ToolCallParser, LegacyTagsBindTheBodyToTheOneRequiredString) {
  const auto calls = legacy().parse("First <python>x = 2\nprint(x * 3)</python> then <calculator>2^10</calculator>");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].tool, "python");
  EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"j({"code": "x = 2\nprint(x * 3)"})j"));
  EXPECT_EQ(calls[0].raw, "<python>x = 2\nprint(x * 3)</python>");
  EXPECT_EQ(calls[1].tool, "calculator");
  EXPECT_EQ(json::parse(calls[1].arguments), json::parse(R"({"expression": "2^10"})"));
}

TEST(ToolCallParser, StopStringsAndOutputWrapping) {
  EXPECT_EQ(hermes().stop_strings(), std::vector<std::string>{"</tool_call>"});
  EXPECT_EQ(legacy().stop_strings(), (std::vector<std::string>{"</calculator>", "</python>"}));
  // open-instruct's format_tool_outputs: "<output>\n" + output + "\n</output>\n".
  EXPECT_EQ(legacy().wrap_output("6"), "<output>\n6\n</output>\n");
  EXPECT_EQ(hermes().wrap_output("6"), "<tool_response>\n6\n</tool_response>\n");
}

TEST(ToolCallParser, SchemasThatCannotWorkAreRefusedUpFront) {
  auto refused = [](ToolCallFormat f, const char* schema) {
    try {
      ToolCallParser(f, {{"t", json::parse(schema)}});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(ToolCallFormat::kHermes, R"({"type": "array"})").find("expected \"object\""), std::string::npos);
  EXPECT_NE(refused(ToolCallFormat::kHermes, R"({"type": "object", "properties": {}, "required": ["x"]})").find("not among the properties"),
            std::string::npos);
  EXPECT_NE(refused(ToolCallFormat::kHermes, R"({"type": "object", "properties": {"x": {"type": "text"}}})").find("has type \"text\""),
            std::string::npos);
  // Legacy needs exactly one required string property for the tag's body.
  EXPECT_NE(refused(ToolCallFormat::kLegacy, R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]})")
                .find("exactly one required property"),
            std::string::npos);
  EXPECT_EQ(refused(ToolCallFormat::kHermes, R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]})"), "");
  EXPECT_NE(refused(ToolCallFormat::kHermes, "3").find("not a JSON object"), std::string::npos);
}

TEST(ToolCallParser, FormatNames) {
  EXPECT_EQ(grpo::core::tool_call_format_from_name("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(grpo::core::tool_call_format_from_name("legacy"), ToolCallFormat::kLegacy);
  EXPECT_FALSE(grpo::core::tool_call_format_from_name("json"));
}
