// Building the demo models' byte-level tokenizer.json and writing a checkpoint's tokenizer
// files (tokenizer.json + tokenizer_config.json) that transformers' PreTrainedTokenizerFast
// loads.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace grpo::core {

// The special tokens of the demo tokenizer, in id order after the 256 byte tokens.
std::vector<std::string> default_demo_special_tokens();  // <|endoftext|>, <|im_start|>, <|im_end|>

// A byte-level BPE tokenizer.json in the exact Hugging Face schema:
//   ids 0..255: the 256 byte-level symbols in GPT-2 bytes_to_unicode() order (the order of
//     GPT-2's and Qwen's first 256 ids: '!'..'~', then '¡'..'¬', '®'..'ÿ', then 'Ā'.. for
//     the remaining bytes 0..32, 127..160, 173);
//   ids 256..: the special tokens (added_tokens, special: true, normalized: false);
//   then one id per merge (the merged token), merges given as raw byte strings, e.g.
//     {"t", "h"}, {"th", "e"}; each side must already be a token (a byte or an earlier merge).
// normalizer NFC, pre_tokenizer Sequence[Split(Qwen's regex, Isolated), ByteLevel(use_regex
// false)], decoder ByteLevel, model BPE (ignore_merges false, byte_fallback false).
std::string make_byte_level_tokenizer_json(
    const std::vector<std::string>& special_tokens = default_demo_special_tokens(),
    const std::vector<std::pair<std::string, std::string>>& merges = {});

// Byte-pair-encoding merges learned from `texts` (the classic BPE training loop: count the
// adjacent symbol pairs of every word, weighted by the word's frequency, merge the most frequent
// pair, repeat), as raw byte strings for make_byte_level_tokenizer_json. Words are the runs of
// ASCII letters with an optional leading space, the chunks Qwen's pre-tokenizer regex makes of
// English text; digits and punctuation stay single bytes. Ties go to the smallest pair, so the
// result depends on the texts only. Stops early when no pair occurs twice.
std::vector<std::pair<std::string, std::string>> train_bpe_merges(const std::vector<std::string>& texts,
                                                                  std::size_t num_merges);

struct TokenizerFilesOptions {
  // tokenizer_config.json's chat_template: one "default" is written as a string, several as
  // transformers' list of {"name", "template"}; empty: none. Unset: the tokenizer's own.
  std::optional<std::vector<NamedChatTemplate>> chat_templates;
  // Unset: the tokenizer's own (from its tokenizer_config.json), else omitted (null).
  std::optional<std::string> eos_token, pad_token, bos_token;
  long long model_max_length = 131072;
  std::string tokenizer_class = "PreTrainedTokenizerFast";
};

// Writes DIR/tokenizer.json (the text the tokenizer was loaded from) and
// DIR/tokenizer_config.json (chat_template, eos/pad/bos and the tokenizer's other special
// tokens, added_tokens_decoder, model_max_length, tokenizer_class), each with atomic_write_file.
// Throws TokenizerError when a named token is not in the vocabulary.
void write_tokenizer_files(const std::string& dir, const Tokenizer& tokenizer, const TokenizerFilesOptions& options = {});

// The tokenizer_config.json text write_tokenizer_files writes.
std::string make_tokenizer_config_json(const Tokenizer& tokenizer, const TokenizerFilesOptions& options = {});

}  // namespace grpo::core
