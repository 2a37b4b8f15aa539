// math and gsm8k: final-answer verifiers for competition math (Hendrycks MATH, MATH-500,
// AIME-style) and grade-school math (GSM8K), scoring 1 when the completion's final answer is
// equivalent to the ground truth and 0 otherwise.
//
// Extraction, normalization and equivalence live in math_answer.cpp (rules and their sources:
// docs/verifiers.md, "math"); LaTeX expressions in latex_expr.cpp (exact rationals, complex
// numerics, GiNaC for symbolic equality).
//
// Ground truth: a string (a bare answer, or a solution whose last \boxed{} or "#### N" is the
// answer), a number, or a JSON list of acceptable answers (any one matching scores 1).
// Depends on the SDK, header-only nlohmann-json and GiNaC (Debian libginac-dev): no LibTorch.
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"
#include "math_answer.h"

namespace {

namespace sdk = ::grpo::sdk;
using json = nlohmann::ordered_json;

constexpr std::size_t kPreview = 200;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The acceptable answers of a ground truth, or an empty list with `why` set.
std::vector<std::string> truth_answers(std::string_view text, bool gsm8k, std::string* why) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *why = "ground_truth is not valid JSON: " + sdk::clip_utf8(text, kPreview);
    return {};
  }
  std::vector<nlohmann::json> items;
  if (j.is_array()) items.assign(j.begin(), j.end());
  else items.push_back(j);
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::string s;
    if (item.is_string()) s = item.get<std::string>();
    else if (item.is_number_integer()) s = std::to_string(item.get<long long>());
    else if (item.is_number()) s = item.dump();
    else {
      *why = std::string("ground_truth must be a string, a number or a list of them, got ") + item.type_name();
      return {};
    }
    std::string boxed;
    grpo_math::Extraction x;
    if (grpo_math::last_boxed(s, &boxed)) s = boxed;
    else if (s.find("####") != std::string::npos) s = grpo_math::extract_gsm8k_answer(s).answer;
    if (gsm8k) {
      std::string t;
      for (char c : s)
        if (c != ',' && c != '$') t += c;
      s = t;
    }
    if (s.find_first_not_of(" \t\n") == std::string::npos) {
      *why = "ground_truth is empty";
      return {};
    }
    out.push_back(s);
  }
  if (out.empty()) *why = "ground_truth is an empty list";
  return out;
}

class MathVerifierBase : public sdk::Verifier {
 public:
  MathVerifierBase(const sdk::ConfigView& cfg, bool gsm8k)
      : gsm8k_(gsm8k),
        fallback_last_number_(cfg.get_bool("fallback_last_number", gsm8k)),
        timeout_ms_(cfg.get_positive_double("timeout_ms", 2000.0, "(milliseconds)")) {
    options_.relative_tolerance =
        cfg.get_double_in_range("relative_tolerance", 1e-9, 0.0, 1.0, sdk::Interval::kRightOpen);
    options_.use_ginac = cfg.get_bool("symbolic", true);
    options_.max_chars = static_cast<std::size_t>(cfg.get_int_at_least("max_answer_chars", 2000, 16));
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    sdk::VerifierResult result;
    json details;
    std::string why;
    const std::vector<std::string> truths = truth_answers(input.ground_truth, gsm8k_, &why);
    if (truths.empty()) {
      details["reason"] = why;
      result.details = dump(details);
      return result;
    }
    const grpo_math::Extraction x = gsm8k_ ? grpo_math::extract_gsm8k_answer(input.completion)
                                           : grpo_math::extract_math_answer(input.completion, fallback_last_number_);
    details["extracted"] = sdk::clip_utf8(x.answer, kPreview);
    details["extraction"] = x.rule;
    details["ground_truth"] = sdk::clip_utf8(truths.front(), kPreview);
    if (x.answer.empty()) {
      details["reason"] = "no final answer found";
      result.details = dump(details);
      return result;
    }
    grpo_math::CompareOptions options = options_;
    options.deadline = std::chrono::steady_clock::now() +
                       std::chrono::microseconds(static_cast<long long>(timeout_ms_ * 1000.0));
    // Candidates: the extracted answer; with several \boxed{}, also all of them as one list
    // ("x = \boxed{1} or \boxed{2}" answers "1, 2").
    std::vector<std::string> candidates = {x.answer};
    if (x.all_boxed.size() > 1 && x.all_boxed.size() <= 8) {
      std::string joined;
      for (const auto& b : x.all_boxed) joined += (joined.empty() ? "" : ",") + b;
      candidates.push_back(joined);
    }
    grpo_math::Verdict verdict;
    for (const std::string& c : candidates) {
      for (const std::string& t : truths) {
        verdict = grpo_math::answers_equal(c, t, options);
        if (verdict.equal || verdict.timed_out) break;
      }
      if (verdict.equal || verdict.timed_out) break;
    }
    details["normalized"] = sdk::clip_utf8(grpo_math::normalize_answer(x.answer), kPreview);
    details["match"] = verdict.rule;
    if (verdict.timed_out) details["timed_out"] = true;
    if (!verdict.equal) details["reason"] = verdict.reason;
    result.score = verdict.equal ? 1.0 : 0.0;
    result.details = dump(details);
    return result;
  }

 private:
  bool gsm8k_;
  bool fallback_last_number_;
  double timeout_ms_;
  grpo_math::CompareOptions options_;
};

class MathVerifier final : public MathVerifierBase {
 public:
  explicit MathVerifier(const sdk::ConfigView& cfg) : MathVerifierBase(cfg, false) {}
};

class Gsm8kVerifier final : public MathVerifierBase {
 public:
  explicit Gsm8kVerifier(const sdk::ConfigView& cfg) : MathVerifierBase(cfg, true) {}
};

}  // namespace

GRPO_PLUGIN("math", "1.0.0", "final-answer verifiers for competition and grade-school math (GiNaC)") {
  registrar.add_verifier<MathVerifier>(
      "math", "1 if the last \\boxed{} (or Minerva / #### / <answer>) answer is equivalent to the ground truth");
  registrar.add_verifier<Gsm8kVerifier>("gsm8k", "1 if the #### (else last) number equals the ground truth");
}
