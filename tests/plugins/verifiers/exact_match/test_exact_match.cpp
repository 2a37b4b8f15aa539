// The exact_match verifier, loaded the way a run loads it: through PluginRegistry from the
// build's plugin folder (libgrpo_exact_match.so), configured with a ConfigValue tree.
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"
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

grpo::core::PluginRegistry& registry() { return grpo::testing::build_plugin_registry(); }

using Option = grpo::testing::PluginOption;  // quoted: as if written "value" in YAML

ConfigValue options(const std::vector<Option>& opts) { return grpo::testing::plugin_options(opts); }

std::shared_ptr<Verifier> make(const std::vector<Option>& opts = {}) {
  return grpo::testing::create_component<Verifier>("exact_match", opts, "verifiers[0]");
}

VerifierResult run(const Verifier& v, const std::string& completion, const std::string& ground_truth_json) {
  VerifierInput in;
  in.prompt = "What is the answer?";
  in.completion = completion;
  in.ground_truth = ground_truth_json;
  in.dataset = "test";
  in.metadata = "{}";
  return v.verify(in);
}

double score(const Verifier& v, const std::string& completion, const std::string& ground_truth_json) {
  return run(v, completion, ground_truth_json).score;
}

json details(const Verifier& v, const std::string& completion, const std::string& ground_truth_json) {
  VerifierResult r = run(v, completion, ground_truth_json);
  json d = json::parse(r.details);  // must always be valid JSON
  EXPECT_TRUE(d.is_object()) << r.details;
  return d;
}

// The message of what `fn` throws, or "" if it does not throw.
template <class Fn>
std::string thrown_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ------------------------------------------------------------------------------ loading

TEST(ExactMatchPlugin, LoadsFromBuildDirWithManifest) {
  grpo::core::PluginInfo info = registry().load_plugin("exact_match");
  EXPECT_EQ(info.name, "exact_match");
  EXPECT_EQ(info.version, "1.0.0");
  ASSERT_EQ(info.components.size(), 1u);
  EXPECT_EQ(info.components[0].name, "exact_match");
  EXPECT_EQ(info.components[0].kind, grpo::sdk::ComponentKind::kVerifier);
  EXPECT_FALSE(info.components[0].uses_torch);
}

TEST(ExactMatchPlugin, NullConfigMeansDefaults) {
  std::shared_ptr<Verifier> v = registry().create_verifier("exact_match", nullptr, "verifiers[0]");
  ASSERT_TRUE(v);
  EXPECT_EQ(score(*v, "  PARIS \n", "\"paris\""), 1.0);
}

TEST(ExactMatchPlugin, QualifiedNameResolves) {
  ConfigValue node = options({});
  EXPECT_TRUE(registry().create_verifier("exact_match/exact_match", &node, "verifiers[0]"));
}

// ------------------------------------------------------------------------------ options

TEST(ExactMatchOptions, DefaultsFoldCaseAndCollapseWhitespace) {
  auto v = make();
  EXPECT_EQ(score(*v, "Paris", "\"paris\""), 1.0);
  EXPECT_EQ(score(*v, "  New \t York\n", "\"new york\""), 1.0);
  // Punctuation and articles count by default.
  EXPECT_EQ(score(*v, "Paris.", "\"paris\""), 0.0);
  EXPECT_EQ(score(*v, "the cat", "\"cat\""), 0.0);
  EXPECT_EQ(score(*v, "Lyon", "\"paris\""), 0.0);
}

TEST(ExactMatchOptions, CaseSensitive) {
  auto on = make({{"case_sensitive", "true"}});
  EXPECT_EQ(score(*on, "Paris", "\"Paris\""), 1.0);
  EXPECT_EQ(score(*on, "paris", "\"Paris\""), 0.0);
  auto off = make({{"case_sensitive", "false"}});
  EXPECT_EQ(score(*off, "pArIs", "\"PARIS\""), 1.0);
}

TEST(ExactMatchOptions, CaseFoldingIsAsciiOnly) {
  auto v = make();
  EXPECT_EQ(score(*v, "Straße", "\"STRAßE\""), 1.0);  // ß is not a case pair in ASCII: kept as-is
  EXPECT_EQ(score(*v, "ÉTÉ", "\"été\""), 0.0);        // non-ASCII letters compared as-is
  EXPECT_EQ(score(*v, "été", "\"été\""), 1.0);
}

