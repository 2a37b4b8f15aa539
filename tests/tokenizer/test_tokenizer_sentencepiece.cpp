// SentencePiece-style BPE in tokenizer.json (Llama-2, Mistral, Gemma): BPE over characters,
// byte_fallback to <0xXX> tokens, unk and fuse_unk, the Prepend/Replace normalizers, the
// Metaspace pre-tokenizer (prepend_scheme, split) and the Replace/ByteFallback/Fuse/Strip/
// Metaspace decoders. Expected ids are worked out by hand on a tiny vocabulary written here
// (merge by merge, as the Rust crate applies them); the parity with Hugging Face's reference on
// real files is in test_tokenizer_parity.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"
#include "tests/support/error_of.h"

namespace grpo::testing {
namespace {

using grpo::core::DecodeOptions;
using grpo::core::Tokenizer;
using grpo::core::TokenizerError;
using json = nlohmann::json;
using Ids = std::vector<int>;

const char* const kMeta = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

std::string m(const std::string& s) {  // "_" -> U+2581, for readable vocabularies
  std::string out;
  for (char ch : s) {
    if (ch == '_')
      out += kMeta;
    else
      out += ch;
  }
  return out;
}

// The tiny vocabulary. Ids:
//   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>  6 ▁  7 a  8 b  9 c  10 e  11 h  12 l
//   13 o  14 he  15 ll  16 ▁he  17 llo  18 ▁hello  19 ab  20 o▁  21 ▁▁
// Merges, by rank: h e, l l, ▁ he, ll o, ▁he llo, a b. (split_merge puts "o ▁" first.)
// Byte tokens exist for 0x0A, 0xC3 and 0xA9 only: "é" (C3 A9) falls back to bytes, "ü" (C3 BC)
// and "😀" cannot and become unk.
json tiny(bool split_merge = false) {
  json vocab = json::object();
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "<0xA9>", m("_"),
                                           "a",     "b",   "c",    "e",      "h",      "l",      "o",
                                           "he",    "ll",  m("_he"), "llo",  m("_hello"), "ab", m("o_"), m("__")};
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int>(i);
  json merges = json::array();
  if (split_merge) merges.push_back(json::array({"o", m("_")}));
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"h", "e"}, {"l", "l"}, {m("_"), "he"}, {"ll", "o"}, {m("_he"), "llo"}, {"a", "b"}})
    merges.push_back(json::array({a, b}));
  json added = json::array();
  for (int id = 0; id < 3; ++id)
    added.push_back({{"id", id}, {"content", tokens[static_cast<std::size_t>(id)]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
  json j;
  j["version"] = "1.0";
  j["added_tokens"] = added;
  // Llama-2 / Mistral-v1 shape.
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", true},   {"byte_fallback", true}, {"vocab", vocab},
                {"merges", merges}};
  return j;
}

json metaspace(const std::string& scheme, bool split) {
  return {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", split}};
}

// The newer Mistral/Llama shape: no normalizer, a Metaspace pre-tokenizer and decoder.
json metaspace_style(const std::string& scheme, bool split = true, bool split_merge = false) {
  json j = tiny(split_merge);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = metaspace(scheme, split);
  j["decoder"] = metaspace(scheme, split);
  return j;
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j.dump(), "sp/tokenizer.json"); }

std::string load_error(const json& j) {
  return error_of<TokenizerError>([&] { Tokenizer::from_json(j.dump(), "sp/tokenizer.json"); });
}

void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

TEST(SentencePieceBpe, MergesRunOverCharactersAfterPrependAndReplace) {
  Tokenizer t = load(tiny());
  // "▁hello": ▁ h e l l o -> he -> ll -> ▁he -> llo -> ▁hello.
  EXPECT_EQ(t.encode("hello"), Ids{18});
  EXPECT_EQ(t.decode({18}), "hello");  // " hello", Strip removes one leading space
  // "▁hello▁abc": ▁hello ▁ ab c (no merge builds "▁a").
  EXPECT_EQ(t.encode("hello abc"), (Ids{18, 6, 19, 9}));
  EXPECT_EQ(t.decode({18, 6, 19, 9}), "hello abc");
  // A leading space is kept: "▁▁hello" -> ▁ ▁hello; the decoder strips only one space.
  EXPECT_EQ(t.encode(" hello"), (Ids{6, 18}));
  EXPECT_EQ(t.decode({6, 18}), " hello");
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.id_to_token(18), m("_hello"));
}

