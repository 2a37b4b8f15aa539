// The demo models' byte-level tokenizer (hand-derived ids: GPT-2 bytes_to_unicode order puts
// bytes 33..126 at ids 0..93, 161..172 at 94..105, 174..255 at 106..187, then bytes 0..32 at
// 188..220, 127..160 at 221..254, 173 at 255), the checkpoint tokenizer files and the loader.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "tests/support/error_of.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {
namespace {

using grpo::core::Tokenizer;
using grpo::core::TokenizerError;

Tokenizer demo(const std::vector<std::pair<std::string, std::string>>& merges = {}) {
  return Tokenizer::from_json(
      grpo::core::make_byte_level_tokenizer_json(grpo::core::default_demo_special_tokens(), merges), "demo.json");
}

TEST(DemoTokenizer, BytesInGpt2Order) {
  Tokenizer t = demo();
  EXPECT_EQ(t.vocab_size(), 259);
  EXPECT_EQ(t.encode("hi"), (std::vector<int>{'h' - 33, 'i' - 33}));
  EXPECT_EQ(t.encode("a b"), (std::vector<int>{'a' - 33, 188 + 32, 'b' - 33}));  // ' ' is byte 32 -> 220 ("Ġ")
  EXPECT_EQ(t.encode(std::string("\0", 1)), std::vector<int>{188});
  EXPECT_EQ(t.encode("\x7F"), std::vector<int>{221});
  EXPECT_EQ(t.encode("\xC2\xAD"), (std::vector<int>{106 + (0xC2 - 174), 255}));  // U+00AD: bytes C2 AD
  EXPECT_EQ(t.id_to_token(220), "\xC4\xA0");                                      // "Ġ"
  EXPECT_EQ(t.id_to_token(0), "!");
  EXPECT_EQ(*t.token_to_id("\xC4\x8A"), 198);  // "Ċ" = '\n'
}

TEST(DemoTokenizer, SpecialTokensMatchedBeforePreTokenization) {
  Tokenizer t = demo();
  EXPECT_EQ(*t.token_to_id("<|endoftext|>"), 256);
  EXPECT_EQ(*t.token_to_id("<|im_start|>"), 257);
  EXPECT_EQ(*t.token_to_id("<|im_end|>"), 258);
  EXPECT_EQ(t.encode("<|im_start|>x<|im_end|>"), (std::vector<int>{257, 'x' - 33, 258}));
  EXPECT_EQ(t.encode("<|im_start|"), t.encode(std::string("<|im_start") + "|"));  // partial: plain bytes
  EXPECT_EQ(t.encode("<|im_start|").size(), 11u);
  EXPECT_EQ(t.decode({257, 'x' - 33, 258}), "<|im_start|>x<|im_end|>");
  EXPECT_EQ(t.decode({257, 'x' - 33, 258}, grpo::core::DecodeOptions{true}), "x");
}

TEST(DemoTokenizer, RoundTripsArbitraryUtf8) {
  Tokenizer t = demo();
  for (const std::string& s : {std::string("Hello, world!\n\tcode();"), std::string("\xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80"),
                               std::string("caf\xC3\xA9 <|endoftext|> 12345"), std::string(100, ' ')})
    EXPECT_EQ(t.decode(t.encode(s)), s);
}

TEST(DemoTokenizer, MergesApplyInRankOrder) {
  Tokenizer t = demo({{"t", "h"}, {"th", "e"}, {"h", "e"}});
  // ids after the 3 specials: "th" = 259, "the" = 260, "he" = 261
  EXPECT_EQ(t.encode("the"), std::vector<int>{260});
  EXPECT_EQ(t.encode("he"), std::vector<int>{261});
  EXPECT_EQ(t.encode("them"), (std::vector<int>{260, 'm' - 33}));
  EXPECT_EQ(t.decode({260, 261}), "thehe");
}

TEST(DemoTokenizer, DecodeOfPartialUtf8IsReplacedLikeHuggingFace) {
  Tokenizer t = demo();
  std::vector<int> ids = t.encode("\xE6\x9D\xB1");  // one CJK char = 3 byte tokens
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t.decode({ids[0], ids[1]}), "\xEF\xBF\xBD");  // one maximal subpart -> one U+FFFD
  EXPECT_EQ(t.decode_bytes({ids[0], ids[1]}), "\xE6\x9D");
  EXPECT_THROW(t.decode({100000}), TokenizerError);
}

