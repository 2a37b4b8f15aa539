// Final-answer extraction, normalization and equivalence for the math and gsm8k verifiers.
// Torch-free; GiNaC only behind latex_expr.h.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace grpo_math {

// ---- extraction ---------------------------------------------------------------------------

// Content of the last \boxed{...} / \fbox{...} (nested braces), or of "\boxed 5" (up to the
// next '$' or line end). `all` receives every boxed content in order. False when none.
bool last_boxed(std::string_view text, std::string* out, std::vector<std::string>* all = nullptr);

// What the completion answers, by the first rule that finds something, and which rule:
//   answer_tag  the last <answer>...</answer> (its \boxed{} content when it has one)
//   boxed       the last \boxed{...} / \fbox{...}
//   minerva     "The final answer is X" ("Final Answer: The final answer is X. I hope it is correct.")
//   hashes      "#### X" (GSM8K)
//   dollars     the text between the last two '$'
//   last_number the last number, when `last_number_fallback`
// Returns "" (rule "none") when nothing is found.
struct Extraction {
  std::string answer;
  std::string rule = "none";
  std::vector<std::string> all_boxed;  // every \boxed{} of the completion when there are several
};
Extraction extract_math_answer(std::string_view completion, bool last_number_fallback);

// GSM8K: the text after the last "####", else the last number (thousands commas removed).
Extraction extract_gsm8k_answer(std::string_view completion);

// The last number of `text` ("-1,234.5" -> "-1234.5"), or "".
std::string last_number(std::string_view text);

// ---- normalization and comparison ---------------------------------------------------------

// The answer string after the Hendrycks MATH strip_string and Minerva normalize_final_answer
// rules that do not change the value (see math_answer.cpp for the list).
std::string normalize_answer(std::string_view answer);

struct CompareOptions {
  double relative_tolerance = 1e-9;  // numeric comparisons of inexact values
  std::size_t max_chars = 2000;      // longer answers are compared as normalized text only
  bool use_ginac = true;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct Verdict {
  bool equal = false;
  std::string rule = "none";  // exact | numeric | symbolic | numeric_identity | text | none
  bool timed_out = false;
  std::string reason;         // why not equal, when known
};

// Whether `given` (extracted from a completion) and `truth` are the same answer.
Verdict answers_equal(std::string_view given, std::string_view truth, const CompareOptions& options);

}  // namespace grpo_math
