#include "plugins/shared/latex/latex_expr.h"

#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include <ginac/ginac.h>

namespace grpo_math {

// ------------------------------------------------------------------------------------------
// Rationals

namespace {

__int128 abs128(__int128 v) { return v < 0 ? -v : v; }

__int128 gcd128(__int128 a, __int128 b) {
  a = abs128(a);
  b = abs128(b);
  while (b != 0) {
    __int128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

const Rational kBad{0, 1, false};

Rational add(const Rational& a, const Rational& b) {
  if (!a.ok || !b.ok) return kBad;
  __int128 x, y, n, d;
  if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(b.num, a.den, &y) ||
      __builtin_add_overflow(x, y, &n) || __builtin_mul_overflow(a.den, b.den, &d))
    return kBad;
  return make_rational(n, d);
}

Rational mul(const Rational& a, const Rational& b) {
  if (!a.ok || !b.ok) return kBad;
  // Cross-reduce first to keep the parts small.
  const __int128 g1 = gcd128(a.num, b.den), g2 = gcd128(b.num, a.den);
  const __int128 an = g1 ? a.num / g1 : a.num, bd = g1 ? b.den / g1 : b.den;
  const __int128 bn = g2 ? b.num / g2 : b.num, ad = g2 ? a.den / g2 : a.den;
  __int128 n, d;
  if (__builtin_mul_overflow(an, bn, &n) || __builtin_mul_overflow(ad, bd, &d)) return kBad;
  return make_rational(n, d);
}

Rational neg(const Rational& a) { return a.ok ? Rational{-a.num, a.den, true} : kBad; }

Rational inv(const Rational& a) {
  if (!a.ok || a.num == 0) return kBad;
  return make_rational(a.den, a.num);
}

bool is_integer(const Rational& r) { return r.ok && r.den == 1; }

Rational int_pow(Rational base, __int128 e) {
  if (!base.ok) return kBad;
  if (e < 0) {
    base = inv(base);
    e = -e;
  }
  Rational out{1, 1, true};
  while (e > 0 && out.ok) {
    if (e & 1) out = mul(out, base);
    e >>= 1;
    if (e) base = mul(base, base);
  }
  return out;
}

}  // namespace

Rational make_rational(__int128 num, __int128 den) {
  if (den == 0) return kBad;
  if (den < 0) num = -num, den = -den;
  const __int128 g = gcd128(num, den);
  if (g > 1) num /= g, den /= g;
  return {num, den, true};
}

bool rational_equal(const Rational& a, const Rational& b) { return a.ok && b.ok && a.num == b.num && a.den == b.den; }

double rational_to_double(const Rational& r) { return static_cast<double>(r.num) / static_cast<double>(r.den); }

std::string rational_text(const Rational& r) {
  if (!r.ok) return "?";
  auto text = [](__int128 v) {
    if (v == 0) return std::string("0");
    const bool negative = v < 0;
    std::string s;
    while (v != 0) {
      const int digit = static_cast<int>(v % 10);
      s.insert(s.begin(), static_cast<char>('0' + (digit < 0 ? -digit : digit)));
      v /= 10;
    }
    return negative ? "-" + s : s;
  };
  return r.den == 1 ? text(r.num) : text(r.num) + "/" + text(r.den);
}

// ------------------------------------------------------------------------------------------
// Tokens and parser

namespace {

struct Token {
  enum Kind { kNum, kLetter, kCmd, kChar, kEnd } kind = kEnd;
  std::string text;  // digits (with '.'), the letter, the command name without '\', the char
};

const std::set<std::string>& function_names() {
  static const std::set<std::string> names = {"sin",    "cos",    "tan",    "cot", "sec", "csc",  "arcsin",
                                              "arccos", "arctan", "sinh",   "cosh", "tanh", "ln",  "log",
                                              "exp",    "lg"};
  return names;
}

const std::set<std::string>& greek_names() {
  static const std::set<std::string> names = {
      "alpha", "beta",    "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta",   "theta", "vartheta",
      "iota",  "kappa",   "lambda", "mu",   "nu",      "xi",         "rho",  "sigma", "tau",   "upsilon",
      "phi",   "varphi",  "chi",   "psi",   "omega",   "Gamma",      "Delta", "Theta", "Lambda", "Xi",
      "Sigma", "Phi",     "Psi",   "Omega"};
  return names;
}

bool tokenize(std::string_view s, std::vector<Token>& out, std::string* why) {
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isspace(c)) {
      ++i;
      continue;
    }
    if (std::isdigit(c) || (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::size_t j = i;
      bool dot = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || (s[j] == '.' && !dot))) {
        if (s[j] == '.') {
          // "3." at the end or before a non-digit is a trailing period, not part of the number
          if (j + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j + 1]))) break;
          dot = true;
        }
        ++j;
      }
      std::string num(s.substr(i, j - i));
      // Scientific notation: 1.5e3, 2E-4 (an 'e' followed by digits; "2e" alone is 2 * e).
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          num += std::string(s.substr(j, k - j));
          j = k;
        }
      }
      out.push_back({Token::kNum, num});
      i = j;
      continue;
    }
    if (std::isalpha(c)) {
      out.push_back({Token::kLetter, std::string(1, static_cast<char>(c))});
      ++i;
      continue;
    }
    if (c == '\\') {
      std::size_t j = i + 1;
      while (j < s.size() && std::isalpha(static_cast<unsigned char>(s[j]))) ++j;
      if (j == i + 1) {
        if (j >= s.size()) {
          *why = "a trailing backslash";
          return false;
        }
        out.push_back({Token::kCmd, std::string(1, s[j])});  // \{ \} \, \% ...
        i = j + 1;
      } else {
        out.push_back({Token::kCmd, std::string(s.substr(i + 1, j - i - 1))});
        i = j;
      }
      continue;
    }
    if (c >= 0x80) {
      *why = "a non-ASCII character";
      return false;
    }
    out.push_back({Token::kChar, std::string(1, static_cast<char>(c))});
    ++i;
  }
  out.push_back({Token::kEnd, ""});
  return true;
}

