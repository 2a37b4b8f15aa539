// The format and length verifiers, loaded the way a run loads them: through PluginRegistry
// from the build's plugin folder, configured with a ConfigValue tree. Expected values are
// derived by hand in the comments (Python re semantics for format, open-instruct's
// MaxLenVerifier / UpToMaxLenVerifier formulas for length).
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/plugin/plugin_registry.h"
#include "grpo/sdk/config_value.h"
#include "grpo/sdk/config_view.h"
#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using grpo::sdk::Verifier;
using grpo::sdk::VerifierInput;
using grpo::sdk::VerifierResult;
using json = nlohmann::json;

using Option = grpo::testing::PluginOption;

std::shared_ptr<Verifier> make(const std::string& name, const std::vector<Option>& opts = {}) {
  return grpo::testing::create_component<Verifier>(name, opts, "verifiers[0]");
}

VerifierResult run(const Verifier& v, const std::string& completion, const std::string& gt = "null") {
  VerifierInput in;
  in.prompt = "p";
  in.completion = completion;
  in.ground_truth = gt;
  in.dataset = "test";
  in.metadata = "{}";
  return v.verify(in);
}

json details(const VerifierResult& r) {
  json d = json::parse(r.details);
  EXPECT_TRUE(d.is_object()) << r.details;
  return d;
}

template <class Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// ------------------------------------------------------------------------------------------
// format: default pattern .*?</think>\s*<answer>.*?</answer>, re.match, DOTALL
// ------------------------------------------------------------------------------------------
#ifndef GRPO_NO_FORMAT_PLUGIN

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

#endif  // GRPO_NO_FORMAT_PLUGIN

// ------------------------------------------------------------------------------------------
// length: open-instruct MaxLenVerifier / UpToMaxLenVerifier, normalizer 8192, unit words
// ------------------------------------------------------------------------------------------
const std::string kFour = "one two  three\nfour ";  // len("...".split()) == 4

TEST(LengthVerifier, MaxLengthExactShorterLonger) {
  auto v = make("max_length");
  VerifierResult exact = run(*v, kFour, "4");  // |4-4| = 0 -> 1
  EXPECT_EQ(exact.score, 1.0);
  json d = details(exact);
  EXPECT_EQ(d["unit"], "words");
  EXPECT_EQ(d["length"], 4);
  EXPECT_EQ(d["desired"], 4.0);
  EXPECT_EQ(d["normalizer"], 8192.0);
  EXPECT_EQ(d["raw_score"], 1.0);
  EXPECT_EQ(run(*v, kFour, "6").score, 1.0 - 2.0 / 8192);  // shorter: |4-6| = 2
  EXPECT_EQ(run(*v, kFour, "2").score, 1.0 - 2.0 / 8192);  // longer: |4-2| = 2
  EXPECT_EQ(run(*v, kFour, "\"4\"").score, 1.0);           // label as a string, float("4")
  EXPECT_EQ(run(*v, kFour, "\" 4.5 \"").score, 1.0 - 0.5 / 8192);
}

TEST(LengthVerifier, UpToMaxLengthExactShorterLonger) {
  auto v = make("up_to_max_length");
  EXPECT_EQ(run(*v, kFour, "6").score, 1.0);               // 4-6 < 0: too short is fine
  EXPECT_EQ(run(*v, kFour, "4").score, 1.0);               // diff 0 -> 1 - 0/8192
  EXPECT_EQ(run(*v, kFour, "2").score, 1.0 - 2.0 / 8192);  // 2 over
}

TEST(LengthVerifier, ZeroDesiredLength) {
  EXPECT_EQ(run(*make("max_length"), kFour, "0").score, 1.0 - 4.0 / 8192);
  EXPECT_EQ(run(*make("up_to_max_length"), kFour, "0").score, 1.0 - 4.0 / 8192);
  EXPECT_EQ(run(*make("max_length"), "", "0").score, 1.0);
}

TEST(LengthVerifier, NegativeScoresClampToZero) {
  // normalizer 4: 1 - |4-10|/4 = -0.5 -> 0 (open-instruct would return -0.5).
  VerifierResult r = run(*make("max_length", {{"normalizer", "4"}}), kFour, "10");
  EXPECT_EQ(r.score, 0.0);
  json d = details(r);
  EXPECT_EQ(d["raw_score"], -0.5);
  EXPECT_TRUE(d.contains("reason"));
  EXPECT_EQ(run(*make("up_to_max_length", {{"normalizer", "4"}}), kFour, "2").score, 0.5);  // 1 - 2/4
}

TEST(LengthVerifier, Units) {
  const std::string s = "h\xc3\xa9llo w\xc3\xb6rld";  // "héllo wörld": 11 code points, 13 bytes
  EXPECT_EQ(details(run(*make("max_length", {{"unit", "chars"}}), s, "11"))["length"], 11);
  EXPECT_EQ(run(*make("max_length", {{"unit", "chars"}}), s, "11").score, 1.0);
  EXPECT_EQ(details(run(*make("max_length", {{"unit", "bytes"}}), s, "11"))["length"], 13);
  EXPECT_EQ(details(run(*make("max_length"), s, "11"))["length"], 2);
}

TEST(LengthVerifier, BadGroundTruthScoresZeroWithReason) {
  auto v = make("max_length");
  struct Case {
    std::string gt;
    std::string reason_part;
  };
  for (const Case& c : std::vector<Case>{{"four", "not valid JSON"},
                                         {"", "not valid JSON"},
                                         {"\"abc\"", "not a number"},
                                         {"\"4 words\"", "not a number"},
                                         {"[4]", "got array"},
                                         {"null", "got null"},
                                         {"{\"n\": 4}", "got object"},
                                         {"-3", "negative"},
                                         {"\"inf\"", "not finite"}}) {
    VerifierResult r;
    ASSERT_NO_THROW(r = run(*v, kFour, c.gt)) << c.gt;
    EXPECT_EQ(r.score, 0.0) << c.gt;
    const std::string reason = details(r)["reason"];
    EXPECT_NE(reason.find(c.reason_part), std::string::npos) << c.gt << " -> " << reason;
  }
}

TEST(LengthVerifier, InvalidOptionsAreConfigErrorsNamingTheKey) {
  std::string msg = config_error([] { make("max_length", {{"normalizer", "0"}}); });
  EXPECT_NE(msg.find("normalizer"), std::string::npos) << msg;
  msg = config_error([] { make("up_to_max_length", {{"unit", "tokens"}}); });
  EXPECT_NE(msg.find("unit"), std::string::npos) << msg;
}

}  // namespace
