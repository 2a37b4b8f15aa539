// calculator: a tool that evaluates one arithmetic expression exactly. See README.md in this
// folder for the accepted syntax, the observation format and the options.
//
// The parser and the exact evaluator are the math verifier's (plugins/verifiers/math/
// latex_expr.h, 128-bit rationals), so the tool and the reward agree on what an expression
// means. A thin ASCII layer in front of it accepts what a model types into a calculator
// (`48213*572`, `2**10`, `sqrt(2)`) as well as LaTeX (`\frac{7}{3}`); where the two
// conventions differ, the calculator one wins: `2^10` is 2^{10}, not LaTeX's 2^{1}0.
//
// Exact results are exact (integers in full, fractions in lowest terms); anything the
// rationals cannot hold (roots, pi, overflow past 128 bits) falls back to a double and says so
// ("≈"). Every failure is an error observation with a one-line reason, never an exception.
//
// Depends on the SDK, header-only nlohmann-json and the math verifier's expression library
// (GiNaC behind it, unused here): no LibTorch.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/tool.h"
#include "plugins/shared/latex/latex_expr.h"

namespace {

namespace sdk = ::grpo::sdk;
using json = nlohmann::ordered_json;
using grpo_math::Node;
using grpo_math::Rational;

constexpr int kSignificantDigits = 12;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Names a model may type without a backslash, and the LaTeX command each stands for.
const char* latex_name(const std::string& word) {
  static const std::pair<const char*, const char*> names[] = {
      {"sqrt", "sqrt"},     {"pi", "pi"},         {"sin", "sin"},       {"cos", "cos"},       {"tan", "tan"},
      {"cot", "cot"},       {"sec", "sec"},       {"csc", "csc"},       {"asin", "arcsin"},   {"acos", "arccos"},
      {"atan", "arctan"},   {"arcsin", "arcsin"}, {"arccos", "arccos"}, {"arctan", "arctan"}, {"sinh", "sinh"},
      {"cosh", "cosh"},     {"tanh", "tanh"},     {"ln", "ln"},         {"log", "log"},       {"exp", "exp"}};
  for (const auto& [ascii, latex] : names)
    if (word == ascii) return latex;
  return nullptr;
}

// The expression in the parser's LaTeX subset, or false with `why`. Rewrites only what plain
// arithmetic spells differently; LaTeX commands (\frac, \sqrt, ...) pass through untouched.
bool to_latex(std::string_view input, std::string* out, std::string* why) {
  std::string s(input);
  for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{"\u00d7", "*"}, {"\u00f7", "/"},
                                 {"\u2212", "-"}, {"\u00b7", "*"}, {"\u22c5", "*"}, {"**", "^"},
                                 {"\\left", ""}, {"\\right", ""}, {"\\!", ""}, {"\\,", ""}, {"$", ""}})
    replace_all(s, from, to);
  std::string r;
  r.reserve(s.size() + 16);
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\\') {  // a LaTeX command, copied whole
      std::size_t j = i + 1;
      while (j < s.size() && is_letter(s[j])) ++j;
      if (j == i + 1 && j < s.size()) ++j;
      r.append(s, i, j - i);
      i = j;
      continue;
    }
    if (is_letter(c)) {
      std::size_t j = i;
      while (j < s.size() && is_letter(s[j])) ++j;
      const std::string word = s.substr(i, j - i);
      // 1e5, 2.5E-3: the exponent of a number, not the constant e.
      if ((c == 'e' || c == 'E') && word.size() == 1 && i > 0 && is_digit(s[i - 1])) {
        std::size_t k = j;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && is_digit(s[k])) {
          r.append(s, i, k - i);
          i = k;
          continue;
        }
      }
      if (word == "log" && s.compare(j, 2, "10") == 0) {
        r += "\\lg ";
        i = j + 2;
        continue;
      }
      if (word == "log" && j < s.size() && s[j] == '2' && (j + 1 >= s.size() || !is_digit(s[j + 1]))) {
        r += "\\log_{2}";
        i = j + 1;
        continue;
      }
      if (const char* latex = latex_name(word)) {
        r += "\\" + std::string(latex) + " ";
      } else if (word == "e") {
        r += "e";
      } else {
        *why = "unknown name '" + word + "': the calculator evaluates numbers, not variables or functions other than "
               "sqrt, exp, ln, log, log10, log2, sin, cos, tan and their inverses";
        return false;
      }
      i = j;
      continue;
    }
    if (c == '^') {  // ^12, ^-3, ^2.5: the whole number is the exponent (TeX would take one digit)
      r += '^';
      std::size_t j = i + 1;
      while (j < s.size() && s[j] == ' ') ++j;
      std::size_t k = j;
      if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
      if (k < s.size() && (is_digit(s[k]) || s[k] == '.')) {
        while (k < s.size() && (is_digit(s[k]) || s[k] == '.')) ++k;
        r += "{" + s.substr(j, k - j) + "}";
        i = k;
      } else {
        i = i + 1;
      }
      continue;
    }
    if (is_digit(c) && !r.empty()) {  // "2 3" would silently be a product: refuse it
      std::size_t back = r.size();
      while (back > 0 && r[back - 1] == ' ') --back;
      if (back < r.size() && back > 0 && (is_digit(r[back - 1]) || r[back - 1] == '.')) {
        *why = "two numbers separated by a space (write * to multiply, and no spaces inside a number)";
        return false;
      }
    }
    r += c;
    ++i;
  }
  *out = std::move(r);
  return true;
}