TEST(SentencePieceBpe, ByteFallbackAndDecoding) {
  Tokenizer t = load(tiny());
  // "é" is not in the vocabulary: its UTF-8 bytes C3 A9 become <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{6, 4, 5}));
  EXPECT_EQ(t.decode({6, 4, 5}), "\xC3\xA9");
  EXPECT_EQ(t.encode("a\n"), (Ids{6, 7, 3}));
  EXPECT_EQ(t.decode({6, 7, 3}), "a\n");
  // A run of byte tokens that is not UTF-8: one U+FFFD per byte (the Rust crate's ByteFallback);
  // decode_bytes keeps the bytes.
  EXPECT_EQ(t.decode({4, 5, 4}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t.decode_bytes({4, 5, 4}), "\xC3\xA9\xC3");
  EXPECT_EQ(t.decode_bytes({6, 4}), "\xC3");  // Strip saw the space in front
  EXPECT_EQ(t.decode({7, 4, 7}), "a\xEF\xBF\xBD" "a");
  EXPECT_THROW(t.decode({7, 22}), TokenizerError);  // no id 22
  EXPECT_THROW(t.decode_bytes({-1}), TokenizerError);
}

TEST(SentencePieceBpe, UnkAndFuseUnk) {
  json j = tiny();
  // "ü" (C3 BC): <0xBC> is missing, so no byte fallback: unk. "😀" too. fuse_unk makes one unk of
  // the run.
  Tokenizer fused = load(j);
  EXPECT_EQ(fused.encode("\xC3\xBC\xC3\xBC\xF0\x9F\x98\x80" "a"), (Ids{6, 0, 7}));
  EXPECT_EQ(fused.decode({6, 0, 7}), "<unk>a");
  j["model"]["fuse_unk"] = false;
  Tokenizer separate = load(j);
  EXPECT_EQ(separate.encode("\xC3\xBC\xC3\xBC\xF0\x9F\x98\x80" "a"), (Ids{6, 0, 0, 0, 7}));
  // As in the Rust crate, a pending unk waits for the next vocabulary character: byte-fallback
  // tokens of a character in between come first.
  EXPECT_EQ(fused.encode("\xC3\xBC\xC3\xA9" "a"), (Ids{6, 4, 5, 0, 7}));
  // Without an unk token the character is dropped (and "a" and "b" meet and merge).
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(j).encode("a\xC3\xBC" "c"), (Ids{6, 7, 9}));
  EXPECT_EQ(load(j).encode("a\xC3\xBC" "b"), (Ids{6, 19}));
  // Without byte_fallback, "é" is unk too.
  j = tiny();
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(j).encode("\xC3\xA9"), (Ids{6, 0}));
}

TEST(SentencePieceBpe, AddedTokensSplitFirstAndGoThroughTheDecoder) {
  Tokenizer t = load(tiny());
  // "<s>" is matched on the raw text; the normalizer (Prepend) runs on each remaining segment.
  EXPECT_EQ(t.encode("<s>hello</s>"), (Ids{1, 18, 2}));
  EXPECT_EQ(t.decode({1, 18, 2}), "<s> hello</s>");
  EXPECT_EQ(t.decode({1, 18, 2}, DecodeOptions{true}), "hello");
  // Text that only looks like a byte token is plain text: "<", "0", "x", "A", ">" are not in the
  // vocabulary and have no byte tokens, so "▁<0x0A>" is ▁ and one fused unk.
  EXPECT_EQ(t.encode("<0x0A>"), (Ids{6, 0}));
}

TEST(SentencePieceBpe, MetaspacePrependScheme) {
  // first: only a piece at the start of the input gets the ▁; a segment after an added token
  // does not.
  Tokenizer first = load(metaspace_style("first"));
  EXPECT_EQ(first.encode("hello hello"), (Ids{18, 18}));
  EXPECT_EQ(first.encode("<s>hello"), (Ids{1, 14, 17}));  // "hello": he llo
  EXPECT_EQ(first.encode(" hello"), (Ids{18}));           // already starts with ▁
  // always: every segment.
  Tokenizer always = load(metaspace_style("always"));
  EXPECT_EQ(always.encode("<s>hello"), (Ids{1, 18}));
  EXPECT_EQ(always.encode("hello"), (Ids{18}));
  // never: none.
  Tokenizer never = load(metaspace_style("never"));
  EXPECT_EQ(never.encode("hello"), (Ids{14, 17}));
  EXPECT_EQ(never.encode(" hello"), (Ids{18}));
  // The Metaspace decoder: every ▁ is a space, but the first token's leading one is dropped
  // unless prepend_scheme is never.
  EXPECT_EQ(always.decode({18, 18}), "hello hello");
  EXPECT_EQ(first.decode({18, 18}), "hello hello");
  EXPECT_EQ(never.decode({18, 18}), " hello hello");
  EXPECT_EQ(never.decode({14, 17}), "hello");
  EXPECT_EQ(always.decode({1, 18}), "<s> hello");  // the first token is "<s>"
  // Only the leading ▁ of the first token goes (the JavaScript port's rule; the Rust crate drops
  // every ▁ of the first token, a known bug).
  EXPECT_EQ(always.decode({21, 18}), "  hello");
  EXPECT_EQ(always.decode({20, 14, 17}), "o hello");
}

