// The calculator tool, loaded through the PluginRegistry from the build's plugin folder the way
// a run loads it. Every expected value was computed independently with Python's int and
// fractions.Fraction (and "%.12g" for the decimals), not with the parser under test.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grpo/sdk/config_value.h"
#include "grpo/sdk/tool.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::Tool;
using grpo::sdk::ToolObservation;
using json = nlohmann::json;
using Option = grpo::testing::PluginOption;

std::shared_ptr<Tool> make(const std::vector<Option>& opts = {}) {
  return grpo::testing::create_component<Tool>("calculator", opts, "tools[0]");
}

const Tool& calculator() {
  static const std::shared_ptr<Tool> tool = make();
  return *tool;
}

ToolObservation calc(const std::string& expression, const Tool& tool = calculator()) {
  grpo::sdk::ToolCallContext context;
  context.trajectory_id = "t0";
  context.timeout_s = 5.0;
  context.metadata = "{}";
  return tool.call(json{{"expression", expression}}.dump(), context);
}

// The observation text of a successful call.
std::string value(const std::string& expression) {
  const ToolObservation obs = calc(expression);
  EXPECT_FALSE(obs.is_error) << expression << ": " << obs.text;
  return obs.text;
}

TEST(CalculatorTool, DescribesItselfWithARequiredExpression) {
  const Tool& tool = calculator();
  EXPECT_FALSE(tool.description().empty());
  const json schema = json::parse(tool.parameters());
  EXPECT_EQ(schema["type"], "object");
  EXPECT_EQ(schema["properties"]["expression"]["type"], "string");
  EXPECT_EQ(schema["required"], json::array({"expression"}));
}

TEST(CalculatorTool, IntegersAreExact) {
  EXPECT_EQ(value("48213*572"), "27577836");
  EXPECT_EQ(value("48213 * 572"), "27577836");
  EXPECT_EQ(value("123456789 * 987654321"), "121932631112635269");
  EXPECT_EQ(value("99999999999 * 99999999999"), "9999999999800000000001");
  EXPECT_EQ(value("20!"), "2432902008176640000");
  // 2^127 - 1, the largest 128-bit part (2^127 itself is past it: see the approximate results)
  EXPECT_EQ(value("2^126 + (2^126 - 1)"), "170141183460469231731687303715884105727");
  EXPECT_EQ(value("2**100"), "1267650600228229401496703205376");
  EXPECT_EQ(value("1.5e3 * 2"), "3000");
  EXPECT_EQ(value("(1/3) * 3"), "1");
}

TEST(CalculatorTool, PrecedenceAndAssociativity) {
  EXPECT_EQ(value("2 + 3 * 4"), "14");
  EXPECT_EQ(value("(2 + 3) * 4"), "20");
  EXPECT_EQ(value("2^10"), "1024");       // the whole exponent, not TeX's 2^{1}0
  EXPECT_EQ(value("2**10"), "1024");
  EXPECT_EQ(value("2^3^2"), "512");       // right-associative
  EXPECT_EQ(value("-2^2"), "-4");         // the power binds tighter than the sign
  EXPECT_EQ(value("100 / 10 / 5"), "2");  // left-associative
  EXPECT_EQ(value("2(3 + 4)"), "14");     // implicit product
}

TEST(CalculatorTool, FractionsAreReducedWithADecimal) {
  EXPECT_EQ(value("7/3"), "7/3 \u2248 2.33333333333");
  EXPECT_EQ(value("14/6"), "7/3 \u2248 2.33333333333");
  EXPECT_EQ(value("22/7"), "22/7 \u2248 3.14285714286");
  EXPECT_EQ(value("(3/4)^2 - 1/8"), "7/16 = 0.4375");  // a finite decimal is exact: "="
  EXPECT_EQ(value("0.1 + 0.2"), "3/10 = 0.3");         // decimals are exact rationals, not doubles
  EXPECT_EQ(value("1/3 + 1/6"), "1/2 = 0.5");
  EXPECT_EQ(value("-5/4"), "-5/4 = -1.25");
  EXPECT_EQ(value("\\frac{10}{4}"), "5/2 = 2.5");  // LaTeX
  EXPECT_EQ(value("\\frac{7}{3} \\cdot 3"), "7");
  const json d = json::parse(calc("7/3").details);
  EXPECT_EQ(d["exact"], true);
  EXPECT_EQ(d["value"], "7/3");
  EXPECT_EQ(d["decimal"], "2.33333333333");
}

TEST(CalculatorTool, IrrationalAndHugeResultsAreMarkedApproximate) {
  EXPECT_EQ(value("sqrt(2)"), "\u2248 1.41421356237");
  EXPECT_EQ(value("\\sqrt{2}"), "\u2248 1.41421356237");
  EXPECT_EQ(value("2^200"), "\u2248 1.60693804426e+60");  // past 128 bits: a double
  const json d = json::parse(calc("sqrt(2)").details);
  EXPECT_EQ(d["exact"], false);
}

TEST(CalculatorTool, ErrorsAreErrorObservationsNotExceptions) {
  struct Case {
    std::string expression, reason;
  };
  for (const Case& c : std::vector<Case>{{"1/0", "division by zero"},
                                         {"5 / (2 - 2)", "division by zero"},
                                         {"2 +", "could not parse"},
                                         {"(1 + 2", "could not parse"},
                                         {"x + 1", "unknown name 'x'"},
                                         {"import os", "unknown name 'import'"},
                                         {"2 3", "two numbers separated by a space"},
                                         {"10^400", "not a finite number"},
                                         {"sqrt(-1)", "not a real number"},
                                         {"", "could not parse"}}) {
    ToolObservation obs;
    ASSERT_NO_THROW(obs = calc(c.expression)) << c.expression;
    EXPECT_TRUE(obs.is_error) << c.expression << ": " << obs.text;
    EXPECT_EQ(obs.text.rfind("Error: ", 0), 0u) << obs.text;
    EXPECT_NE(obs.text.find(c.reason), std::string::npos) << c.expression << ": " << obs.text;
    EXPECT_EQ(obs.text.find('\n'), std::string::npos) << "a one-line reason: " << obs.text;
  }
}

TEST(CalculatorTool, BadArgumentsAndLongExpressions) {
  grpo::sdk::ToolCallContext context;
  for (const std::string& args : {std::string("{}"), std::string("{\"expression\": 5}"), std::string("not json")}) {
    const ToolObservation obs = calculator().call(args, context);
    EXPECT_TRUE(obs.is_error) << args;
    EXPECT_NE(obs.text.find("expression"), std::string::npos) << obs.text;
  }
  const std::shared_ptr<Tool> short_tool = make({{"max_chars", "10"}});
  EXPECT_EQ(calc("1+2+3+4+5", *short_tool).text, "15");
  const ToolObservation obs = calc("1+2+3+4+5+6", *short_tool);
  EXPECT_TRUE(obs.is_error);
  EXPECT_NE(obs.text.find("longer than 10 characters"), std::string::npos) << obs.text;
}

TEST(CalculatorTool, OptionsAreValidated) {
  EXPECT_THROW(make({{"max_chars", "0"}}), grpo::sdk::ConfigError);
  EXPECT_THROW(make({{"max_char", "10"}}), grpo::sdk::ConfigError);  // a typo is not ignored
}

}  // namespace
