// A LaTeX math-expression subset parsed into a small tree, evaluated exactly (128-bit
// rationals) where it can be and numerically (complex doubles) otherwise, and converted to a
// GiNaC expression for the symbolic check. Used by the math verifier (math_answer.cpp) to
// decide whether two answers are the same number or the same expression.
//
// Supported: integers, decimals, scientific notation (1.5e3, 1.5\times10^{3}), + - * / ^ !,
// \frac \dfrac \tfrac \cfrac {a}{b} (and \frac12), \sqrt{x}, \sqrt[n]{x}, \sqrt2, \cdot \times
// \div, implicit multiplication (2x, 3\sqrt{2}, x(y+1), (a)(b)), mixed numbers (2\frac{1}{2}),
// \pi, e, i (the imaginary unit), \infty, \sin \cos \tan \cot \sec \csc \arcsin \arccos \arctan \ln \log \log_b \exp
// (with or without parentheses, \sin^2 x), |x|, \binom{n}{k}, single-letter variables with
// optional subscripts (x_1, a_{n}), \alpha..\omega as variables, and the percent sign (x% =
// x/100 is NOT applied here: the caller decides what a percentage means).
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace grpo_math {

// A rational p/q with 128-bit parts, q > 0, in lowest terms; `ok` false after an overflow.
struct Rational {
  __int128 num = 0, den = 1;
  bool ok = true;
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;

struct Node {
  enum Kind { kNumber, kVariable, kConstPi, kConstE, kConstI, kInfinity, kAdd, kMul, kNeg, kDiv, kPow, kFactorial, kFunc };
  Kind kind = kNumber;
  Rational value;            // kNumber (exact: decimals are converted exactly)
  std::string name;          // kVariable ("x", "x_1", "\alpha"); kFunc ("sin", "log", "abs", "binom", "root")
  std::vector<NodePtr> args; // operands
};

struct ParseLimits {
  std::size_t max_chars = 2000;  // longer input is not parsed (compared as text)
  std::size_t max_nodes = 600;   // larger trees are rejected
};

// Parses `text` (already stripped of \left/\right, spaces, $, \!; see math_answer.cpp).
// Returns nullptr when the text is not an expression of the subset; `why` then says where.
NodePtr parse_latex(std::string_view text, const ParseLimits& limits, std::string* why);

// Number of nodes and whether the tree has free variables.
std::size_t node_count(const Node& n);
bool has_variables(const Node& n);
void collect_variables(const Node& n, std::vector<std::string>& out);

// Exact value of a variable-free tree when every step stays rational (+ - * / and integer
// powers with |exponent| <= 256 and small results); nullopt-like `ok = false` otherwise.
Rational exact_value(const Node& n);

// Numeric value with variables bound to `point` (in the order of `vars`). Non-finite results
// (overflow, division by zero, huge factorials) come back as NaN.
std::complex<double> numeric_value(const Node& n, const std::vector<std::string>& vars,
                                   const std::vector<std::complex<double>>& point);

// GiNaC: whether normal(expand(a - b)) is zero. Trees with exponents that are not small
// integers or rationals, or more than `max_nodes` nodes, are not attempted (returns false with
// *attempted = false). GiNaC is not thread-safe (non-atomic reference counts on shared
// objects), so calls are serialized by one process-wide mutex.
bool ginac_equal(const Node& a, const Node& b, std::size_t max_nodes, bool* attempted);

// Rational helpers.
Rational make_rational(__int128 num, __int128 den);
bool rational_equal(const Rational& a, const Rational& b);
double rational_to_double(const Rational& r);
std::string rational_text(const Rational& r);

}  // namespace grpo_math