TEST(SentencePieceBpe, MetaspaceSplit) {
  // With "o ▁" as the first merge, the BPE of the unsplit "▁hello▁hello" merges across the ▁:
  // o▁ first, then he he ll ll ▁he llo -> ▁he ll o▁ he llo. Split at each ▁ (MergedWithNext),
  // each "▁hello" becomes one token.
  Tokenizer split = load(metaspace_style("always", true, true));
  Tokenizer whole = load(metaspace_style("always", false, true));
  EXPECT_EQ(split.encode("hello hello"), (Ids{18, 18}));
  EXPECT_EQ(whole.encode("hello hello"), (Ids{16, 15, 20, 14, 17}));
  EXPECT_EQ(whole.decode({16, 15, 20, 14, 17}), "hello hello");
  // Runs of spaces: "▁hello▁▁hello" splits into ▁hello ▁ ▁hello.
  EXPECT_EQ(split.encode("hello  hello"), (Ids{18, 6, 18}));
  EXPECT_EQ(split.decode({18, 6, 18}), "hello  hello");
}

TEST(SentencePieceBpe, GemmaShapeHasNoPrefix) {
  // Gemma: Replace(" ", "▁") only, no Prepend; decoder Replace + ByteFallback + Fuse.
  json j = tiny();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}};
  j["decoder"]["decoders"].erase(3);
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("hello"), (Ids{14, 17}));
  EXPECT_EQ(t.encode(" hello"), (Ids{18}));
  EXPECT_EQ(t.decode({18}), " hello");
}

TEST(SentencePieceBpe, ReplaceWithARegexAndStripBothEnds) {
  json j = tiny();
  j["model"]["fuse_unk"] = false;
  // Runs of spaces become one ▁; the decoder strips up to two leading and one trailing "a".
  j["normalizer"]["normalizers"][1] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", kMeta}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", "a"}, {"start", 2}, {"stop", 1}}})}};
  Tokenizer t = load(j);
  EXPECT_EQ(t.encode("hello    abc"), (Ids{18, 6, 19, 9}));
  EXPECT_EQ(t.decode({7, 7, 7, 8, 7, 7}), "aba");
  EXPECT_EQ(t.decode({7}), "");  // stripped from both ends
  EXPECT_EQ(t.decode({8}), "b");
  EXPECT_EQ(t.max_bytes_per_token(), 0u);  // a regex Replace can shrink the text without bound
}

TEST(SentencePieceBpe, MaxBytesPerToken) {
  json j = tiny();
  // fuse_unk with characters that may have neither a vocabulary entry nor all their byte tokens:
  // one unk can stand for any length.
  EXPECT_EQ(load(j).max_bytes_per_token(), 0u);
  j["model"]["fuse_unk"] = false;
  // The longest token string is "▁hello" (8 bytes); Replace(" " -> "▁") only grows the text.
  EXPECT_EQ(load(j).max_bytes_per_token(), 8u);
  // All 256 byte tokens: no unk can occur, fuse_unk or not.
  j["model"]["fuse_unk"] = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (!j["model"]["vocab"].contains(name)) j["model"]["vocab"][name] = 100 + b;
  }
  EXPECT_EQ(load(j).max_bytes_per_token(), 8u);
  // A literal Replace that shrinks "xyz" to "w": 3x.
  j["normalizer"]["normalizers"].push_back({{"type", "Replace"}, {"pattern", {{"String", "xyz"}}}, {"content", "w"}});
  EXPECT_EQ(load(j).max_bytes_per_token(), 24u);
  // No unk token and no complete byte fallback: a character can vanish.
  j = tiny();
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(j).max_bytes_per_token(), 0u);
}

TEST(SentencePieceBpe, CacheGivesTheSameIds) {
  // "hello hello " is at the start ("▁hello▁hello▁": ▁hello ▁hello ▁), "hello" after <s> is not.
  Tokenizer t = load(metaspace_style("first"));
  EXPECT_EQ(t.encode("hello hello <s>hello"), (Ids{18, 18, 6, 1, 14, 17}));
  EXPECT_EQ(t.encode("hello hello <s>hello"), (Ids{18, 18, 6, 1, 14, 17}));  // from the cache
  t.set_cache_enabled(false);
  EXPECT_EQ(t.encode("hello hello <s>hello"), (Ids{18, 18, 6, 1, 14, 17}));
}