// Where a division by an exact zero sits in the tree, if anywhere.
bool divides_by_zero(const Node& n) {
  if (n.kind == Node::kDiv) {
    const Rational d = grpo_math::exact_value(*n.args[1]);
    if (d.ok && d.num == 0) return true;
  }
  if (n.kind == Node::kPow) {
    const Rational b = grpo_math::exact_value(*n.args[0]), e = grpo_math::exact_value(*n.args[1]);
    if (b.ok && b.num == 0 && e.ok && e.num < 0) return true;
  }
  for (const auto& a : n.args)
    if (divides_by_zero(*a)) return true;
  return false;
}

bool has_infinity(const Node& n) {
  if (n.kind == Node::kInfinity) return true;
  for (const auto& a : n.args)
    if (has_infinity(*a)) return true;
  return false;
}

std::string decimal_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", kSignificantDigits, v);
  return buf;
}

// Whether `text` (a %g decimal) is exactly `r`: then "=" is printed instead of "≈".
bool decimal_is_exact(const std::string& text, const Rational& r) {
  std::string why;
  const grpo_math::NodePtr n = grpo_math::parse_latex(text, grpo_math::ParseLimits{}, &why);
  return n && grpo_math::rational_equal(grpo_math::exact_value(*n), r);
}

sdk::ToolObservation error(const std::string& reason, json details = json::object()) {
  sdk::ToolObservation obs;
  obs.text = "Error: " + reason;
  obs.is_error = true;
  details["error"] = reason;
  obs.details = dump(details);
  return obs;
}

class Calculator : public sdk::Tool {
 public:
  explicit Calculator(const sdk::ConfigView& cfg)
      : max_chars_(static_cast<std::size_t>(cfg.get_int_in_range("max_chars", 500, 1, 100000))) {}

  std::string description() const override {
    return "Evaluates an arithmetic expression exactly: + - * / ^ (or **), parentheses, !, sqrt, exp, ln, log, "
           "sin, cos, tan, pi, e, and LaTeX such as \\frac{7}{3}. Integers and fractions are exact; other "
           "results are given to 12 significant digits.";
  }

  std::string parameters() const override {
    return R"({"type": "object", "properties": {"expression": {"type": "string", "description": )"
           R"("The expression to evaluate, e.g. \"48213 * 572\" or \"(3/4)^2 - 1/8\""}}, "required": ["expression"]})";
  }

  sdk::ToolObservation call(std::string_view arguments, const sdk::ToolCallContext&) const override {
    const json args = json::parse(arguments.begin(), arguments.end(), nullptr, false);
    if (!args.is_object() || !args.contains("expression") || !args["expression"].is_string())
      return error("expected the arguments {\"expression\": \"...\"}, got " + sdk::clip_utf8(arguments, 200));
    const std::string expression = args["expression"].get<std::string>();
    json details;
    details["expression"] = sdk::clip_utf8(expression, 200);
    if (expression.size() > max_chars_)
      return error("the expression is longer than " + std::to_string(max_chars_) + " characters", details);
    std::string latex, why;
    if (!to_latex(expression, &latex, &why)) return error(why, details);
    grpo_math::ParseLimits limits;
    limits.max_chars = 4 * max_chars_ + 64;  // the rewrite lengthens names (sqrt -> \sqrt )
    limits.max_nodes = std::max<std::size_t>(600, max_chars_);
    const grpo_math::NodePtr tree = grpo_math::parse_latex(latex, limits, &why);
    if (!tree) return error("could not parse the expression: " + why, details);
    std::vector<std::string> variables;
    grpo_math::collect_variables(*tree, variables);
    if (!variables.empty()) return error("unknown name '" + variables.front() + "': the calculator evaluates numbers only", details);
    if (has_infinity(*tree)) return error("infinity is not a number the calculator can evaluate", details);

    const Rational exact = grpo_math::exact_value(*tree);
    sdk::ToolObservation obs;
    if (exact.ok) {
      const std::string fraction = grpo_math::rational_text(exact);
      details["exact"] = true;
      details["value"] = fraction;
      if (exact.den == 1) {
        obs.text = fraction;
      } else {
        const std::string decimal = decimal_text(grpo_math::rational_to_double(exact));
        details["decimal"] = decimal;
        obs.text = fraction + (decimal_is_exact(decimal, exact) ? " = " : " \u2248 ") + decimal;
      }
      obs.details = dump(details);
      return obs;
    }
    if (divides_by_zero(*tree)) return error("division by zero", details);
    const std::complex<double> v = grpo_math::numeric_value(*tree, {}, {});
    if (!std::isfinite(v.real()) || !std::isfinite(v.imag()))
      return error("the result is not a finite number (overflow, or a function outside its domain)", details);
    if (std::fabs(v.imag()) > 1e-12 * std::max(1.0, std::fabs(v.real())))
      return error("the result is not a real number", details);
    const std::string decimal = decimal_text(v.real());
    details["exact"] = false;
    details["decimal"] = decimal;
    obs.text = "\u2248 " + decimal;
    obs.details = dump(details);
    return obs;
  }

 private:
  std::size_t max_chars_;
};

}  // namespace

GRPO_PLUGIN("calculator", "1.0.0", "exact arithmetic for the policy to call in a rollout") {
  registrar.add_tool<Calculator>("calculator", "evaluates an arithmetic expression exactly (integers, fractions)");
}
