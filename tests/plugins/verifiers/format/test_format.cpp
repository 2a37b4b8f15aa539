// The format verifier, loaded the way a run loads it: through PluginRegistry from the build's
// plugin folder, configured with a ConfigValue tree. Expected values are derived by hand in the
// comments (Python re semantics).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/plugins/verifiers/verifier_test_util.h"

namespace {

using namespace grpo::testing::verifier_tests;  // make, run, details, config_error, json
using grpo::sdk::VerifierResult;

// ------------------------------------------------------------------------------------------
// format: default pattern .*?</think>\s*<answer>.*?</answer>, re.match, DOTALL
// ------------------------------------------------------------------------------------------
TEST(FormatVerifier, WellFormedR1OutputScoresOne) {
  auto v = make("format");
  const std::string c = "<think>2+2 is 4</think><answer>4</answer>";
  VerifierResult r = run(*v, c);
  EXPECT_EQ(r.score, 1.0);
  json d = details(r);
  EXPECT_EQ(d["matched"], true);
  EXPECT_EQ(d["mode"], "match");
  EXPECT_EQ(d["match_begin"], 0);
  EXPECT_EQ(d["match_end"], c.size());
  EXPECT_EQ(d["trailing_bytes"], 0);
  EXPECT_FALSE(d.contains("pattern"));  // only echoed for a custom pattern
}

TEST(FormatVerifier, MissingThinkCloseScoresZero) {
  // `.*?</think>` needs a literal </think> somewhere: none -> no match.
  auto v = make("format");
  VerifierResult r = run(*v, "<think>2+2 is 4<answer>4</answer>");
  EXPECT_EQ(r.score, 0.0);
  json d = details(r);
  EXPECT_EQ(d["matched"], false);
  EXPECT_EQ(d["reason"], "no </think> in the completion");
}

TEST(FormatVerifier, AnswerBeforeThinkScoresZero) {
  // `.*?` may stretch to the only </think>, but then `\s*<answer>` meets the end of text.
  auto v = make("format");
  VerifierResult r = run(*v, "<answer>4</answer><think>2+2 is 4</think>");
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(details(r)["reason"], "<answer> appears only before </think>");
}

TEST(FormatVerifier, ExtraTextAfterAnswerStillMatchesLikeReMatch) {
  // Python re.match anchors at the start only; the lazy `.*?</answer>` stops at the first
  // </answer> and the match succeeds with " extra" left over -> 1.0 (open-instruct's behaviour).
  auto v = make("format");
  const std::string c = "<think>t</think><answer>4</answer> extra";
  VerifierResult r = run(*v, c);
  EXPECT_EQ(r.score, 1.0);
  json d = details(r);
  EXPECT_EQ(d["match_end"], c.size() - 6);
  EXPECT_EQ(d["trailing_bytes"], 6);

  // re.fullmatch: `.*?` could stretch to a later </answer>, there is none -> no match.
  auto full = make("format", {{"mode", "fullmatch"}});
  VerifierResult rf = run(*full, c);
  EXPECT_EQ(rf.score, 0.0);
  EXPECT_EQ(details(rf)["reason"], "text after the final </answer> (mode fullmatch)");
  EXPECT_EQ(run(*full, "<think>t</think><answer>4</answer>").score, 1.0);
}

TEST(FormatVerifier, MultilineContentNeedsDotall) {
  // With DOTALL `.` crosses newlines and `\s*` eats "\n\n" -> 1.0.
  const std::string c = "<think>\nline 1\nline 2\n</think>\n\n<answer>\n4\n</answer>\n";
  EXPECT_EQ(run(*make("format"), c).score, 1.0);
  // Without DOTALL the leading `.*?` cannot cross the first '\n' (right after "<think>"),
  // so </think> is unreachable from position 0: Python re.match(p, c) is None -> 0.0.
  EXPECT_EQ(run(*make("format", {{"dotall", "false"}}), c).score, 0.0);
}

TEST(FormatVerifier, PatternDoesNotRequireOpeningThinkTag) {
  // R1 chat templates put "<think>" in the prompt; the reference pattern starts with `.*?`.
  auto v = make("format");
  EXPECT_EQ(run(*v, "reasoning...</think><answer>4</answer>").score, 1.0);
  EXPECT_EQ(run(*v, "Sure. <think>t</think>  \t<answer></answer>").score, 1.0);  // leading text, empty answer
  EXPECT_EQ(run(*v, "").score, 0.0);
  // Text between </think> and <answer>: `\s*` cannot skip "x" and there is no later </think>.
  VerifierResult r = run(*v, "<think>t</think> x <answer>4</answer>");
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(details(r)["reason"], "no </think> directly followed (whitespace aside) by <answer>...</answer>");
  // Missing </answer>.
  EXPECT_EQ(details(run(*v, "<think>t</think><answer>4"))["reason"], "no </answer> after </think><answer>");
}

TEST(FormatVerifier, LongCompletionDoesNotCrash) {
  // 2 MB of thinking: std::regex's recursive executor would overflow the stack here.
  auto v = make("format");
  std::string c = "<think>" + std::string(2'000'000, 'a') + "\n</think><answer>4</answer>";
  EXPECT_EQ(run(*v, c).score, 1.0);
  EXPECT_EQ(run(*v, std::string(2'000'000, 'a')).score, 0.0);
}

TEST(FormatVerifier, CustomPatternAndModes) {
  auto m = make("format", {{"pattern", R"(<answer>\d+</answer>)", true}});
  // match mode: anchored at the start.
  EXPECT_EQ(run(*m, "<answer>42</answer>").score, 1.0);
  EXPECT_EQ(run(*m, "<answer>x</answer>").score, 0.0);
  VerifierResult miss = run(*m, "so <answer>42</answer>");
  EXPECT_EQ(miss.score, 0.0);
  json d = details(miss);
  EXPECT_EQ(d["pattern"], R"(<answer>\d+</answer>)");
  EXPECT_EQ(d["reason"], "the completion does not match the pattern");
  // search mode: anywhere (re.search).
  auto s = make("format", {{"pattern", R"(<answer>\d+</answer>)", true}, {"mode", "search"}});
  VerifierResult hit = run(*s, "so <answer>42</answer> done");
  EXPECT_EQ(hit.score, 1.0);
  EXPECT_EQ(details(hit)["match_begin"], 3);
  // ignore_case.
  auto ic = make("format", {{"pattern", "<ANSWER>", true}, {"ignore_case", "true"}});
  EXPECT_EQ(run(*ic, "<answer>").score, 1.0);
}

TEST(FormatVerifier, InvalidOptionsAreConfigErrorsNamingTheKey) {
  std::string msg = config_error([] { make("format", {{"pattern", "(<think>", true}}); });
  EXPECT_NE(msg.find("pattern"), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid regular expression"), std::string::npos) << msg;
  msg = config_error([] { make("format", {{"mode", "prefix"}}); });
  EXPECT_NE(msg.find("mode"), std::string::npos) << msg;
  msg = config_error([] { make("format", {{"match_limit", "0"}}); });
  EXPECT_NE(msg.find("match_limit"), std::string::npos) << msg;
  msg = config_error([] { make("format", {{"no_such_option", "1"}}); });
  EXPECT_NE(msg.find("no_such_option"), std::string::npos) << msg;
}

TEST(FormatVerifier, InvalidUtf8IsTolerated) {
  auto v = make("format");
  VerifierResult r = run(*v, "<think>\xff\xfe</think><answer>\xc3</answer>");
  EXPECT_EQ(r.score, 1.0);
  EXPECT_EQ(details(r)["invalid_utf8"], true);  // and valid JSON (replacement chars)
}

}  // namespace