TEST(ExactMatchOptions, IgnorePunctuation) {
  auto on = make({{"ignore_punctuation", "true"}});
  EXPECT_EQ(score(*on, "Paris!", "\"paris\""), 1.0);
  EXPECT_EQ(score(*on, "\"3.14\"", "\"314\""), 1.0);  // removed, not replaced by a space
  EXPECT_EQ(score(*on, "don't", "\"dont\""), 1.0);
  EXPECT_EQ(score(*on, "a_b{c}~", "\"abc\""), 1.0);   // the whole string.punctuation set
  EXPECT_EQ(score(*on, "Paris!", "\"paris?\""), 1.0); // ground truth normalized too
  auto off = make({{"ignore_punctuation", "false"}});
  EXPECT_EQ(score(*off, "Paris!", "\"paris\""), 0.0);
}

TEST(ExactMatchOptions, IgnoreArticlesAsWholeWords) {
  auto on = make({{"ignore_articles", "true"}});
  EXPECT_EQ(score(*on, "the cat", "\"cat\""), 1.0);
  EXPECT_EQ(score(*on, "An apple", "\"apple\""), 1.0);
  EXPECT_EQ(score(*on, "a cat and a dog", "\"cat and dog\""), 1.0);
  // Only whole words: "another", "theme", "banana" keep their letters.
  EXPECT_EQ(score(*on, "another theme", "\"another theme\""), 1.0);
  EXPECT_EQ(score(*on, "banana", "\"banana\""), 1.0);
  // An article becomes a separator, as in SQuAD's re.sub(..., ' ', ...).
  EXPECT_EQ(details(*on, "cat,the,dog", "\"x\"")["extracted"], "cat, ,dog");
  // Articles are recognised whatever their case, also with case_sensitive: true.
  auto cs = make({{"ignore_articles", "true"}, {"case_sensitive", "true"}});
  EXPECT_EQ(score(*cs, "The Cat", "\"Cat\""), 1.0);
  EXPECT_EQ(score(*cs, "The Cat", "\"cat\""), 0.0);
  auto off = make({{"ignore_articles", "false"}});
  EXPECT_EQ(score(*off, "the cat", "\"cat\""), 0.0);
}

TEST(ExactMatchOptions, SquadNormalizationExample) {
  auto squad = make({{"ignore_punctuation", "true"}, {"ignore_articles", "true"}});
  EXPECT_EQ(score(*squad, "The  Cat!", "\"cat\""), 1.0);
  json d = details(*squad, "The  Cat!", "\"cat\"");
  EXPECT_EQ(d["extracted"], "cat");
  EXPECT_EQ(d["matched"], "cat");
  EXPECT_EQ(score(*make(), "The  Cat!", "\"cat\""), 0.0);
}

TEST(ExactMatchOptions, NormalizationOrderMatchesSquad) {
  auto squad = make({{"ignore_punctuation", "true"}, {"ignore_articles", "true"}});
  // lower -> remove punctuation -> remove articles -> collapse whitespace.
  EXPECT_EQ(details(*squad, "The-Cat", "\"x\"")["extracted"], "thecat");  // punctuation first: no article left
  EXPECT_EQ(details(*squad, "(THE) end.", "\"x\"")["extracted"], "end");  // lowered, unwrapped, then removed
  EXPECT_EQ(details(*squad, "  A   b.c  ", "\"x\"")["extracted"], "bc");
  EXPECT_EQ(details(*squad, "the", "\"x\"")["extracted"], "");
}

TEST(ExactMatchOptions, WhitespaceCollapse) {
  auto v = make({{"whitespace", "collapse"}});
  EXPECT_EQ(score(*v, " \t a \r\n\v\f b  ", "\"a b\""), 1.0);
  EXPECT_EQ(details(*v, " \t a \r\n\v\f b  ", "\"x\"")["extracted"], "a b");
  EXPECT_EQ(score(*v, "ab", "\"a b\""), 0.0);
  // Only ASCII whitespace: U+00A0 (no-break space) is an ordinary character.
  EXPECT_EQ(score(*v, "a\xC2\xA0" "b", "\"a b\""), 0.0);
}

TEST(ExactMatchOptions, WhitespaceTrim) {
  auto v = make({{"whitespace", "trim"}});
  EXPECT_EQ(score(*v, "\n  a  b \t", "\"a  b\""), 1.0);
  EXPECT_EQ(score(*v, "a  b", "\"a b\""), 0.0);  // inner runs kept
  EXPECT_EQ(details(*v, "\n  a  b \t", "\"x\"")["extracted"], "a  b");
}

