// IFEvalG ids of the ifeval verifier (open-instruct open_instruct/IFEvalG/instructions.py), each
// with a following and a violating response whose verdict is derived by hand from the
// reference's check_following (quoted in the comment) and was confirmed by running the
// reference checker, plus bad kwargs -> 0 with a reason.
// Complements IfevalG.EveryIdMatchesOpenInstructsReferenceOnHandWrittenCases (fixture-driven).
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"

namespace {

using grpo::sdk::Verifier;
using grpo::sdk::VerifierResult;
using json = nlohmann::json;

const Verifier& ifeval() {
  static const std::shared_ptr<Verifier> v =
      grpo::testing::create_component<Verifier>("ifeval", {}, "verifiers[0]");
  return *v;
}

VerifierResult check(const std::string& id, const json& kwargs, const std::string& response) {
  return grpo::testing::verify_once(ifeval(), response, {{"instruction_id", {id}}, {"kwargs", {kwargs}}},
                                    "ifeval");
}

double score(const std::string& id, const json& kwargs, const std::string& response) {
  return check(id, kwargs, response).score;
}

TEST(IfevalGPunctuation, DotAndExclamation) {
  // not re.search(r"\.", value) / not re.search(r"\!", value)
  EXPECT_EQ(score("punctuation:punctuation_dot", json::object(), "No dots here, only commas!"), 1.0);
  EXPECT_EQ(score("punctuation:punctuation_dot", json::object(), "One dot."), 0.0);
  EXPECT_EQ(score("punctuation:punctuation_exclamation", json::object(), "Calm. Quiet."), 1.0);
  EXPECT_EQ(score("punctuation:punctuation_exclamation", json::object(), "Wow!"), 0.0);
}

TEST(IfevalGFormat, SquareBracketsAndBigramWrapping) {
  // every value.split() word starts with "[" and ends with "]"
  EXPECT_EQ(score("detectable_format:square_brackets", json::object(), "[a] [b]\n[c.]"), 1.0);
  EXPECT_EQ(score("detectable_format:square_brackets", json::object(), "[a] b"), 0.0);
  // pairs (0,1),(2,3),...: words[i] starts with "<<" and words[i+1] ends with ">>"; an odd last
  // word is not checked
  EXPECT_EQ(score("detectable_format:bigram_wrapping", json::object(), "<<a b>> <<c d>> e"), 1.0);
  EXPECT_EQ(score("detectable_format:bigram_wrapping", json::object(), "<<a b> <<c d>>"), 0.0);
}

TEST(IfevalGParagraphs, TwoBlankLineSeparatedParagraphs) {
  // re.split(r"\n\n"): empty first/last pieces do not count, an empty middle piece fails; == 2
  EXPECT_EQ(score("paragraphs:paragraphs2", json::object(), "First.\n\nSecond.\n\n"), 1.0);
  EXPECT_EQ(score("paragraphs:paragraphs2", json::object(), "First.\n\n\n\nSecond."), 0.0);
  EXPECT_EQ(score("paragraphs:paragraphs2", json::object(), "Only one."), 0.0);
}

TEST(IfevalGFirstLastWord, AnswerLevel) {
  // first: value.split()[0].lower() == first_word.lower() (punctuation kept)
  EXPECT_EQ(score("first_word:first_word_answer", {{"first_word", "Hello"}}, "  hello world"), 1.0);
  EXPECT_EQ(score("first_word:first_word_answer", {{"first_word", "Hello"}}, "Hello, world"), 0.0);
  // last: re.sub(r"[^\w\s]", "", value.split()[-1]).lower() == last_word.lower()
  EXPECT_EQ(score("last_word:last_word_answer", {{"last_word", "end"}}, "This is the END."), 1.0);
  EXPECT_EQ(score("last_word:last_word_answer", {{"last_word", "end"}}, "The end is near"), 0.0);
  // empty response: the reference raises IndexError on value.split()[-1]; here a 0
  EXPECT_EQ(score("last_word:last_word_answer", {{"last_word", "end"}}, ""), 0.0);
}

TEST(IfevalGCount, UniqueStartEndLowercase) {
  // count_unique: nltk.word_tokenize tokens all distinct (case-sensitive: "The" != "the")
  EXPECT_EQ(score("count:count_unique", json::object(), "The cat saw the dog."), 1.0);
  EXPECT_EQ(score("count:count_unique", json::object(), "a cat and a dog"), 0.0);
  // start_end: >= 2 word_tokenize tokens, first.lower() == last.lower() ("." is the last token)
  EXPECT_EQ(score("keywords:start_end", json::object(), "Hello there, I said hello"), 1.0);
  EXPECT_EQ(score("keywords:start_end", json::object(), "Hello there, I said hello."), 0.0);
  // lowercase_counting: len(re.findall(r"\b[a-z]+\b")) <= N
  EXPECT_EQ(score("count:lowercase_counting", {{"N", 2}}, "One two Three"), 1.0);
  EXPECT_EQ(score("count:lowercase_counting", {{"N", 2}}, "one two three"), 0.0);
}

TEST(IfevalGKeywords, NoAdjacentConsecutiveFirstLetters) {
  // adjacent value.split() words whose first letters (lowercased) differ by +1 fail: "a"->"b"
  EXPECT_EQ(score("keywords:no_adjacent_consecutive", json::object(), "zebra apple cat"), 1.0);
  EXPECT_EQ(score("keywords:no_adjacent_consecutive", json::object(), "apple Banana"), 0.0);
}

TEST(IfevalGKeywords, ReferenceQuirksKept) {
  // palindrome: a whitespace word == its reverse; one-letter words count ("I", "a")
  EXPECT_EQ(score("keywords:palindrome", json::object(), "I saw a cat"), 1.0);
  EXPECT_EQ(score("keywords:palindrome", json::object(), "hello world"), 0.0);
  // exclude_word_harder: " " + keyword + " " not in value (case-sensitive substring)
  const json cat = {{"keyword", "cat"}, {"instruction", "x"}};
  EXPECT_EQ(score("keywords:exclude_word_harder", cat, "The Cat sat"), 1.0);
  EXPECT_EQ(score("keywords:exclude_word_harder", cat, "the cat sat"), 0.0);
  // word_once: len(re.findall(keyword, re.I)) == 1, no word boundaries
  EXPECT_EQ(score("keywords:word_once", {{"keyword", "cat"}}, "concatenate"), 1.0);
  EXPECT_EQ(score("keywords:word_once", {{"keyword", "cat"}}, "cat cat"), 0.0);
  // count_increment_word: keyword1 found once, keyword2 twice
  const json kw = {{"keyword1", "one"}, {"keyword2", "two"}};
  EXPECT_EQ(score("count:count_increment_word", kw, "one two two"), 1.0);
  EXPECT_EQ(score("count:count_increment_word", kw, "one two"), 0.0);
  // letter_counting: len(re.findall(r"[a-zA-Z]")) < N for "less than"
  const json lt = {{"N", 5}, {"relation", "less than"}};
  EXPECT_EQ(score("letters:letter_counting", lt, "abcd 123"), 1.0);
  EXPECT_EQ(score("letters:letter_counting", lt, "abcde"), 0.0);
  // copying_multiple: split("******") gives N pieces, each strip().lower() == prompt's
  const json two = {{"prompt_to_repeat", "Hi"}, {"N", 2}};
  EXPECT_EQ(score("copy:copying_multiple", two, "hi ****** HI"), 1.0);
  EXPECT_EQ(score("copy:copying_multiple", two, "hi"), 0.0);
}

TEST(IfevalGBadKwargs, MissingRequiredKwargScoresZeroWithReason) {
  // The reference would draw a random value when a kwarg is None; a verifier cannot, so 0 + reason.
  for (const char* id : {"first_word:first_word_answer", "last_word:last_word_answer", "count:lowercase_counting"}) {
    const VerifierResult r = check(id, json::object(), "anything at all");
    EXPECT_EQ(r.score, 0.0) << id;
    EXPECT_NE(r.details.find("reason"), std::string::npos) << id << ": " << r.details;
  }
}

}  // namespace
