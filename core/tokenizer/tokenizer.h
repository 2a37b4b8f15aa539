// BPE tokenizer read from a Hugging Face `tokenizer.json`: byte-level BPE (the format of
// Qwen2/Qwen3 and Llama-3; also the demo models' tiny byte-level tokenizer) and
// SentencePiece-style BPE (Llama-2, Mistral, Gemma: byte_fallback, <0xXX> byte tokens, unk).
// Torch-free; depends on nlohmann_json, PCRE2 and utf8proc only (inside the .cpp).
//
// Pipeline of encode(), as in the Rust `tokenizers` crate:
//   added/special tokens are split out of the raw text first (leftmost-longest match);
//   every other segment: normalizer (NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence) ->
//   pre-tokenizer (Split with a regex or a string, ByteLevel, Metaspace, Sequence) -> BPE on each
//   piece (merge ranks, optional ignore_merges) -> ids. With a ByteLevel pre-tokenizer the BPE
//   runs over the bytes of the piece and decode() maps ids back through the ByteLevel decoder
//   (bytes -> UTF-8, invalid sequences replaced by U+FFFD as HF does). Without one
//   (SentencePiece-style) the BPE runs over the characters of the piece: a character missing from
//   the vocabulary becomes its bytes' <0xXX> tokens (byte_fallback) or unk (consecutive unks fused
//   with fuse_unk), and decode() runs the token strings through the file's decoders (Replace,
//   ByteFallback, Fuse, Strip, Metaspace, Sequence).
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
#include <utility>
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

// One chat template of tokenizer_config.json (a plain string is {"default", it}).
struct NamedChatTemplate {
  std::string name;
  std::string source;  // Jinja
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
  // token names and the chat templates come from it. `chat_template_override` (a
  // chat_template.jinja file's text, "" when absent) replaces its "default" template.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view source_name = "tokenizer.json",
                             std::string_view config_json = "", std::string_view config_source_name = "tokenizer_config.json",
                             std::string_view chat_template_override = "");

  // Accepts a folder (tokenizer.json + optional tokenizer_config.json and chat_template.jinja)
  // or a path to a tokenizer.json file (the other two are read from its folder when present).
  static Tokenizer load(const std::string& dir_or_file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to `out` (no allocation of a result vector; used by the benchmark and batchers).
  void encode_into(std::string_view text, std::vector<int>& out, const EncodeOptions& options = {}) const;

  // The raw bytes the ids stand for (may be a partial UTF-8 sequence). Byte-level: the
  // concatenation of each id's bytes. SentencePiece-style: the decoders run on the whole list
  // (Strip and Metaspace look at the first token, so this is not the concatenation of each id's
  // decode), ByteFallback keeping the bytes of a run of <0xXX> tokens that is not valid UTF-8.
  std::string decode_bytes(const std::vector<int>& ids, const DecodeOptions& options = {}) const;
  // The text, as Hugging Face decodes it: byte-level, decode_bytes() with invalid UTF-8 replaced
  // by U+FFFD; SentencePiece-style, the decoders with ByteFallback's rule (a run of <0xXX> tokens
  // that is not valid UTF-8 becomes one U+FFFD per byte).
  std::string decode(const std::vector<int>& ids, const DecodeOptions& options = {}) const;

  std::optional<int> token_to_id(std::string_view token) const;
  // The vocabulary string of an id (byte-level form, e.g. "Ġhello"; SentencePiece-style, e.g.
  // "▁hello" or "<0x0A>"); throws when unknown.
  const std::string& id_to_token(int id) const;
  // Max id + 1, added tokens included.
  int vocab_size() const;

  // At most how many bytes of encode()'s input one token stands for: a text longer than
  // n * max_bytes_per_token() bytes has more than n tokens, which callers with a token limit use
  // to reject a huge text without tokenizing it. The longest token's bytes (its string for a
  // SentencePiece-style vocabulary; 4 when an unk may stand for one character), times how much
  // the normalizer can shrink the text (8 with a Unicode normalization, |pattern| / |content| for
  // a literal Replace; Prepend only adds); 0 when no bound holds because the tokenizer can drop
  // text (an added token with lstrip/rstrip, a Split with behavior Removed, a byte or character
  // with no vocabulary entry, no byte fallback and no unk token, a Replace normalizer with a
  // regex or an empty content) or one token can stand for any length (fuse_unk with an unk that
  // can occur).
  std::size_t max_bytes_per_token() const;

  std::optional<int> eos_id() const;
  std::optional<int> pad_id() const;
  std::optional<int> bos_id() const;
  std::optional<std::string> eos_token() const;
  std::optional<std::string> pad_token() const;
  std::optional<std::string> bos_token() const;
  const std::vector<AddedToken>& added_tokens() const;
  // The "default" chat template (chat_template.jinja, else tokenizer_config.json's
  // chat_template string or its entry named "default"), when there is one.
  const std::optional<std::string>& chat_template_source() const;
  // Every chat template, in file order (e.g. "default" and "tool_use").
  const std::vector<NamedChatTemplate>& chat_templates() const;
  // Where the templates came from, for messages ("DIR/chat_template.jinja",
  // "DIR/tokenizer_config.json: chat_template"); "" when there are none or from_json was used.
  const std::string& chat_template_origin() const;
  // tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask tokens that are set, as
  // (key, content) in that order: what transformers passes to chat templates.
  const std::vector<std::pair<std::string, std::string>>& special_token_strings() const;
  const std::vector<std::string>& additional_special_tokens() const;

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

// The bytes that appending ids.back() adds to decode_bytes(ids minus that last id), for text
// built while generating. Joining single-token decodes is wrong for SentencePiece-style
// decoders (Strip and Metaspace treat a sequence's first token specially: "▁Hello" "▁world"
// would lose the space), so this decodes a short window of the last tokens with and without
// the new one and returns the difference. Concatenating the results for ids[0..k] gives
// decode_bytes(ids). Ids the tokenizer does not have decode to nothing.
std::string decode_bytes_appended(const Tokenizer& tokenizer, const std::vector<int>& ids, const DecodeOptions& options = {});

}  // namespace grpo::core
