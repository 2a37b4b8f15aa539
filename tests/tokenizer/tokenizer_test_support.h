// Shared helpers of the tokenizer tests: paths, the reference cache, running node.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"

namespace grpo::testing {

inline std::string source_dir() { return GRPO_SOURCE_DIR; }
inline std::string npm_prefix() { return source_dir() + "/.cache/npm-tokenizers"; }
inline std::string qwen3_dir() { return source_dir() + "/.cache/reference-tokenizers/qwen3"; }
inline std::string llama3_dir() { return source_dir() + "/.cache/reference-tokenizers/llama3"; }
inline std::string tmp_dir() {
  std::filesystem::create_directories(GRPO_TOKENIZER_TEST_TMP_DIR);
  return GRPO_TOKENIZER_TEST_TMP_DIR;
}

// "" when the reference cache is usable, else the reason (with what to run).
inline std::string reference_cache_problem() {
  namespace fs = std::filesystem;
  const char* hint = " — run scripts/fetch-reference-tokenizers.sh (needs node + npm; install-deps.sh calls it)";
  if (!fs::exists(qwen3_dir() + "/tokenizer.json"))
    return "missing " + qwen3_dir() + "/tokenizer.json" + hint;
  if (!fs::exists(llama3_dir() + "/tokenizer.json"))
    return "missing " + llama3_dir() + "/tokenizer.json" + hint;
  if (!fs::exists(npm_prefix() + "/node_modules/@huggingface/tokenizers/package.json"))
    return "missing " + npm_prefix() + "/node_modules/@huggingface/tokenizers" + hint;
  if (std::system("node --version > /dev/null 2>&1") != 0) return std::string("node is not on PATH") + hint;
  return "";
}

struct Reference {
  std::vector<int> ids;
  std::string decoded;
  bool nfc = false;
};

// Runs tests/tokenizer/reference_encode.cjs over `corpus` with `tokenizer_json_path`.
inline std::vector<Reference> reference_encode(const std::string& tokenizer_json_path,
                                               const std::vector<std::string>& corpus, const std::string& tag) {
  std::string corpus_path = tmp_dir() + "/" + tag + "-corpus.jsonl";
  std::string out_path = tmp_dir() + "/" + tag + "-reference.jsonl";
  {
    std::ofstream f(corpus_path, std::ios::binary);
    for (const auto& s : corpus) f << nlohmann::json(s).dump() << "\n";
  }
  std::filesystem::remove(out_path);
  std::string cmd = "node '" + source_dir() + "/tests/tokenizer/reference_encode.cjs' '" + npm_prefix() + "' '" +
                    tokenizer_json_path + "' '" + corpus_path + "' '" + out_path + "'";
  int rc = std::system(cmd.c_str());
  if (rc != 0) throw std::runtime_error("reference encoder failed (" + std::to_string(rc) + "): " + cmd);
  std::ifstream in(out_path, std::ios::binary);
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    refs.push_back(Reference{j["ids"].get<std::vector<int>>(), j["decoded"].get<std::string>(), j["nfc"].get<bool>()});
  }
  return refs;
}

inline std::string ids_str(const std::vector<int>& ids) { return nlohmann::json(ids).dump(); }

}  // namespace grpo::testing
