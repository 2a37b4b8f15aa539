// The math and gsm8k verifiers, loaded the way a run loads them (PluginRegistry over the
// build's plugin folder). Expected verdicts are by hand (the value each answer denotes), and
// the agreement tests use the reference answers that the public benchmarks ship with their
// reference solutions (tests/fixtures/verifiers/math/README.md).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grpo/sdk/config_value.h"
#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::ConfigError;
using grpo::sdk::Verifier;
using grpo::sdk::VerifierInput;
using grpo::sdk::VerifierResult;
using json = nlohmann::json;
using Option = grpo::testing::PluginOption;

std::shared_ptr<Verifier> make(const std::string& name, const std::vector<Option>& opts = {}) {
  return grpo::testing::create_component<Verifier>(name, opts, "verifiers[0]");
}

VerifierResult run(const Verifier& v, const std::string& completion, const json& gt) {
  return grpo::testing::verify_once(v, completion, gt, "math");
}

json details(const VerifierResult& r) { return json::parse(r.details); }

std::vector<json> read_jsonl(const std::string& name) {
  std::ifstream in(std::string(GRPO_MATH_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

struct Case {
  const char* completion;
  const char* truth;
  double expected;
  const char* why;
};

void check_cases(const Verifier& v, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const VerifierResult r = run(v, c.completion, c.truth);
    EXPECT_EQ(r.score, c.expected) << c.why << "\n  completion: " << c.completion << "\n  truth: " << c.truth
                                   << "\n  details: " << r.details;
  }
}

// ------------------------------------------------------------------------------------------

TEST(MathVerifier, TrickyEquivalencesNamedInTheIssue) {
  auto v = make("math");
  check_cases(*v, {
      {R"(so $\boxed{\frac{1}{2}}$)", "0.5", 1, "0.5 = 1/2"},
      {R"(\boxed{0.5})", R"(\frac{1}{2})", 1, "1/2 = 0.5"},
      {R"(\boxed{\dfrac{\sqrt{3}}{2}})", R"(\frac{\sqrt3}{2})", 1, "dfrac and \\sqrt3 spellings"},
      {R"(\boxed{10\%})", "10", 1, "10% vs the number written 10 (MATH answers drop \\%)"},
      {R"(\boxed{10\%})", "0.1", 1, "10% is the value 0.1"},
      {R"(\boxed{10\%})", "11", 0, "10% is neither 11 nor 0.11"},
      {R"(\boxed{1,000})", "1000", 1, "thousands separator"},
      {R"(\boxed{1{,}000{,}000})", "1000000", 1, "thousands separator {,}"},
      {R"(\boxed{(1,2)})", "(2,1)", 0, "points are ordered"},
      {R"(\boxed{\{1,2\}})", R"(\{2,1\})", 1, "sets are not"},
      {R"(\boxed{1, 2})", "2, 1", 1, "a list of solutions is unordered"},
      {R"(\boxed{x=3})", "3", 1, "an equation with a name on the left is its right side"},
      {R"(\boxed{3})", "x = 3", 1, "the same, the other way round"},
  });
}

TEST(MathVerifier, WrongAnswersDoNotMatch) {
  auto v = make("math");
  check_cases(*v, {
      {R"(\boxed{1/2})", "2", 0, "1/2 != 2"},
      {R"(\boxed{\sqrt{2}})", "2", 0, "sqrt 2 != 2"},
      {R"(\boxed{(1,2)})", "(1,3)", 0, "different point"},
      {R"(\boxed{x^2})", "2x", 0, "different polynomial"},
      {R"(\boxed{[1,3)})", "(1,3]", 0, "interval endpoints differ in closedness"},
      {R"(\boxed{\frac{\pi}{3}})", R"(\frac{\pi}{2})", 0, "different angle"},
      {R"(\boxed{123456789012345678901})", "123456789012345678902", 0, "big integers compared exactly"},
      {R"(\boxed{1, 2, 3})", "1, 2", 0, "a list with an extra element"},
      {R"(\boxed{3.14})", R"(\pi)", 0, "an approximation is not the value at the default tolerance"},
      {R"(\boxed{\text{Bob}})", R"(\text{Evelyn})", 0, "different names"},
  });
}

// The default relative tolerance is 1e-9: pinned from both sides with answers whose relative
// error was computed by hand (Python: (math.pi - x) / math.pi), so a looser or a tighter
// default fails here.
TEST(MathVerifier, DefaultRelativeToleranceIsOneInABillion) {
  auto v = make("math");
  check_cases(*v, {
      {R"(\boxed{3.1415926})", R"(\pi)", 0, "relative error 1.7e-8: wrong at 1e-9 (right at 1e-6)"},
      {R"(\boxed{3.141592659872978})", R"(\pi)", 0, "relative error 2.0e-9: just outside 1e-9"},
      {R"(\boxed{3.1415926551605895})", R"(\pi)", 1, "relative error 5.0e-10: just inside 1e-9"},
      {R"(\boxed{3.14159265358979})", R"(\pi)", 1, "relative error 9.9e-16: printing precision, right"},
  });
}

TEST(MathVerifier, SymbolicAndNumericEquivalence) {
  auto v = make("math");
  check_cases(*v, {
      {R"(\boxed{\frac{x^2-1}{x-1}})", "x+1", 1, "cancels: GiNaC normal()"},
      {R"(\boxed{2x+2})", "2(x+1)", 1, "implicit multiplication, expand"},
      {R"(\boxed{2\sqrt{3}})", R"(\sqrt{12})", 1, "2 sqrt 3 = sqrt 12"},
      {R"(\boxed{2\frac{1}{2}})", R"(\frac{5}{2})", 1, "mixed number"},
      {R"(\boxed{1.5\times10^{3}})", "1500", 1, "scientific notation"},
      {R"(\boxed{1.5e3})", "1500", 1, "scientific notation, e form"},
      {R"(\boxed{e^{i\pi}})", "-1", 1, "Euler"},
      {R"(\boxed{\frac{\pi}{4}})", R"(\frac{1}{4}\pi)", 1, "pi/4"},
      {R"(\boxed{\sin^2 x + \cos^2 x})", "1", 1, "an identity GiNaC does not simplify: random-point test"},
      {R"(\boxed{\sqrt[3]{-8}})", "-2", 1, "real cube root"},
      {R"(\boxed{\binom{5}{2}})", "10", 1, "binomial"},
      {R"(\boxed{4!})", "24", 1, "factorial"},
      {R"(\boxed{|{-3}|})", "3", 1, "absolute value"},
      {R"(\boxed{\log_2 8})", "3", 1, "log base 2"},
      {R"(\boxed{y = 2x + 1})", "2x+1", 1, "equation of a line vs its right side"},
      {R"(\boxed{x \in [2, 5]})", "[2,5]", 1, "membership vs the interval"},
  });
}

TEST(MathVerifier, StructuresUnitsAndText) {
  auto v = make("math");
  check_cases(*v, {
      {R"(\boxed{[1, 3)})", "[1,3)", 1, "half-open interval"},
      {R"(\boxed{(-\infty, 2) \cup (3, \infty)})", R"((-\infty,2)\cup(3,\infty))", 1, "union of intervals"},
      {R"(\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}})", R"(\begin{pmatrix}1\\2\end{pmatrix})", 1, "vector"},
      {R"(\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}})", R"(\begin{pmatrix}2\\1\end{pmatrix})", 0, "vector order"},
      {R"(\boxed{1 \pm \sqrt{2}})", R"(1+\sqrt2, 1-\sqrt2)", 1, "plus-minus is two answers"},
      {R"(\boxed{90^\circ})", "90", 1, "degrees"},
      {R"(\boxed{5 \text{ cm}})", "5", 1, "units in \\text"},
      {R"(\boxed{864 \mbox{ inches}^2})", "864", 1, "squared units in \\mbox"},
      {R"(\boxed{12 inches})", "12", 1, "plain unit word"},
      {R"(\boxed{\$5.00})", "5", 1, "dollars"},
      {R"(\boxed{3.0})", "3", 1, "trailing zero"},
      {R"(\boxed{\text{(B)}})", "B", 1, "a choice letter"},
      {R"(\boxed{\text{Evelyn}})", R"(\text{Evelyn})", 1, "a name"},
      {R"(\boxed{\textbf{odd}})", "odd", 1, "a word"},
  });
}

TEST(MathVerifier, ExtractionRules) {
  auto v = make("math");
  auto extracted = [&](const std::string& completion) {
    return details(run(*v, completion, "1")).value("extraction", std::string());
  };
  // nested braces, the last box wins
  VerifierResult r = run(*v, R"(first \boxed{2} then \boxed{\frac{\sqrt{\frac{1}{4}}}{2}} done)", R"(\frac14)");
  EXPECT_EQ(r.score, 1.0) << r.details;
  EXPECT_EQ(details(r)["extracted"], R"(\frac{\sqrt{\frac{1}{4}}}{2})");
  EXPECT_EQ(run(*v, R"(hence \boxed 5$.)", "5").score, 1.0);
  EXPECT_EQ(run(*v, R"(\fbox{7})", "7").score, 1.0);
  EXPECT_EQ(run(*v, "Final Answer: The final answer is $42$. I hope it is correct.", "42").score, 1.0);
  EXPECT_EQ(extracted("Final Answer: The final answer is $1$. I hope it is correct."), "minerva");
  EXPECT_EQ(run(*v, "blah\n#### 1,234", "1234").score, 1.0);
  EXPECT_EQ(extracted("#### 1"), "hashes");
  EXPECT_EQ(run(*v, R"(<think>maybe \boxed{2}</think><answer>\frac{3}{4}</answer>)", "0.75").score, 1.0);
  EXPECT_EQ(extracted(R"(<answer>1</answer>)"), "answer_tag");
  EXPECT_EQ(run(*v, "so the area is $6$", "6").score, 1.0);
  EXPECT_EQ(extracted("so the area is $6$"), "dollars");
  // several boxes together answer a list
  EXPECT_EQ(run(*v, R"(x = \boxed{1} or x = \boxed{-2})", "-2, 1").score, 1.0);
  // No last-number fallback by default for math; on when asked.
  r = run(*v, "the answer is 17", "17");
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(details(r)["reason"], "no final answer found");
  EXPECT_EQ(run(*make("math", {{"fallback_last_number", "true"}}), "the answer is 17", "17").score, 1.0);
  // an unbalanced box is not an answer
  EXPECT_EQ(run(*v, R"(\boxed{12)", "12").score, 0.0);
}

TEST(MathVerifier, GroundTruthForms) {
  auto v = make("math");
  EXPECT_EQ(run(*v, R"(\boxed{3})", 3).score, 1.0);                                     // a number
  EXPECT_EQ(run(*v, R"(\boxed{3})", json::array({"4", "3"})).score, 1.0);               // alternatives
  EXPECT_EQ(run(*v, R"(\boxed{3})", R"(so it is $\boxed{3}$.)").score, 1.0);            // a solution
  EXPECT_EQ(run(*v, R"(\boxed{3})", "so it is 3.\n#### 3").score, 1.0);                 // GSM8K style
  for (const json& bad : {json(nullptr), json::object(), json(""), json::array()}) {
    const VerifierResult r = run(*v, R"(\boxed{3})", bad);
    EXPECT_EQ(r.score, 0.0) << bad;
    EXPECT_FALSE(details(r).value("reason", std::string()).empty()) << r.details;
  }
  VerifierInput in;
  in.completion = R"(\boxed{3})";
  in.ground_truth = "{not json";
  const VerifierResult r = v->verify(in);
  EXPECT_EQ(r.score, 0.0);
  EXPECT_NE(details(r)["reason"].get<std::string>().find("not valid JSON"), std::string::npos);
}

TEST(MathVerifier, HostileInputIsBoundedAndScoresZero) {
  auto v = make("math", {{"timeout_ms", "1000"}});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run(*v, R"(\boxed{10^{10^{10}}})", "1").score, 0.0);
  EXPECT_EQ(run(*v, R"(\boxed{x^{1000000}})", "x^{1000001}").score, 0.0);
  EXPECT_EQ(run(*v, R"(\boxed{99999!})", "1").score, 0.0);
  EXPECT_EQ(run(*v, "\\boxed{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}", "1").score, 0.0);
  EXPECT_EQ(run(*v, std::string(100000, 'a') + "\\boxed{4}", "4").score, 1.0);
  EXPECT_EQ(run(*v, "\\boxed{" + std::string(50000, '1') + "}", "1").score, 0.0);
  EXPECT_EQ(run(*v, R"(\boxed{\frac{1}{0}})", "1").score, 0.0);
  EXPECT_EQ(run(*v, "\\boxed{\xff\xfe}", "1").score, 0.0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0);  // bounded work, not a speed check
}

TEST(MathVerifier, OptionsAreValidated) {
  EXPECT_THROW(make("math", {{"relative_tolerance", "-1"}}), ConfigError);
  EXPECT_THROW(make("math", {{"timeout_ms", "0"}}), ConfigError);
  // a tolerance admits approximations
  EXPECT_EQ(run(*make("math", {{"relative_tolerance", "0.001"}}), R"(\boxed{3.1416})", R"(\pi)").score, 1.0);
}

TEST(MathVerifier, ConcurrentCallsAgreeWithSerialOnes) {
  // GiNaC is not thread-safe: the plugin serializes its symbolic path. Many threads on
  // symbolic answers must give the serial verdicts.
  auto v = make("math");
  const std::vector<Case> cases = {{R"(\boxed{\frac{x^2-1}{x-1}})", "x+1", 1, ""},
                                   {R"(\boxed{(a+b)^2})", "a^2+2ab+b^2", 1, ""},
                                   {R"(\boxed{(a+b)^2})", "a^2+b^2", 0, ""},
                                   {R"(\boxed{\frac{1}{x}+\frac{1}{y}})", R"(\frac{x+y}{xy})", 1, ""}};
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const Case& c = cases[(i + t) % cases.size()];
        if (run(*v, c.completion, c.truth).score != c.expected) ++wrong[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

// ---- agreement with public benchmarks ------------------------------------------------------

// A wrong answer made from the reference one without the verifier: an integer n becomes n+1;
// otherwise the last run of digits outside \text{} / \mbox{} (units) is incremented;
// an answer without digits gets "+1" appended (a word gets a letter).
std::string perturb(const std::string& answer) {
  std::string a = answer;
  a.erase(std::remove(a.begin(), a.end(), ','), a.end());
  bool integer = !a.empty();
  for (std::size_t i = 0; i < a.size(); ++i)
    integer = integer && (std::isdigit(static_cast<unsigned char>(a[i])) || (i == 0 && a[i] == '-'));
  if (integer && a.size() < 18) return std::to_string(std::stoll(a) + 1);
  // digits inside unit text are not part of the value
  std::string masked = answer;
  for (const char* cmd : {"\\text{", "\\mbox{"})
    for (std::size_t p = masked.find(cmd); p != std::string::npos; p = masked.find(cmd, p + 1)) {
      std::size_t e = masked.find('}', p);
      for (std::size_t k = p; k < masked.size() && k <= e; ++k) masked[k] = 'x';
      if (e + 2 < masked.size() && masked[e + 1] == '^') masked[e + 2] = 'x';
    }
  std::size_t end = std::string::npos;
  for (std::size_t i = masked.size(); i-- > 0;)
    if (std::isdigit(static_cast<unsigned char>(masked[i]))) {
      end = i + 1;
      break;
    }
  if (end == std::string::npos) {
    bool word = false;
    for (char c : answer) word = word || std::isalpha(static_cast<unsigned char>(c));
    return answer.find("\\text") != std::string::npos ? answer + "\\text{q}" : answer + "+1";
  }
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(masked[begin - 1]))) --begin;
  const std::string digits = answer.substr(begin, end - begin);
  const std::string bumped = digits.size() < 18 ? std::to_string(std::stoll(digits) + 1) : digits + "1";
  return answer.substr(0, begin) + bumped + answer.substr(end);
}

struct Agreement {
  std::size_t rows = 0, correct = 0, perturbed_wrong = 0;
  std::vector<std::string> misses;
};

Agreement agreement(const Verifier& v, const std::vector<std::pair<std::string, std::string>>& rows) {
  Agreement a;
  for (const auto& [solution, answer] : rows) {
    ++a.rows;
    const VerifierResult ok = run(v, solution, answer);
    if (ok.score == 1.0) ++a.correct;
    else a.misses.push_back("correct judged wrong: " + answer + " " + ok.details);
    const std::string wrong = perturb(answer);
    const VerifierResult bad = run(v, solution, wrong);
    if (bad.score == 0.0) ++a.perturbed_wrong;
    else a.misses.push_back("perturbed " + answer + " -> " + wrong + " judged correct: " + bad.details);
  }
  return a;
}

void report(const char* name, const Agreement& a) {
  const double ok = 100.0 * static_cast<double>(a.correct) / static_cast<double>(a.rows);
  const double wrong = 100.0 * static_cast<double>(a.perturbed_wrong) / static_cast<double>(a.rows);
  std::printf("%s: %zu rows, reference solution judged correct %.2f%%, perturbed answer judged wrong %.2f%%\n", name,
              a.rows, ok, wrong);
  for (const auto& m : a.misses) std::printf("  %s\n", m.c_str());
}

TEST(MathVerifierAgreement, Math500ReferenceSolutionsAgainstTheirAnswers) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const json& r : read_jsonl("math500.jsonl")) rows.emplace_back(r["solution"], r["answer"]);
  ASSERT_EQ(rows.size(), 500u);
  const Agreement a = agreement(*make("math"), rows);
  report("MATH-500", a);
  EXPECT_GE(a.correct * 100, a.rows * 99);          // >= 99% judged correct
  EXPECT_GE(a.perturbed_wrong * 100, a.rows * 99);  // >= 99% of perturbed answers judged wrong
}