TEST(ExactMatchOptions, WhitespaceExact) {
  auto v = make({{"whitespace", "exact"}});
  EXPECT_EQ(score(*v, "a b", "\"a b\""), 1.0);
  EXPECT_EQ(score(*v, " a b", "\"a b\""), 0.0);
  EXPECT_EQ(score(*v, "a b\n", "\"a b\""), 0.0);
  EXPECT_EQ(details(*v, " a\n", "\"x\"")["extracted"], " a\n");
}

// ------------------------------------------------------------------------------ ground truth

TEST(ExactMatchGroundTruth, NumberComparesAgainstItsText) {
  auto v = make();
  EXPECT_EQ(score(*v, "42", "42"), 1.0);
  EXPECT_EQ(score(*v, " 42\n", "42"), 1.0);
  EXPECT_EQ(score(*v, "-7", "-7"), 1.0);
  EXPECT_EQ(score(*v, "0.5", "0.5"), 1.0);
  EXPECT_EQ(score(*v, "43", "42"), 0.0);
  EXPECT_EQ(score(*v, "42.0", "42"), 0.0);  // textual, not numeric, equality
  // A float keeps the spelling of the dataset.
  EXPECT_EQ(score(*v, "0.50", "0.50"), 1.0);
  EXPECT_EQ(score(*v, "0.5", "0.50"), 0.0);
  EXPECT_EQ(score(*v, "1e3", "1e3"), 1.0);
  EXPECT_EQ(score(*v, "18446744073709551615", "18446744073709551615"), 1.0);
  json d = details(*v, "42", "42");
  EXPECT_EQ(d["matched"], "42");
}

TEST(ExactMatchGroundTruth, StringNumberIsAString) {
  auto v = make();
  EXPECT_EQ(score(*v, "42", "\"42\""), 1.0);
  EXPECT_EQ(score(*v, "  spaced  ", "\"  spaced  \""), 1.0);  // ground truth normalized the same way
}

TEST(ExactMatchGroundTruth, ListMatchesAny) {
  auto v = make();
  const std::string truths = "[\"Paris\", 75, \"City of Light\"]";
  EXPECT_EQ(score(*v, "paris", truths), 1.0);
  EXPECT_EQ(score(*v, "75", truths), 1.0);
  EXPECT_EQ(score(*v, "city of  light", truths), 1.0);
  json hit = details(*v, "city of  light", truths);
  EXPECT_EQ(hit["matched"], "City of Light");  // the original ground truth, not its normalized form
  EXPECT_EQ(score(*v, "Lyon", truths), 0.0);
  json miss = details(*v, "Lyon", truths);
  EXPECT_TRUE(miss["matched"].is_null());
  EXPECT_EQ(miss["extracted"], "lyon");
  EXPECT_TRUE(contains(miss["reason"].get<std::string>(), "none of the 3"));
  EXPECT_EQ(miss["expected"], json({"paris", "75", "city of light"}));
  EXPECT_EQ(score(*v, "x", "[\"x\"]"), 1.0);
}