TEST(SentencePieceErrors, BadOptionsNameTheKey) {
  json j = metaspace_style("first");
  j["pre_tokenizer"]["prepend_scheme"] = "frist";
  expect_contains(load_error(j), "sp/tokenizer.json: pre_tokenizer.prepend_scheme: unknown prepend_scheme 'frist' (did you mean 'first'?)");
  j = metaspace_style("first");
  j["pre_tokenizer"]["replacement"] = "__";
  expect_contains(load_error(j), "pre_tokenizer.replacement: expected one character, got '__'");
  j = metaspace_style("first");
  j["pre_tokenizer"].erase("replacement");
  expect_contains(load_error(j), "pre_tokenizer.replacement: missing");
  j = metaspace_style("always");
  j["pre_tokenizer"]["add_prefix_space"] = false;
  expect_contains(load_error(j), "pre_tokenizer.add_prefix_space: add_prefix_space: false does not match prepend_scheme 'always'");
  j = metaspace_style("never");
  j["pre_tokenizer"]["add_prefix_space"] = false;  // consistent
  EXPECT_NO_THROW(load(j));
  j = metaspace_style("first");
  j["pre_tokenizer"]["split"] = "yes";
  expect_contains(load_error(j), "pre_tokenizer.split: expected true or false");
  j = metaspace_style("first");
  j["decoder"]["prepend_scheme"] = 1;
  expect_contains(load_error(j), "decoder.prepend_scheme: expected a string");

  j = tiny();
  j["normalizer"]["normalizers"][1]["pattern"] = {{"String", ""}};
  expect_contains(load_error(j), "normalizer.normalizers[1].pattern.String: an empty pattern is not supported");
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " *"}};
  expect_contains(load_error(j), "normalizer.normalizers[1].pattern.Regex: a pattern that can match the empty string");
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "(unclosed"}};
  expect_contains(load_error(j), "normalizer.normalizers[1].pattern.Regex: invalid regex");
  j["normalizer"]["normalizers"][1]["pattern"] = {{"String", " "}, {"Regex", " "}};
  expect_contains(load_error(j), "normalizer.normalizers[1].pattern: expected an object with one key");
  j = tiny();
  j["normalizer"]["normalizers"][1].erase("content");
  expect_contains(load_error(j), "normalizer.normalizers[1].content: missing");
  j = tiny();
  j["normalizer"]["normalizers"][0].erase("prepend");
  expect_contains(load_error(j), "normalizer.normalizers[0].prepend: missing");
  j = tiny();
  j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}};
  expect_contains(load_error(j), "normalizer.normalizers[0].type: unsupported type 'Lowercase'");

  j = tiny();
  j["decoder"]["decoders"][3]["content"] = "  ";
  expect_contains(load_error(j), "decoder.decoders[3].content: expected one character");
  j = tiny();
  j["decoder"]["decoders"][3]["start"] = -1;
  expect_contains(load_error(j), "decoder.decoders[3].start: expected a non-negative integer, got -1");
  j = tiny();
  j["decoder"]["decoders"][3].erase("stop");
  expect_contains(load_error(j), "decoder.decoders[3].stop: missing");
  j = tiny();
  j["decoder"]["decoders"][1] = {{"type", "CTC"}};
  expect_contains(load_error(j), "decoder.decoders[1].type: unsupported type 'CTC'");
  j = tiny();
  j["decoder"] = {{"type", "ByteLevel"}};
  expect_contains(load_error(j), "decoder.type: a ByteLevel decoder needs a ByteLevel pre-tokenizer");
  j = tiny();
  j["decoder"] = nullptr;
  expect_contains(load_error(j), "decoder: a decoder is required");
  j = tiny();
  j["model"]["fuse_unk"] = "true";
  expect_contains(load_error(j), "model.fuse_unk: expected true or false");
}

TEST(SentencePieceErrors, ByteLevelAndSentencePieceDoNotMix) {
  // A ByteLevel pre-tokenizer makes a byte-level BPE: Metaspace, byte_fallback and the
  // SentencePiece decoders do not go with it.
  json j = metaspace_style("first");
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({metaspace("first", true),
                                                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"]["byte_fallback"] = false;
  expect_contains(load_error(j), "pre_tokenizer.pretokenizers[0].type: unsupported type 'Metaspace' together with a ByteLevel");
  j["pre_tokenizer"]["pretokenizers"].erase(0);
  EXPECT_NO_THROW(load(j));
  j["model"]["byte_fallback"] = true;
  expect_contains(load_error(j), "model.byte_fallback: byte_fallback: true is not supported with a ByteLevel pre-tokenizer");
  j["model"]["byte_fallback"] = false;
  j["decoder"] = metaspace("first", true);
  expect_contains(load_error(j), "decoder.type: unsupported type 'Metaspace' with a ByteLevel pre-tokenizer");
}

}  // namespace
}  // namespace grpo::testing