TEST(MathVerifierAgreement, Math500AnswersRewrittenWithoutChangingTheirValue) {
  // The reference answer rewritten the ways models write it; each must still match.
  auto v = make("math");
  std::size_t rows = 0, matched = 0;
  for (const json& r : read_jsonl("math500.jsonl")) {
    const std::string a = r["answer"];
    std::string dfrac = a;
    for (std::size_t p = dfrac.find("\\frac"); p != std::string::npos; p = dfrac.find("\\frac", p + 6))
      dfrac.replace(p, 5, "\\dfrac");
    for (const std::string& written : {dfrac, "$" + a + "$", "\\left. " + a + " \\right.", " " + a + " ."}) {
      ++rows;
      const VerifierResult res = run(*v, "The answer is $\\boxed{" + written + "}$.", a);
      if (res.score == 1.0) ++matched;
      else ADD_FAILURE() << written << " vs " << a << ": " << res.details;
    }
  }
  std::printf("MATH-500 rewritten answers: %zu / %zu matched\n", matched, rows);
}

TEST(MathVerifierAgreement, Gsm8kReferenceSolutionsAgainstTheirAnswers) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const json& r : read_jsonl("gsm8k_test.jsonl")) {
    const std::string solution = r["answer"];
    std::string answer = solution.substr(solution.rfind("####") + 4);
    answer.erase(0, answer.find_first_not_of(' '));
    rows.emplace_back(solution, answer);
  }
  ASSERT_EQ(rows.size(), 1319u);
  for (const char* name : {"gsm8k", "math"}) {
    const Agreement a = agreement(*make(name), rows);
    report(name, a);
    EXPECT_GE(a.correct * 1000, a.rows * 999) << name;  // >= 99.9%
    EXPECT_GE(a.perturbed_wrong * 100, a.rows * 99) << name;
  }
}

}  // namespace