TEST(ExactMatchGroundTruth, InvalidGroundTruthThrows) {
  auto v = make();
  struct Case {
    std::string ground_truth;
    std::string named;  // what the message must name
  };
  const std::vector<Case> cases = {
      {"{\"answer\": \"x\"}", "an object"},
      {"null", "null"},
      {"true", "a boolean"},
      {"Paris", "invalid JSON"},
      {"\"unterminated", "invalid JSON"},
      {"\"a\" \"b\"", "invalid JSON"},
      {"[]", "an empty list"},
      {"[[\"a\"]]", "a list containing a nested list"},
      {"[\"a\", null]", "a list containing null"},
      {"[\"a\", {\"b\": 1}]", "a list containing an object"},
      {"", "empty"},
      {"   ", "empty"},
  };
  for (const Case& c : cases) {
    std::string message;
    try {
      run(*v, "x", c.ground_truth);
      ADD_FAILURE() << "no exception for ground_truth " << c.ground_truth;
      continue;
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    EXPECT_TRUE(contains(message, c.named)) << c.ground_truth << " -> " << message;
    EXPECT_TRUE(contains(message, "ground_truth")) << message;
  }
  // A raw answer gets a hint to quote it.
  std::string raw = thrown_message([&] { run(*v, "Paris", "Paris"); });
  EXPECT_TRUE(contains(raw, "\"Paris\"")) << raw;
}

TEST(ExactMatchGroundTruth, CheckedEvenWithoutAnAnswer) {
  auto v = make({{"extract", "answer_tag"}});
  EXPECT_THROW(run(*v, "no tag here", "{}"), std::invalid_argument);
}

// ------------------------------------------------------------------------------ extraction

TEST(ExactMatchExtract, FullIsTheDefault) {
  auto v = make();
  EXPECT_EQ(score(*v, "<answer>4</answer>", "\"4\""), 0.0);
  EXPECT_EQ(score(*v, "line one\n4", "\"4\""), 0.0);
  auto full = make({{"extract", "full"}});
  EXPECT_EQ(score(*full, "4", "\"4\""), 1.0);
}

TEST(ExactMatchExtract, AnswerTagLastPairWins) {
  auto v = make({{"extract", "answer_tag"}});
  EXPECT_EQ(score(*v, "<think>2+2</think><answer> 4 </answer>", "\"4\""), 1.0);
  const std::string two = "<answer>3</answer> wait, no. <answer>4</answer> done";
  EXPECT_EQ(score(*v, two, "\"4\""), 1.0);
  EXPECT_EQ(score(*v, two, "\"3\""), 0.0);
  // An unclosed trailing <answer> does not replace the last complete pair.
  EXPECT_EQ(score(*v, "<answer>4</answer> <answer>5", "\"4\""), 1.0);
  // Multi-line content, normalized like any prediction.
  EXPECT_EQ(details(*v, "<answer>\n  New\n York \n</answer>", "\"x\"")["extracted"], "new york");
  EXPECT_EQ(score(*v, "<answer></answer>", "\"\""), 1.0);
}

TEST(ExactMatchExtract, AnswerTagMissingScoresZeroWithReason) {
  auto v = make({{"extract", "answer_tag"}});
  for (const std::string completion : {"the answer is 4", "<answer>4", "4</answer>", "</answer>4<answer>", ""}) {
    VerifierResult r = run(*v, completion, "\"4\"");
    EXPECT_EQ(r.score, 0.0) << completion;
    json d = json::parse(r.details);
    EXPECT_TRUE(contains(d["reason"].get<std::string>(), "no <answer> tag")) << completion << " -> " << r.details;
    EXPECT_TRUE(d["extracted"].is_null());
    EXPECT_TRUE(d["matched"].is_null());
  }
}

TEST(ExactMatchExtract, AnswerTagIsCaseSensitive) {
  auto v = make({{"extract", "answer_tag"}});
  EXPECT_EQ(score(*v, "<ANSWER>4</ANSWER>", "\"4\""), 0.0);
}

TEST(ExactMatchExtract, LastNonEmptyLine) {
  auto v = make({{"extract", "last_line"}});
  EXPECT_EQ(score(*v, "Let me think.\nThe sum is\n42", "42"), 1.0);
  EXPECT_EQ(score(*v, "reasoning\r\n  42  \r\n\n \t\n", "42"), 1.0);  // trailing blank lines skipped
  EXPECT_EQ(score(*v, "42\nnot the answer", "42"), 0.0);
  EXPECT_EQ(score(*v, "42", "42"), 1.0);  // a single line
  EXPECT_EQ(details(*v, "a\n  Final: B  \n", "\"x\"")["extracted"], "final: b");

  auto exact = make({{"extract", "last_line"}, {"whitespace", "exact"}});
  EXPECT_EQ(details(*exact, "a\n  b \n\n", "\"x\"")["extracted"], "  b ");  // the line without its '\n'
}

TEST(ExactMatchExtract, LastLineOfBlankCompletionScoresZero) {
  auto v = make({{"extract", "last_line"}});
  for (const std::string completion : {"", "\n", " \n\t\n  "}) {
    VerifierResult r = run(*v, completion, "\"\"");
    EXPECT_EQ(r.score, 0.0);
    json d = json::parse(r.details);
    EXPECT_TRUE(d["extracted"].is_null());
    EXPECT_TRUE(contains(d["reason"].get<std::string>(), "no non-empty line")) << r.details;
  }
}

// ------------------------------------------------------------------------------ details

TEST(ExactMatchDetails, MatchAndMissShapes) {
  auto v = make();
  json hit = details(*v, "Paris", "\"paris\"");
  EXPECT_EQ(hit["extracted"], "paris");
  EXPECT_EQ(hit["matched"], "paris");
  EXPECT_FALSE(hit.contains("reason"));

  json miss = details(*v, "Lyon", "\"paris\"");
  EXPECT_EQ(miss["extracted"], "lyon");
  EXPECT_TRUE(miss.contains("matched"));
  EXPECT_TRUE(miss["matched"].is_null());
  EXPECT_EQ(miss["reason"], "prediction does not match the ground truth");
  EXPECT_EQ(miss["expected"], json({"paris"}));
}

TEST(ExactMatchDetails, InvalidUtf8CompletionStillGivesJson) {
  auto v = make();
  VerifierResult r = run(*v, std::string("caf\xC3", 4), "\"cafe\"");  // cut mid-character
  EXPECT_EQ(r.score, 0.0);
  json d = json::parse(r.details);
  EXPECT_TRUE(d["extracted"].is_string());
}

TEST(ExactMatchDetails, LongPredictionIsClippedInDetailsOnly) {
  auto v = make();
  const std::string long_answer(5000, 'x');
  VerifierResult r = run(*v, long_answer, "\"" + long_answer + "\"");
  EXPECT_EQ(r.score, 1.0);  // compared in full
  json d = json::parse(r.details);
  EXPECT_LT(d["extracted"].get<std::string>().size(), 1200u);
  EXPECT_TRUE(contains(d["extracted"].get<std::string>(), "more bytes"));
}

// ------------------------------------------------------------------------------ config errors

TEST(ExactMatchConfig, WrongOptionTypeIsConfigError) {
  ConfigValue node = options({{"case_sensitive", "maybe", true}});
  try {
    registry().create_verifier("exact_match", &node, "verifiers[0]");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "verifiers[0].case_sensitive")) << e.what();
    EXPECT_TRUE(contains(e.what(), "maybe")) << e.what();
  }
}