TEST(DemoTokenizer, FollowsTheHuggingFaceSchema) {
  auto j = nlohmann::json::parse(grpo::core::make_byte_level_tokenizer_json());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["ignore_merges"], false);
  EXPECT_EQ(j["model"]["byte_fallback"], false);
  EXPECT_TRUE(j["model"]["merges"].is_array());
  EXPECT_EQ(j["model"]["vocab"].size(), 256u);
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  for (const char* k : {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"})
    EXPECT_TRUE(j["added_tokens"][0].contains(k)) << k;
}

// The demo tokenizer as JSON, edited by `edit`, loaded.
Tokenizer demo_edited(const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(grpo::core::make_byte_level_tokenizer_json());
  edit(j);
  return Tokenizer::from_json(j.dump(), "edited.json");
}

TEST(DemoTokenizer, MaxBytesPerTokenBoundsWhatOneTokenStandsFor) {
  // The longest token is the special "<|endoftext|>", 13 bytes; the demo's NFC normalizer can
  // shrink text, which the bound allows for with a factor of 8.
  EXPECT_EQ(demo().max_bytes_per_token(), 8u * 13u);
  EXPECT_EQ(demo_edited([](nlohmann::json& j) { j["normalizer"] = nullptr; }).max_bytes_per_token(), 13u);
  // A merge "the" is 3 bytes: still 13.
  EXPECT_EQ(demo({{"t", "h"}, {"th", "e"}}).max_bytes_per_token(), 8u * 13u);
  // Tokenizers that can drop text have no bound.
  EXPECT_EQ(demo_edited([](nlohmann::json& j) { j["added_tokens"][1]["lstrip"] = true; }).max_bytes_per_token(), 0u);
  EXPECT_EQ(demo_edited([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; })
                .max_bytes_per_token(),
            0u);
  EXPECT_EQ(demo_edited([](nlohmann::json& j) { j["model"]["vocab"].erase("!"); }).max_bytes_per_token(), 0u);
}

TEST(DemoTokenizer, EncodeWithinRejectsLongTextsAndKeepsTheIdsOfShortOnes) {
  Tokenizer t = demo();
  for (const std::string& s : {std::string("482"), std::string("<|im_start|>user\nhi<|im_end|>"), std::string(40, 'x')}) {
    const auto ids = grpo::core::encode_within(t, s, 40);
    ASSERT_TRUE(ids.has_value()) << s;
    EXPECT_EQ(*ids, t.encode(s)) << s;
  }
  // 41 byte tokens: one over, found by tokenizing (41 bytes is under 40 x 104).
  EXPECT_FALSE(grpo::core::encode_within(t, std::string(41, 'x'), 40).has_value());
  // Over 40 x 104 bytes: more than 40 tokens for certain, rejected without tokenizing. Invalid
  // UTF-8 is tokenized all the same, for encode()'s error.
  EXPECT_FALSE(grpo::core::encode_within(t, std::string(40 * 104 + 104, 'x'), 40).has_value());
  EXPECT_THROW(grpo::core::encode_within(t, std::string(40 * 104 + 104, 'x') + "\xFF", 40), TokenizerError);
  EXPECT_EQ(grpo::core::encode_within(t, "", 0), std::vector<int>{});
}

TEST(TokenizerFiles, WritesAndReloadsACheckpointFolder) {
  std::string dir = tmp_dir() + "/checkpoint-files";
  std::filesystem::remove_all(dir);
  Tokenizer t = demo({{"a", "b"}});
  grpo::core::TokenizerFilesOptions o;
  o.chat_templates = std::vector<grpo::core::NamedChatTemplate>{{"default", grpo::core::chat_template_jinja("chatml")}};
  o.eos_token = "<|im_end|>";
  o.pad_token = "<|endoftext|>";
  grpo::core::write_tokenizer_files(dir, t, o);
  auto cfg = nlohmann::json::parse(grpo::core::read_file(dir + "/tokenizer_config.json"));
  EXPECT_EQ(cfg["chat_template"], grpo::core::chat_template_jinja("chatml"));
  EXPECT_EQ(cfg["eos_token"], "<|im_end|>");
  EXPECT_EQ(cfg["pad_token"], "<|endoftext|>");
  EXPECT_TRUE(cfg["bos_token"].is_null());
  EXPECT_EQ(cfg["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(cfg["added_tokens_decoder"]["257"]["content"], "<|im_start|>");
  EXPECT_EQ(cfg["added_tokens_decoder"]["257"]["special"], true);
  EXPECT_EQ(cfg["model_max_length"], 131072);

  for (const std::string& where : {dir, dir + "/tokenizer.json"}) {
    Tokenizer back = Tokenizer::load(where);
    EXPECT_EQ(back.eos_id(), std::optional<int>(258)) << where;
    EXPECT_EQ(back.pad_id(), std::optional<int>(256));
    EXPECT_FALSE(back.bos_id().has_value());
    EXPECT_EQ(back.chat_template_source(), std::optional<std::string>(grpo::core::chat_template_jinja("chatml")));
    EXPECT_EQ(back.encode("ab<|im_end|>"), (std::vector<int>{259, 258}));
    EXPECT_EQ(back.vocab_size(), 260);
  }
  grpo::core::TokenizerFilesOptions bad;
  bad.eos_token = "<|eot_id|>";
  std::string msg = error_of<TokenizerError>([&] { grpo::core::write_tokenizer_files(dir, t, bad); });
  EXPECT_NE(msg.find("eos_token: '<|eot_id|>' is not a token"), std::string::npos) << msg;
  // Unset chat_templates: the tokenizer's own (the reloaded one has chatml), in the list form
  // transformers writes when there are several.
  Tokenizer back = Tokenizer::load(dir);
  grpo::core::TokenizerFilesOptions own;
  grpo::core::write_tokenizer_files(dir + "-own", back, own);
  EXPECT_EQ(nlohmann::json::parse(grpo::core::read_file(dir + "-own/tokenizer_config.json"))["chat_template"],
            grpo::core::chat_template_jinja("chatml"));
  own.chat_templates = std::vector<grpo::core::NamedChatTemplate>{{"default", "A"}, {"tool_use", "B"}};
  grpo::core::write_tokenizer_files(dir + "-own", back, own);
  EXPECT_EQ(nlohmann::json::parse(grpo::core::read_file(dir + "-own/tokenizer_config.json"))["chat_template"],
            nlohmann::json::parse(R"([{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}])"));
  EXPECT_EQ(Tokenizer::load(dir + "-own").chat_templates().size(), 2u);
  own.chat_templates = std::vector<grpo::core::NamedChatTemplate>{};
  grpo::core::write_tokenizer_files(dir + "-own", back, own);
  EXPECT_FALSE(nlohmann::json::parse(grpo::core::read_file(dir + "-own/tokenizer_config.json")).contains("chat_template"));
}

TEST(TokenizerFiles, LoaderErrorsNameThePath) {
  std::string msg = error_of<TokenizerError>([] { Tokenizer::load("/nonexistent/tok"); });
  EXPECT_NE(msg.find("/nonexistent/tok: no such file or folder"), std::string::npos) << msg;
  std::string empty = tmp_dir() + "/empty-folder";
  std::filesystem::create_directories(empty);
  msg = error_of<TokenizerError>([&] { Tokenizer::load(empty); });
  EXPECT_NE(msg.find("no tokenizer.json in this folder"), std::string::npos) << msg;
}

// BPE training by hand on "low lower lowest": words "low", " lower", " lowest" once each.
// Pair counts: (l,o) 3, (o,w) 3, ( ,l) 2, (w,e) 2, (e,r) (e,s) (s,t) 1. Merge the most frequent,
// the smaller pair of a tie: (l,o); then (lo,w) 3; then ( ,low) 2 (space sorts before 'l') over
// (low,e) 2; then ( low,e) 2; then every pair occurs once: stop.
TEST(TokenizerFiles, BpeMergesByHand) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"l", "o"}, {"lo", "w"}, {" ", "low"}, {" low", "e"}};
  EXPECT_EQ(grpo::core::train_bpe_merges({"low lower lowest"}, 100), expected);
  EXPECT_EQ(grpo::core::train_bpe_merges({"low lower lowest"}, 2),
            (std::vector<std::pair<std::string, std::string>>{{"l", "o"}, {"lo", "w"}}));
  // Digits and punctuation are never merged; the merges make a tokenizer that encodes words
  // as one token and round-trips any text.
  const auto merges = grpo::core::train_bpe_merges({"11 22. 11 22. a pens pens"}, 100);
  for (const auto& [a, b] : merges) EXPECT_EQ((a + b).find_first_of("0123456789."), std::string::npos) << a << b;
  const Tokenizer t = Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json(grpo::core::default_demo_special_tokens(), merges));
  EXPECT_EQ(t.encode(" pens").size(), 1u);
  EXPECT_EQ(t.decode(t.encode("11 pens, 22 pens!")), "11 pens, 22 pens!");
}

}  // namespace
}  // namespace grpo::testing