// Exact value of a decimal / scientific literal.
Rational literal_value(const std::string& text) {
  std::string mantissa = text;
  long exponent = 0;
  const std::size_t e = text.find_first_of("eE");
  if (e != std::string::npos) {
    mantissa = text.substr(0, e);
    exponent = std::strtol(text.c_str() + e + 1, nullptr, 10);
    if (exponent > 30 || exponent < -30) return kBad;
  }
  __int128 num = 0, den = 1;
  bool after_dot = false;
  for (char ch : mantissa) {
    if (ch == '.') {
      after_dot = true;
      continue;
    }
    if (__builtin_mul_overflow(num, static_cast<__int128>(10), &num) ||
        __builtin_add_overflow(num, static_cast<__int128>(ch - '0'), &num))
      return kBad;
    if (after_dot && __builtin_mul_overflow(den, static_cast<__int128>(10), &den)) return kBad;
  }
  Rational r = make_rational(num, den);
  if (exponent != 0) r = mul(r, int_pow(Rational{10, 1, true}, exponent));
  return r;
}

NodePtr make(Node::Kind kind, std::vector<NodePtr> args, std::string name = {}) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->args = std::move(args);
  n->name = std::move(name);
  return n;
}

NodePtr number(const Rational& r) {
  auto n = std::make_shared<Node>();
  n->kind = Node::kNumber;
  n->value = r;
  return n;
}

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::size_t max_nodes) : t_(std::move(tokens)), max_nodes_(max_nodes) {}

  NodePtr parse() {
    NodePtr e = sum();
    if (peek().kind != Token::kEnd) fail("unexpected '" + peek().text + "'");
    return e;
  }

 private:
  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  Token next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  bool is_char(const char* c, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::kChar && peek(ahead).text == c;
  }
  bool is_cmd(const char* c, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::kCmd && peek(ahead).text == c;
  }
  [[noreturn]] void fail(const std::string& why) const { throw ParseError(why); }
  void expect_char(const char* c) {
    if (!is_char(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  NodePtr node(Node::Kind kind, std::vector<NodePtr> args, std::string name = {}) {
    if (++nodes_ > max_nodes_) fail("expression too large");
    return make(kind, std::move(args), std::move(name));
  }
  NodePtr num(const Rational& r) {
    if (++nodes_ > max_nodes_) fail("expression too large");
    return number(r);
  }

  NodePtr sum() {
    if (++depth_ > 200) fail("nesting too deep");
    NodePtr left = term();
    while (is_char("+") || is_char("-")) {
      const bool minus = next().text == "-";
      NodePtr right = term();
      left = node(Node::kAdd, {left, minus ? node(Node::kNeg, {right}) : right});
    }
    --depth_;
    return left;
  }

  // Can the next token begin a factor of an implicit product (2x, x(y), 3\sqrt2)?
  bool starts_factor() const {
    const Token& t = peek();
    if (t.kind == Token::kNum || t.kind == Token::kLetter) return true;
    if (t.kind == Token::kChar) return t.text == "(" || t.text == "{" || (t.text == "|" && abs_depth_ == 0);
    if (t.kind == Token::kCmd) {
      static const std::set<std::string> starts = {"frac", "dfrac", "tfrac", "cfrac", "sqrt", "pi",  "infty",
                                                   "binom", "dbinom", "tbinom", "e", "mathrm", "operatorname"};
      return starts.count(t.text) || function_names().count(t.text) || greek_names().count(t.text);
    }
    return false;
  }

  NodePtr term() {
    NodePtr left = unary();
    for (;;) {
      if (is_char("*") || is_cmd("cdot") || is_cmd("times") || is_cmd("ast")) {
        next();
        left = node(Node::kMul, {left, unary()});
      } else if (is_char("/") || is_cmd("div")) {
        next();
        left = node(Node::kDiv, {left, unary()});
      } else if (starts_factor()) {
        // Mixed number: an integer literal directly followed by \frac{int}{int}.
        const bool int_literal = left->kind == Node::kNumber && left->value.ok && left->value.den == 1 &&
                                 left->value.num >= 0 && last_was_literal_;
        NodePtr right = power();
        if (int_literal && right->kind == Node::kDiv && right->name == "frac" &&
            right->args[0]->kind == Node::kNumber && right->args[1]->kind == Node::kNumber)
          left = node(Node::kAdd, {left, right});
        else
          left = node(Node::kMul, {left, right});
      } else {
        return left;
      }
    }
  }

  NodePtr unary() {
    if (is_char("-")) {
      next();
      return node(Node::kNeg, {unary()});
    }
    if (is_char("+")) {
      next();
      return unary();
    }
    return power();
  }

  // The argument of ^ or _: a group, or one token (x^23 is x^{2}3 in LaTeX), with a sign.
  NodePtr script_argument() {
    if (is_char("{")) {
      next();
      NodePtr e = sum();
      expect_char("}");
      return e;
    }
    if (is_char("-")) {
      next();
      return node(Node::kNeg, {script_argument()});
    }
    if (peek().kind == Token::kNum) return one_digit();
    return primary();
  }

  // A TeX argument that is a bare number takes one digit (x^23 is x^{2}3, \frac12 is
  // \frac{1}{2}); the rest of the literal stays in the stream.
  NodePtr one_digit() {
    Token& t = t_[pos_];
    if (t.text.size() > 1 && t.text.find_first_of(".eE") == std::string::npos) {
      const std::string first = t.text.substr(0, 1);
      t.text = t.text.substr(1);
      return num(literal_value(first));
    }
    next();
    return num(literal_value(t.text));
  }

  NodePtr power() {
    NodePtr base = postfix();
    if (is_char("^")) {
      next();
      NodePtr exponent = script_argument();
      // a^b^c is a^(b^c)
      if (is_char("^")) {
        next();
        exponent = node(Node::kPow, {exponent, script_argument()});
      }
      base = node(Node::kPow, {base, exponent});
      while (is_char("!")) {
        next();
        base = node(Node::kFactorial, {base});
      }
    }
    return base;
  }

  NodePtr postfix() {
    NodePtr p = primary();
    while (is_char("!")) {
      next();
      p = node(Node::kFactorial, {p});
    }
    return p;
  }

  NodePtr group_argument() {  // {..} or a single token (\frac12)
    if (is_char("{")) {
      next();
      NodePtr e = sum();
      expect_char("}");
      return e;
    }
    if (peek().kind == Token::kNum) return one_digit();
    if (peek().kind == Token::kLetter) return variable();
    return primary();
  }

  NodePtr variable() {
    std::string name = next().text;
    if (is_char("_")) {
      next();
      if (is_char("{")) {
        next();
        std::string sub;
        while (!is_char("}")) {
          if (peek().kind == Token::kEnd) fail("unclosed subscript");
          sub += next().text;
        }
        next();
        name += "_" + sub;
      } else {
        Token t = next();
        name += "_" + t.text.substr(0, 1);
        if (t.kind == Token::kNum && t.text.size() > 1) {  // x_12 is x_{1}2
          --pos_;
          t_[pos_].text = t.text.substr(1);
        }
      }
    }
    return node(Node::kVariable, {}, name);
  }

  NodePtr function_call(const std::string& fname) {
    NodePtr power_of;  // \sin^2 x
    NodePtr base;      // \log_2 x
    if (is_char("^")) {
      next();
      power_of = script_argument();
    }
    if (is_char("_")) {
      next();
      base = script_argument();
    }
    if (!power_of && is_char("^")) {
      next();
      power_of = script_argument();
    }
    NodePtr arg;
    if (is_char("(") || is_char("{") || is_char("[")) {
      arg = postfix();
    } else {
      arg = power();
      // \sin 2x: the argument runs over numbers and letters, not over another command.
      while (peek().kind == Token::kNum || peek().kind == Token::kLetter) arg = node(Node::kMul, {arg, power()});
    }
    NodePtr call;
    if (fname == "log" && base)
      call = node(Node::kDiv, {node(Node::kFunc, {arg}, "ln"), node(Node::kFunc, {base}, "ln")});
    else
      call = node(Node::kFunc, {arg}, fname == "lg" ? "log10" : fname);
    if (power_of) {
      // \sin^{-1} is arcsin
      if (power_of->kind == Node::kNeg && power_of->args[0]->kind == Node::kNumber &&
          rational_equal(power_of->args[0]->value, Rational{1, 1, true}) &&
          (fname == "sin" || fname == "cos" || fname == "tan"))
        return node(Node::kFunc, {arg}, "arc" + fname);
      call = node(Node::kPow, {call, power_of});
    }
    return call;
  }

  NodePtr primary() {
    last_was_literal_ = false;
    const Token t = peek();
    switch (t.kind) {
      case Token::kNum:
        next();
        last_was_literal_ = true;
        {
          Rational v = literal_value(t.text);
          if (!v.ok) fail("number too large: " + t.text);
          return num(v);
        }
      case Token::kLetter:
        if (t.text == "e" && !is_char("_", 1)) {
          next();
          return node(Node::kConstE, {});
        }
        if (t.text == "i" && !is_char("_", 1)) {
          next();
          return node(Node::kConstI, {});
        }
        return variable();
      case Token::kChar: {
        if (t.text == "(" || t.text == "[" || t.text == "{") {
          next();
          ++depth_;
          NodePtr e = sum();
          --depth_;
          expect_char(t.text == "(" ? ")" : t.text == "[" ? "]" : "}");
          return e;
        }
        if (t.text == "|") {
          next();
          ++abs_depth_;
          NodePtr e = sum();
          --abs_depth_;
          expect_char("|");
          return node(Node::kFunc, {e}, "abs");
        }
        fail("unexpected '" + t.text + "'");
      }
      case Token::kCmd: {
        next();
        const std::string& c = t.text;
        if (c == "frac" || c == "dfrac" || c == "tfrac" || c == "cfrac") {
          NodePtr a = group_argument();
          NodePtr b = group_argument();
          return node(Node::kDiv, {a, b}, "frac");
        }
        if (c == "binom" || c == "dbinom" || c == "tbinom") {
          NodePtr a = group_argument();
          NodePtr b = group_argument();
          return node(Node::kFunc, {a, b}, "binom");
        }
        if (c == "sqrt") {
          NodePtr index;
          if (is_char("[")) {
            next();
            index = sum();
            expect_char("]");
          }
          NodePtr a = group_argument();
          return index ? node(Node::kFunc, {a, index}, "root") : node(Node::kFunc, {a}, "sqrt");
        }
        if (c == "pi") return node(Node::kConstPi, {});
        if (c == "infty" || c == "infinity") return node(Node::kInfinity, {});
        if (c == "mathrm" || c == "operatorname") {  // \mathrm{e}, \operatorname{sin}
          expect_char("{");
          std::string word;
          while (!is_char("}")) {
            if (peek().kind == Token::kEnd) fail("unclosed \\mathrm");
            word += next().text;
          }
          next();
          if (word == "e") return node(Node::kConstE, {});
          if (function_names().count(word)) return function_call(word);
          if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0])))
            return node(Node::kVariable, {}, word);
          fail("\\mathrm{" + word + "}");
        }
        if (function_names().count(c)) return function_call(c);
        if (greek_names().count(c)) {
          std::string name = "\\" + c;
          return node(Node::kVariable, {}, name);
        }
        fail("unsupported command \\" + c);
      }
      case Token::kEnd:
        fail("unexpected end");
    }
    fail("unexpected token");
  }

  std::vector<Token> t_;
  std::size_t pos_ = 0, nodes_ = 0, max_nodes_;
  int depth_ = 0, abs_depth_ = 0;
  bool last_was_literal_ = false;
};

}  // namespace

