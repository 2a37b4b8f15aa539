// Untrusted tokenizer.json / tokenizer_config.json: every problem is a TokenizerError naming
// the file and the JSON key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/error_of.h"

namespace grpo::testing {
namespace {

using grpo::core::Tokenizer;
using grpo::core::TokenizerError;
using json = nlohmann::json;

json base() { return json::parse(grpo::core::make_byte_level_tokenizer_json({"<|endoftext|>"}, {{"a", "b"}})); }

std::string load_error(const json& j) {
  return error_of<TokenizerError>([&] { Tokenizer::from_json(j.dump(), "tok/tokenizer.json"); });
}

void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

TEST(TokenizerErrors, MalformedJson) {
  std::string msg = error_of<TokenizerError>([] { Tokenizer::from_json("{\"model\": ", "tok/tokenizer.json"); });
  expect_contains(msg, "tok/tokenizer.json: invalid JSON");
  expect_contains(error_of<TokenizerError>([] { Tokenizer::from_json("[]", "t.json"); }), "t.json: (top level): expected an object");
}

TEST(TokenizerErrors, DeepNestingAndOddConfigValuesAreErrorsNotCrashes) {
  std::string text = base().dump();
  text.insert(text.size() - 1, ",\"x\":" + std::string(200000, '[') + std::string(200000, ']'));
  expect_contains(error_of<TokenizerError>([&] { Tokenizer::from_json(text, "tok/tokenizer.json"); }),
                  "tok/tokenizer.json: JSON nested deeper than 64 levels");
  // A chat_template list entry whose name is not a string, or that has no template.
  expect_contains(error_of<TokenizerError>([] {
                    Tokenizer::from_json(base().dump(), "tok/tokenizer.json",
                                         R"({"chat_template": [{"name": 5, "template": "x"}]})", "tok/tokenizer_config.json");
                  }),
                  "tok/tokenizer_config.json: chat_template[0].name: expected a string, got number");
  expect_contains(error_of<TokenizerError>([] {
                    Tokenizer::from_json(base().dump(), "tok/tokenizer.json", R"({"chat_template": [{"name": "default"}]})",
                                         "tok/tokenizer_config.json");
                  }),
                  "tok/tokenizer_config.json: chat_template[0].template: missing");
  expect_contains(error_of<TokenizerError>([] {
                    Tokenizer::from_json(base().dump(), "tok/tokenizer.json", R"({"chat_template": 3})",
                                         "tok/tokenizer_config.json");
                  }),
                  "tok/tokenizer_config.json: chat_template: expected a string or a list");
}

TEST(TokenizerErrors, WrongTypes) {
  json j = base();
  j["model"]["vocab"] = json::array();
  expect_contains(load_error(j), "tok/tokenizer.json: model.vocab: expected an object");
  j = base();
  j["model"]["vocab"]["a"] = "zero";
  expect_contains(load_error(j), "model.vocab[\"a\"]: expected an integer token id, got string");
  j = base();
  j["added_tokens"][0]["special"] = "yes";
  expect_contains(load_error(j), "added_tokens[0].special: expected true or false");
  j = base();
  j["model"]["merges"] = "a b";
  expect_contains(load_error(j), "model.merges: expected an array");
  j = base();
  j.erase("model");
  expect_contains(load_error(j), "tok/tokenizer.json: model: missing");
}

TEST(TokenizerErrors, IdsOutOfRangeAndDuplicates) {
  json j = base();
  j["model"]["vocab"]["a"] = -1;
  expect_contains(load_error(j), "model.vocab[\"a\"]: token id -1 is out of range");
  j = base();
  j["model"]["vocab"]["a"] = 4000000000LL;
  expect_contains(load_error(j), "is out of range");
  j = base();
  j["added_tokens"][0]["id"] = 1LL << 40;
  expect_contains(load_error(j), "added_tokens[0].id: token id");
  j = base();
  j["model"]["vocab"]["a"] = 0;  // "!" has id 0
  expect_contains(load_error(j), "duplicate id");
  j = base();
  j["added_tokens"][0]["id"] = 5;
  expect_contains(load_error(j), "added_tokens[0].id: id 5 is already the token");
}

TEST(TokenizerErrors, MergesNamingUnknownTokens) {
  json j = base();
  j["model"]["merges"].push_back(json::array({"a", "zzz"}));
  expect_contains(load_error(j), "model.merges[1]: unknown token 'zzz'");
  j = base();
  j["model"]["merges"].push_back("a c");  // "ac" is not in the vocabulary
  expect_contains(load_error(j), "model.merges[1] (merged token): unknown token 'ac'");
  j = base();
  j["model"]["merges"].push_back("abc");
  expect_contains(load_error(j), "model.merges[1]: expected \"left right\"");
  j = base();
  j["model"]["merges"].push_back(json::array({1, 2}));
  expect_contains(load_error(j), "model.merges[1]: expected");
}

TEST(TokenizerErrors, UnsupportedComponentsNameTheKey) {
  json j = base();
  j["model"]["type"] = "WordPiece";
  expect_contains(load_error(j), "model.type: unsupported type 'WordPiece'");
  j = base();
  j["normalizer"] = {{"type", "NFKX"}};
  expect_contains(load_error(j), "normalizer.type: unsupported type 'NFKX'");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Metaspace";
  expect_contains(load_error(j), "pre_tokenizer.pretokenizers[0].type: unsupported type 'Metaspace'");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolate";
  expect_contains(load_error(j), "pre_tokenizer.pretokenizers[0].behavior: unknown behavior 'Isolate' (did you mean 'Isolated'?)");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_contains(load_error(j), "pre_tokenizer.pretokenizers[0].pattern.Regex: invalid regex");
  j = base();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_contains(load_error(j), "decoder.type: unsupported type 'WordPiece'");
  j = base();
  j["model"]["byte_fallback"] = true;
  expect_contains(load_error(j), "model.byte_fallback");
  j = base();
  j["post_processor"] = {{"type", "BertProcessing"}};
  expect_contains(load_error(j), "post_processor.type: unsupported type 'BertProcessing'");
}

TEST(TokenizerErrors, ConfigFile) {
  std::string tok = base().dump();
  expect_contains(error_of<TokenizerError>([&] { Tokenizer::from_json(tok, "t.json", "{", "cfg.json"); }),
                  "cfg.json: invalid JSON");
  expect_contains(error_of<TokenizerError>([&] { Tokenizer::from_json(tok, "t.json", R"({"eos_token": "<eos>"})", "cfg.json"); }),
                  "cfg.json: eos_token: '<eos>' is not a token of t.json");
  expect_contains(error_of<TokenizerError>([&] { Tokenizer::from_json(tok, "t.json", R"({"pad_token": 3})", "cfg.json"); }),
                  "cfg.json: pad_token: expected a string");
  Tokenizer t = Tokenizer::from_json(tok, "t.json", R"({"eos_token": {"content": "<|endoftext|>"}, "bos_token": null})");
  EXPECT_EQ(t.eos_id(), std::optional<int>(256));
}

TEST(TokenizerErrors, InvalidUtf8Input) {
  Tokenizer t = Tokenizer::from_json(base().dump());
  expect_contains(error_of<TokenizerError>([&] { t.encode("ok \xFF bad"); }), "not valid UTF-8 (byte offset 3)");
}

TEST(TokenizerFeatures, TemplateProcessingAddsBosOnRequest) {
  json j = base();
  j["post_processor"] = json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [256], "tokens": ["<|endoftext|>"]}}}]})");
  Tokenizer t = Tokenizer::from_json(j.dump());
  EXPECT_EQ(t.encode("x"), std::vector<int>{'x' - 33});
  EXPECT_EQ(t.encode("x", grpo::core::EncodeOptions{true}), (std::vector<int>{256, 'x' - 33}));
}

TEST(TokenizerFeatures, IgnoreMergesUsesWholeWordVocabEntries) {
  // "abc" is in the vocabulary but no merge builds it: with ignore_merges it is one token.
  json j = base();
  j["model"]["vocab"]["abc"] = 300;
  Tokenizer plain = Tokenizer::from_json(j.dump());
  j["model"]["ignore_merges"] = true;
  Tokenizer ignoring = Tokenizer::from_json(j.dump());
  EXPECT_EQ(plain.encode("abc"), (std::vector<int>{257, 'c' - 33}));  // "ab" (merge) + "c"
  EXPECT_EQ(ignoring.encode("abc"), std::vector<int>{300});
  EXPECT_EQ(plain.vocab_size(), 301);
}

}  // namespace
}  // namespace grpo::testing
