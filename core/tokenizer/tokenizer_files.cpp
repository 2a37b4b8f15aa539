#include "core/tokenizer/tokenizer_files.h"

#include <map>

#include <nlohmann/json.hpp>

#include <set>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/unicode.h"
#include "core/util/fs.h"

namespace grpo::core {

using ojson = nlohmann::ordered_json;

// The Split regex of Qwen2/Qwen3's tokenizer.json.
static const char* const kQwenSplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> default_demo_special_tokens() { return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}; }

std::vector<std::pair<std::string, std::string>> train_bpe_merges(const std::vector<std::string>& texts,
                                                                  std::size_t num_merges) {
  auto is_letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  std::map<std::string, std::int64_t> word_counts;
  for (const std::string& t : texts)
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t start = i;
      if (t[i] == ' ' && i + 1 < t.size() && is_letter(t[i + 1])) ++i;
      if (i < t.size() && is_letter(t[i])) {
        while (i < t.size() && is_letter(t[i])) ++i;
        ++word_counts[t.substr(start, i - start)];
      } else {
        i = start + 1;
      }
    }
  struct Word {
    std::vector<std::string> symbols;
    std::int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [w, n] : word_counts) {
    Word word{{}, n};
    for (char c : w) word.symbols.emplace_back(1, c);
    words.push_back(std::move(word));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < num_merges) {
    std::map<std::pair<std::string, std::string>, std::int64_t> pairs;
    for (const Word& w : words)
      for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) pairs[{w.symbols[i], w.symbols[i + 1]}] += w.count;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;  // the first (smallest) of equal counts
    if (best == pairs.end() || best->second < 2) break;
    const auto [a, b] = best->first;
    merges.emplace_back(a, b);
    for (Word& w : words) {
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          merged.push_back(a + b);
          ++i;
        } else {
          merged.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(merged);
    }
  }
  return merges;
}

std::string make_byte_level_tokenizer_json(const std::vector<std::string>& special_tokens,
                                           const std::vector<std::pair<std::string, std::string>>& merges) {
  // GPT-2 bytes_to_unicode() order: printable bytes first, then the others.
  std::vector<int> order;
  for (int b = 0; b < 256; ++b)
    if (unicode::is_gpt2_printable(b)) order.push_back(b);
  for (int b = 0; b < 256; ++b)
    if (!unicode::is_gpt2_printable(b)) order.push_back(b);

  auto byte_level = [](const std::string& raw) {
    std::string s;
    for (unsigned char b : raw) s += unicode::byte_to_unicode(b);
    return s;
  };
  ojson vocab = ojson::object();
  std::set<std::string> known;
  int next_id = 0;
  for (int b : order) {
    std::string t = unicode::byte_to_unicode(static_cast<unsigned char>(b));
    vocab[t] = next_id++;
    known.insert(t);
  }
  ojson added = ojson::array();
  std::set<std::string> seen_special;
  for (const std::string& s : special_tokens) {
    if (s.empty() || !seen_special.insert(s).second)
      throw TokenizerError("make_byte_level_tokenizer_json: special token '" + s + "' is empty or repeated");
    added.push_back(ojson{{"id", next_id++}, {"content", s}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  ojson merge_list = ojson::array();
  for (std::size_t i = 0; i < merges.size(); ++i) {
    std::string a = byte_level(merges[i].first), b = byte_level(merges[i].second);
    if (!known.count(a) || !known.count(b))
      throw TokenizerError("make_byte_level_tokenizer_json: merges[" + std::to_string(i) +
                           "]: both sides must be earlier tokens");
    std::string m = a + b;
    if (known.insert(m).second) vocab[m] = next_id++;
    merge_list.push_back(ojson::array({a, b}));
  }
  ojson pre = ojson{{"type", "Sequence"},
                    {"pretokenizers",
                     ojson::array({ojson{{"type", "Split"},
                                         {"pattern", ojson{{"Regex", kQwenSplitRegex}}},
                                         {"behavior", "Isolated"},
                                         {"invert", false}},
                                   ojson{{"type", "ByteLevel"},
                                         {"add_prefix_space", false},
                                         {"trim_offsets", false},
                                         {"use_regex", false}}})}};
  ojson byte_level_cfg = ojson{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  ojson root = ojson::object();
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added;
  root["normalizer"] = ojson{{"type", "NFC"}};
  root["pre_tokenizer"] = pre;
  root["post_processor"] = byte_level_cfg;
  root["decoder"] = byte_level_cfg;
  root["model"] = ojson{{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", nullptr},
                        {"continuing_subword_prefix", ""},
                        {"end_of_word_suffix", ""},
                        {"fuse_unk", false},
                        {"byte_fallback", false},
                        {"ignore_merges", false},
                        {"vocab", vocab},
                        {"merges", merge_list}};
  return root.dump(2, ' ', false);
}

std::string make_tokenizer_config_json(const Tokenizer& tok, const TokenizerFilesOptions& o) {
  const std::vector<NamedChatTemplate>& templates = o.chat_templates ? *o.chat_templates : tok.chat_templates();
  ojson chat_template = nullptr;
  if (templates.size() == 1 && templates[0].name == "default") {
    chat_template = templates[0].source;
  } else if (!templates.empty()) {
    chat_template = ojson::array();
    for (const NamedChatTemplate& t : templates) chat_template.push_back({{"name", t.name}, {"template", t.source}});
  }
  auto resolve = [&](const char* key, const std::optional<std::string>& given,
                     const std::optional<std::string>& own) -> ojson {
    std::optional<std::string> v = given ? given : own;
    if (!v) return nullptr;
    if (!tok.token_to_id(*v))
      throw TokenizerError(std::string("tokenizer_config.json: ") + key + ": '" + *v + "' is not a token of the tokenizer");
    return *v;
  };
  ojson decoder = ojson::object();
  for (const AddedToken& t : tok.added_tokens())
    decoder[std::to_string(t.id)] = ojson{{"content", t.content}, {"lstrip", t.lstrip}, {"normalized", t.normalized},
                                          {"rstrip", t.rstrip}, {"single_word", t.single_word}, {"special", t.special}};
  ojson cfg = ojson::object();
  cfg["add_prefix_space"] = false;
  cfg["added_tokens_decoder"] = decoder;
  cfg["bos_token"] = resolve("bos_token", o.bos_token, tok.bos_token());
  if (!chat_template.is_null()) cfg["chat_template"] = chat_template;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = resolve("eos_token", o.eos_token, tok.eos_token());
  cfg["model_max_length"] = o.model_max_length;
  cfg["pad_token"] = resolve("pad_token", o.pad_token, tok.pad_token());
  cfg["split_special_tokens"] = false;
  cfg["tokenizer_class"] = o.tokenizer_class;
  cfg["unk_token"] = nullptr;
  // The other special tokens chat templates may use, as the tokenizer had them.
  for (const auto& [key, content] : tok.special_token_strings())
    if (key != "bos_token" && key != "eos_token" && key != "pad_token") cfg[key] = content;
  if (!tok.additional_special_tokens().empty()) cfg["additional_special_tokens"] = tok.additional_special_tokens();
  return cfg.dump(2, ' ', false) + "\n";
}

void write_tokenizer_files(const std::string& dir, const Tokenizer& tok, const TokenizerFilesOptions& o) {
  std::string config = make_tokenizer_config_json(tok, o);  // validates before writing anything
  atomic_write_file(dir + "/tokenizer.json", tok.json_text());
  atomic_write_file(dir + "/tokenizer_config.json", config);
}

}  // namespace grpo::core