NodePtr parse_latex(std::string_view text, const ParseLimits& limits, std::string* why) {
  std::string ignored;
  if (!why) why = &ignored;
  if (text.empty()) {
    *why = "empty";
    return nullptr;
  }
  if (text.size() > limits.max_chars) {
    *why = "longer than " + std::to_string(limits.max_chars) + " characters";
    return nullptr;
  }
  std::vector<Token> tokens;
  if (!tokenize(text, tokens, why)) return nullptr;
  try {
    return Parser(std::move(tokens), limits.max_nodes).parse();
  } catch (const ParseError& e) {
    *why = e.what();
    return nullptr;
  }
}

std::size_t node_count(const Node& n) {
  std::size_t c = 1;
  for (const auto& a : n.args) c += node_count(*a);
  return c;
}

bool has_variables(const Node& n) {
  if (n.kind == Node::kVariable) return true;
  for (const auto& a : n.args)
    if (has_variables(*a)) return true;
  return false;
}

void collect_variables(const Node& n, std::vector<std::string>& out) {
  if (n.kind == Node::kVariable) {
    for (const auto& v : out)
      if (v == n.name) return;
    out.push_back(n.name);
  }
  for (const auto& a : n.args) collect_variables(*a, out);
}

// ------------------------------------------------------------------------------------------
// Evaluation