TEST(ExactMatchConfig, BadChoiceListsTheChoices) {
  for (const char* key : {"whitespace", "extract"}) {
    ConfigValue node = options({{key, "squash"}});
    try {
      registry().create_verifier("exact_match", &node, "verifiers[0]");
      ADD_FAILURE() << "expected ConfigError for " << key;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), std::string("verifiers[0].") + key)) << e.what();
      EXPECT_TRUE(contains(e.what(), "squash")) << e.what();
    }
  }
  ConfigValue ws = options({{"whitespace", "squash"}});
  std::string msg = thrown_message([&] { registry().create_verifier("exact_match", &ws, "verifiers[0]"); });
  EXPECT_TRUE(contains(msg, "collapse, trim, exact")) << msg;
  ConfigValue ex = options({{"extract", "squash"}});
  msg = thrown_message([&] { registry().create_verifier("exact_match", &ex, "verifiers[0]"); });
  EXPECT_TRUE(contains(msg, "full, answer_tag, last_line")) << msg;
}

TEST(ExactMatchConfig, UnknownOptionIsRejected) {
  ConfigValue node = options({{"case_sensitiv", "true"}});
  std::string msg;
  try {
    registry().create_verifier("exact_match", &node, "verifiers[0]");
  } catch (const ConfigError& e) {
    msg = e.what();
  } catch (const grpo::core::PluginError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "an unknown option was accepted";
  EXPECT_TRUE(contains(msg, "case_sensitiv")) << msg;
}

TEST(ExactMatchConfig, AllOptionsTogetherAreAccepted) {
  auto v = make({{"case_sensitive", "false"},
                 {"whitespace", "collapse"},
                 {"ignore_punctuation", "true"},
                 {"ignore_articles", "true"},
                 {"extract", "answer_tag"}});
  EXPECT_EQ(score(*v, "<answer>The Eiffel-Tower.</answer>", "[\"eiffeltower\"]"), 1.0);
}

// ------------------------------------------------------------------------------ threads

TEST(ExactMatchThreads, ConcurrentVerifyIsConsistent) {
  auto v = make({{"ignore_punctuation", "true"}, {"ignore_articles", "true"}, {"extract", "answer_tag"}});
  struct Sample {
    std::string completion;
    std::string ground_truth;
    double expected;
  };
  const std::vector<Sample> samples = {
      {"<answer>The Cat!</answer>", "\"cat\"", 1.0},
      {"<answer>dog</answer>", "\"cat\"", 0.0},
      {"no tag", "\"cat\"", 0.0},
      {"<answer>1</answer><answer> 42 </answer>", "42", 1.0},
      {"<answer>x</answer>", "[\"y\", \"X\"]", 1.0},
      {"<answer>an apple</answer>", "\"Apple.\"", 1.0},
  };
  constexpr int kThreads = 8;
  constexpr int kIterations = 2000;
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const Sample& s = samples[static_cast<size_t>(i + t) % samples.size()];
        try {
          VerifierResult r = run(*v, s.completion, s.ground_truth);
          if (r.score != s.expected || !json::accept(r.details)) ++wrong;
        } catch (...) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
