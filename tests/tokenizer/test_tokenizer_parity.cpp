// Parity with Hugging Face's JavaScript tokenizers (@huggingface/tokenizers) on the Qwen3 and
// Llama-3 tokenizer.json files and on our demo byte-level tokenizer: identical ids on the whole corpus, and
// decode(encode(s)) == s for every string that is already NFC. Reference ids come from node
// at test time, never from the code under test.
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

void expect_parity(const Tokenizer& tok, const std::vector<std::string>& corpus, const std::vector<Reference>& refs,
                   const char* what) {
  ASSERT_EQ(refs.size(), corpus.size());
  std::size_t id_mismatches = 0, roundtrip_failures = 0, nfc_strings = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    std::vector<int> ids = tok.encode(corpus[i]);
    if (ids != refs[i].ids && ++id_mismatches <= 10)
      ADD_FAILURE() << what << " string " << i << " " << nlohmann::json(corpus[i]).dump() << "\n  ours:      "
                    << ids_str(ids) << "\n  reference: " << ids_str(refs[i].ids);
    std::string decoded = tok.decode(ids);
    EXPECT_EQ(decoded, refs[i].decoded) << what << " decode of string " << i;
    if (refs[i].nfc) {
      ++nfc_strings;
      if (decoded != corpus[i] && ++roundtrip_failures <= 10)
        ADD_FAILURE() << what << " round trip of string " << i << ": " << nlohmann::json(corpus[i]).dump();
    }
  }
  EXPECT_EQ(id_mismatches, 0u) << what << ": strings with different ids out of " << corpus.size();
  EXPECT_EQ(roundtrip_failures, 0u);
  EXPECT_GE(nfc_strings * 10, corpus.size() * 9);  // most of the corpus is NFC (combining marks make some not)
  std::cout << "[parity] " << what << ": " << corpus.size() << " strings, " << (corpus.size() - id_mismatches)
            << " identical, " << nfc_strings << " NFC strings round-tripped\n";
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

}  // namespace
}  // namespace grpo::testing