Rational exact_value(const Node& n) {
  switch (n.kind) {
    case Node::kNumber: return n.value;
    case Node::kAdd: return add(exact_value(*n.args[0]), exact_value(*n.args[1]));
    case Node::kMul: return mul(exact_value(*n.args[0]), exact_value(*n.args[1]));
    case Node::kNeg: return neg(exact_value(*n.args[0]));
    case Node::kDiv: return mul(exact_value(*n.args[0]), inv(exact_value(*n.args[1])));
    case Node::kPow: {
      const Rational e = exact_value(*n.args[1]);
      if (!is_integer(e) || e.num > 256 || e.num < -256) return kBad;
      const Rational b = exact_value(*n.args[0]);
      if (!b.ok || (b.num == 0 && e.num < 0)) return kBad;
      return int_pow(b, e.num);
    }
    case Node::kFactorial: {
      const Rational v = exact_value(*n.args[0]);
      if (!is_integer(v) || v.num < 0 || v.num > 30) return kBad;
      Rational out{1, 1, true};
      for (__int128 k = 2; k <= v.num && out.ok; ++k) out = mul(out, Rational{k, 1, true});
      return out;
    }
    case Node::kFunc:
      if (n.name == "abs") {
        Rational v = exact_value(*n.args[0]);
        if (v.ok && v.num < 0) v.num = -v.num;
        return v;
      }
      if (n.name == "binom") {
        const Rational a = exact_value(*n.args[0]), b = exact_value(*n.args[1]);
        if (!is_integer(a) || !is_integer(b) || a.num < 0 || a.num > 120 || b.num < 0) return kBad;
        if (b.num > a.num) return Rational{0, 1, true};
        Rational out{1, 1, true};
        for (__int128 k = 1; k <= b.num && out.ok; ++k) out = mul(out, make_rational(a.num - b.num + k, k));
        return out;
      }
      return kBad;
    default: return kBad;
  }
}

