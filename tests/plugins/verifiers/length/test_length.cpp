// The max_length / up_to_max_length verifiers, loaded the way a run loads them: through
// PluginRegistry from the build's plugin folder, configured with a ConfigValue tree. Expected
// values are derived by hand in the comments (open-instruct's MaxLenVerifier /
// UpToMaxLenVerifier formulas).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/plugins/verifiers/verifier_test_util.h"

namespace {

using namespace grpo::testing::verifier_tests;  // make, run, details, config_error, json
using grpo::sdk::VerifierResult;

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
