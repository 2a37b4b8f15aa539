// Token ids against Hugging Face's Rust tokenizers (PyPI `tokenizers`, run by
// hf_tokenizers_encode.py with the pinned venv Python) on the six reference tokenizer.json files:
// byte-level (Qwen3, Llama-3, Llama-3.1, DeepSeek-V3) and SentencePiece-style (Llama-2, Gemma-3).
// Over the whole parity corpus, encode without special tokens gives the same ids, and decode of
// those ids (keeping and skipping special tokens) the same text. The tests in tests/tokenizer/
// compare with the JavaScript port; this is the implementation transformers itself runs.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"
#include "tests/reference/tokenizer/hf_reference.h"
#include "tests/tokenizer/parity_corpus.h"

namespace grpo::testing {
namespace {

using grpo::core::DecodeOptions;
using grpo::core::Tokenizer;

struct RustReference {
  std::vector<int> ids;
  std::string decoded;
  std::string decoded_skip;
};

std::vector<RustReference> rust_encode(const std::string& name, const std::vector<std::string>& corpus) {
  const std::string corpus_path = tmp_dir() + "/hf-" + name + "-corpus.jsonl";
  const std::string out_path = tmp_dir() + "/hf-" + name + "-ids.jsonl";
  {
    std::ofstream f(corpus_path, std::ios::binary);
    for (const auto& s : corpus) f << nlohmann::json(s).dump() << "\n";
  }
  std::filesystem::remove(out_path);
  run_reference_script("hf_tokenizers_encode.py", {reference_tokenizer_dir(name) + "/tokenizer.json", corpus_path, out_path});
  std::ifstream in(out_path, std::ios::binary);
  std::vector<RustReference> refs;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    refs.push_back({j["ids"].get<std::vector<int>>(), j["decoded"].get<std::string>(), j["decoded_skip"].get<std::string>()});
  }
  return refs;
}

// The parity corpus plus the special tokens and chat framing of every family, so that added-token
// matching is exercised on each file (the corpus itself leans on Qwen's and Llama-2's).
std::vector<std::string> corpus() {
  std::vector<std::string> c = parity_corpus();
  for (const char* s : {
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
           "<|reserved_special_token_5|>x<|end_of_text|> <|python_tag|>{\"a\": 1}<|eom_id|>",
           "1234567890 12 123 1234 3.14159265358979",
           "<bos><start_of_turn>user\nHi  there<end_of_turn>\n<start_of_turn>model\n\n\n\t\tok<end_of_turn>",
           "<start_of_image><image_soft_token><end_of_image>",
           "\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C",  // look-alike, not a token
           "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>system<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi"
           "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
           "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>function"
           "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>f\n```json\n{}\n```",
           "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call><tool_response>\nok\n</tool_response>",
       })
    c.emplace_back(s);
  return c;
}

class HfTokenizers : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizers, IdsAndDecodeEqualRustTokenizers) {
  const std::string name = GetParam();
  const std::string problem = hf_reference_problem({name});
  ASSERT_TRUE(problem.empty()) << problem;
  const std::vector<std::string> texts = corpus();
  ASSERT_GE(texts.size(), 2000u);
  const std::vector<RustReference> refs = rust_encode(name, texts);
  ASSERT_EQ(refs.size(), texts.size()) << "hf_tokenizers_encode.py wrote a short file";
  const Tokenizer tok = Tokenizer::load(reference_tokenizer_dir(name));
  std::size_t id_mismatches = 0, decode_mismatches = 0, tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int> ids = tok.encode(texts[i]);
    tokens += refs[i].ids.size();
    if (ids != refs[i].ids && ++id_mismatches <= 10)
      ADD_FAILURE() << name << " string " << i << " " << nlohmann::json(texts[i]).dump() << "\n  ours:       "
                    << ids_str(ids) << "\n  tokenizers: " << ids_str(refs[i].ids);
    // Decode the reference ids, so that a decode difference shows even where the ids differ.
    const std::string decoded = tok.decode(refs[i].ids);
    const std::string decoded_skip = tok.decode(refs[i].ids, DecodeOptions{true});
    if ((decoded != refs[i].decoded || decoded_skip != refs[i].decoded_skip) && ++decode_mismatches <= 10)
      ADD_FAILURE() << name << " decode of string " << i << " " << ids_str(refs[i].ids) << "\n  ours:       "
                    << nlohmann::json(decoded).dump() << " / skipping specials " << nlohmann::json(decoded_skip).dump()
                    << "\n  tokenizers: " << nlohmann::json(refs[i].decoded).dump() << " / skipping specials "
                    << nlohmann::json(refs[i].decoded_skip).dump();
  }
  EXPECT_EQ(id_mismatches, 0u) << name << ": strings with other ids, out of " << texts.size();
  EXPECT_EQ(decode_mismatches, 0u) << name << ": strings decoded differently, out of " << texts.size();
  std::cout << "[hf-tokenizers] " << name << ": " << texts.size() << " strings (" << tokens << " tokens), "
            << texts.size() - id_mismatches << " with identical ids, " << texts.size() - decode_mismatches
            << " with identical decodes\n";
}

INSTANTIATE_TEST_SUITE_P(Reference, HfTokenizers,
                         ::testing::Values("qwen3", "llama3", "llama3_1", "deepseek_v3", "llama2", "gemma3"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace grpo::testing