namespace {

using C = std::complex<double>;
const C kNaN(std::nan(""), 0.0);

C eval(const Node& n, const std::vector<std::string>& vars, const std::vector<C>& point) {
  switch (n.kind) {
    case Node::kNumber: return n.value.ok ? C(rational_to_double(n.value)) : kNaN;
    case Node::kVariable:
      for (std::size_t i = 0; i < vars.size(); ++i)
        if (vars[i] == n.name) return point[i];
      return kNaN;
    case Node::kConstPi: return C(M_PI);
    case Node::kConstE: return C(M_E);
    case Node::kConstI: return C(0.0, 1.0);
    case Node::kInfinity: return kNaN;
    case Node::kAdd: return eval(*n.args[0], vars, point) + eval(*n.args[1], vars, point);
    case Node::kMul: return eval(*n.args[0], vars, point) * eval(*n.args[1], vars, point);
    case Node::kNeg: return -eval(*n.args[0], vars, point);
    case Node::kDiv: {
      const C d = eval(*n.args[1], vars, point);
      if (std::abs(d) == 0.0) return kNaN;
      return eval(*n.args[0], vars, point) / d;
    }
    case Node::kPow: {
      const C b = eval(*n.args[0], vars, point), e = eval(*n.args[1], vars, point);
      // Integer exponents by repeated multiplication keep real bases real ((-2)^3 = -8).
      if (e.imag() == 0.0 && std::floor(e.real()) == e.real() && std::fabs(e.real()) <= 64) {
        C out(1.0);
        const int k = static_cast<int>(std::fabs(e.real()));
        for (int i = 0; i < k; ++i) out *= b;
        if (e.real() < 0) {
          if (std::abs(out) == 0.0) return kNaN;
          out = 1.0 / out;
        }
        return out;
      }
      // A real odd root of a negative real: (-8)^{1/3} = -2, as a reader of the answer means it.
      if (b.imag() == 0.0 && b.real() < 0 && e.imag() == 0.0) {
        const double inv = 1.0 / e.real();
        if (std::fabs(inv - std::round(inv)) < 1e-12 && static_cast<long>(std::round(inv)) % 2 != 0)
          return C(-std::pow(-b.real(), e.real()));
      }
      if (std::abs(b) == 0.0) return e.real() > 0 ? C(0.0) : kNaN;
      return std::pow(b, e);
    }
    case Node::kFactorial: {
      const C v = eval(*n.args[0], vars, point);
      if (v.imag() != 0.0 || v.real() < 0 || v.real() > 170) return kNaN;
      return C(std::tgamma(v.real() + 1.0));
    }
    case Node::kFunc: {
      const C a = eval(*n.args[0], vars, point);
      const std::string& f = n.name;
      if (f == "sqrt") return std::sqrt(a);
      if (f == "root") {
        const C k = eval(*n.args[1], vars, point);
        if (a.imag() == 0.0 && a.real() < 0 && k.imag() == 0.0 && std::fmod(k.real(), 2.0) == 1.0)
          return C(-std::pow(-a.real(), 1.0 / k.real()));
        return std::pow(a, 1.0 / k);
      }
      if (f == "abs") return C(std::abs(a));
      if (f == "sin") return std::sin(a);
      if (f == "cos") return std::cos(a);
      if (f == "tan") return std::tan(a);
      if (f == "cot") return 1.0 / std::tan(a);
      if (f == "sec") return 1.0 / std::cos(a);
      if (f == "csc") return 1.0 / std::sin(a);
      if (f == "arcsin") return std::asin(a);
      if (f == "arccos") return std::acos(a);
      if (f == "arctan") return std::atan(a);
      if (f == "sinh") return std::sinh(a);
      if (f == "cosh") return std::cosh(a);
      if (f == "tanh") return std::tanh(a);
      if (f == "ln" || f == "log") return std::log(a);
      if (f == "log10") return std::log10(a);
      if (f == "exp") return std::exp(a);
      if (f == "binom") {
        const C k = eval(*n.args[1], vars, point);
        if (a.imag() != 0.0 || k.imag() != 0.0 || a.real() > 170 || k.real() < 0 || k.real() > a.real()) return kNaN;
        return C(std::tgamma(a.real() + 1) / (std::tgamma(k.real() + 1) * std::tgamma(a.real() - k.real() + 1)));
      }
      return kNaN;
    }
  }
  return kNaN;
}

}  // namespace

