// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the format of Qwen2/Qwen3
// and Llama-3; also the demo models' tiny byte-level tokenizer). Torch-free; depends on
// nlohmann_json, PCRE2 and utf8proc only (inside the .cpp).
//
// Pipeline of encode(), as in the Rust `tokenizers` crate:
//   added/special tokens are split out of the raw text first (leftmost-longest match);
//   every other segment: normalizer (NFC, NFD, NFKC, NFKD, Sequence) -> pre-tokenizer
//   (Split with a regex, ByteLevel, Sequence) -> BPE on the bytes of each piece
//   (merge ranks, optional ignore_merges) -> ids. decode() maps ids back through the
//   ByteLevel decoder (bytes -> UTF-8, invalid sequences replaced by U+FFFD as HF does).
//
// Thread safety: a Tokenizer is immutable after loading. encode()/decode() are const and may be
// called concurrently from any number of threads; the internal piece cache is sharded and
// guarded by mutexes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::core {

// Every tokenizer loading/encoding failure. Loading messages start with the file name and the
// JSON key, e.g. "tokenizer.json: model.merges[12]: unknown token 'xy'".
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

struct EncodeOptions {
  // Apply the file's post_processor (e.g. Llama-3's TemplateProcessing adds
  // <|begin_of_text|>). Off by default: chat templates already render BOS themselves.
  bool add_special_tokens = false;
};

struct DecodeOptions {
  bool skip_special_tokens = false;
};

class Tokenizer {
 public:
  // Parses tokenizer.json text. `source_name` is used in error messages (usually the path).
  // `config_json` is the optional tokenizer_config.json text ("" when absent): eos/pad/bos
  // token names and the chat template come from it.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view source_name = "tokenizer.json",
                             std::string_view config_json = "", std::string_view config_source_name = "tokenizer_config.json");

  // Accepts a folder (tokenizer.json + optional tokenizer_config.json) or a path to a
  // tokenizer.json file (a tokenizer_config.json next to it is read when present).
  static Tokenizer load(const std::string& dir_or_file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to `out` (no allocation of a result vector; used by the benchmark and batchers).
  void encode_into(std::string_view text, std::vector<int>& out, const EncodeOptions& options = {}) const;

  // The raw bytes the ids stand for (may be a partial UTF-8 sequence).
  std::string decode_bytes(const std::vector<int>& ids, const DecodeOptions& options = {}) const;
  // decode_bytes() with invalid UTF-8 replaced by U+FFFD, as Hugging Face does.
  std::string decode(const std::vector<int>& ids, const DecodeOptions& options = {}) const;

  std::optional<int> token_to_id(std::string_view token) const;
  // The vocabulary string of an id (byte-level form, e.g. "Ġhello"); throws when unknown.
  const std::string& id_to_token(int id) const;
  // Max id + 1, added tokens included.
  int vocab_size() const;

  // At most how many bytes of encode()'s input one token stands for: a text longer than
  // n * max_bytes_per_token() bytes has more than n tokens, which callers with a token limit use
  // to reject a huge text without tokenizing it. The longest token's bytes (8 times that with a
  // normalizer, which can shrink the text); 0 when no bound holds because the tokenizer can drop
  // text (an added token with lstrip/rstrip, a Split with behavior Removed, a byte with no
  // vocabulary entry and no unk token).
  std::size_t max_bytes_per_token() const;

  std::optional<int> eos_id() const;
  std::optional<int> pad_id() const;
  std::optional<int> bos_id() const;
  std::optional<std::string> eos_token() const;
  std::optional<std::string> pad_token() const;
  std::optional<std::string> bos_token() const;
  const std::vector<AddedToken>& added_tokens() const;
  // The chat_template string of tokenizer_config.json, when it has one.
  const std::optional<std::string>& chat_template_source() const;

  // The tokenizer.json text it was loaded from (written back by write_tokenizer_files).
  const std::string& json_text() const;

  // For the benchmark: disable the per-piece cache (every piece goes through BPE).
  void set_cache_enabled(bool enabled);

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// encode(text) when it has at most `max_tokens` tokens, else nullopt. A text longer than
// max_tokens * max_bytes_per_token() bytes is rejected without being tokenized, so the cost of a
// huge text (a 50 MB data line) is that of reading it, not of tokenizing it; a shorter one is
// tokenized whole, and its ids are encode()'s.
std::optional<std::vector<int>> encode_within(const Tokenizer& tokenizer, std::string_view text, std::size_t max_tokens);

}  // namespace grpo::core