std::complex<double> numeric_value(const Node& n, const std::vector<std::string>& vars,
                                   const std::vector<std::complex<double>>& point) {
  const C v = eval(n, vars, point);
  if (!std::isfinite(v.real()) || !std::isfinite(v.imag())) return kNaN;
  return v;
}

// ------------------------------------------------------------------------------------------
// GiNaC

namespace {

std::mutex& ginac_mutex() {
  static std::mutex m;
  return m;
}

struct NotConvertible {};

GiNaC::ex to_ginac(const Node& n, std::map<std::string, GiNaC::symbol>& symbols) {
  using GiNaC::ex;
  switch (n.kind) {
    case Node::kNumber: {
      if (!n.value.ok) throw NotConvertible{};
      const std::string text = rational_text(n.value);
      return GiNaC::numeric(text.c_str());
    }
    case Node::kVariable: {
      auto it = symbols.find(n.name);
      if (it == symbols.end()) it = symbols.emplace(n.name, GiNaC::symbol(n.name)).first;
      return it->second;
    }
    case Node::kConstPi: return GiNaC::Pi;
    case Node::kConstE: return GiNaC::exp(ex(1));
    case Node::kConstI: return GiNaC::I;
    case Node::kInfinity: throw NotConvertible{};
    case Node::kAdd: return to_ginac(*n.args[0], symbols) + to_ginac(*n.args[1], symbols);
    case Node::kMul: return to_ginac(*n.args[0], symbols) * to_ginac(*n.args[1], symbols);
    case Node::kNeg: return -to_ginac(*n.args[0], symbols);
    case Node::kDiv: return to_ginac(*n.args[0], symbols) / to_ginac(*n.args[1], symbols);
    case Node::kPow: {
      // Only small rational exponents: x^{10^{10}} must never reach expand().
      const Rational e = exact_value(*n.args[1]);
      if (!e.ok || e.num > 64 || e.num < -64 || e.den > 12) throw NotConvertible{};
      return GiNaC::pow(to_ginac(*n.args[0], symbols), GiNaC::numeric(static_cast<long>(e.num), static_cast<long>(e.den)));
    }
    case Node::kFactorial: {
      const Rational v = exact_value(*n.args[0]);
      if (!is_integer(v) || v.num < 0 || v.num > 30) throw NotConvertible{};
      return GiNaC::factorial(GiNaC::numeric(static_cast<long>(v.num)));
    }
    case Node::kFunc: {
      const ex a = to_ginac(*n.args[0], symbols);
      const std::string& f = n.name;
      if (f == "sqrt") return GiNaC::sqrt(a);
      if (f == "root") {
        const Rational k = exact_value(*n.args[1]);
        if (!is_integer(k) || k.num < 2 || k.num > 12) throw NotConvertible{};
        return GiNaC::pow(a, GiNaC::numeric(1, static_cast<long>(k.num)));
      }
      if (f == "abs") return GiNaC::abs(a);
      if (f == "sin") return GiNaC::sin(a);
      if (f == "cos") return GiNaC::cos(a);
      if (f == "tan") return GiNaC::tan(a);
      if (f == "cot") return 1 / GiNaC::tan(a);
      if (f == "sec") return 1 / GiNaC::cos(a);
      if (f == "csc") return 1 / GiNaC::sin(a);
      if (f == "arcsin") return GiNaC::asin(a);
      if (f == "arccos") return GiNaC::acos(a);
      if (f == "arctan") return GiNaC::atan(a);
      if (f == "ln" || f == "log") return GiNaC::log(a);
      if (f == "log10") return GiNaC::log(a) / GiNaC::log(ex(10));
      if (f == "exp") return GiNaC::exp(a);
      if (f == "binom") return GiNaC::binomial(a, to_ginac(*n.args[1], symbols));
      throw NotConvertible{};
    }
  }
  throw NotConvertible{};
}

}  // namespace

bool ginac_equal(const Node& a, const Node& b, std::size_t max_nodes, bool* attempted) {
  *attempted = false;
  if (node_count(a) > max_nodes || node_count(b) > max_nodes) return false;
  std::lock_guard<std::mutex> lock(ginac_mutex());
  try {
    std::map<std::string, GiNaC::symbol> symbols;
    const GiNaC::ex diff = to_ginac(a, symbols) - to_ginac(b, symbols);
    *attempted = true;
    return diff.expand().normal().is_zero();
  } catch (const NotConvertible&) {
    return false;
  } catch (const std::exception&) {  // GiNaC: division by zero, ...
    *attempted = true;
    return false;
  }
}

}  // namespace grpo_math
