#include "core/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/tokenizer/unicode.h"
#include "core/util/fs.h"
#include "core/util/json_limits.h"
#include "core/util/strings.h"

namespace grpo::core {

using json = nlohmann::json;

namespace {

// Ids beyond this are rejected: a hostile file must not make us allocate gigabytes.
constexpr long long kMaxTokenId = (1LL << 24) - 1;

// ---- JSON access with located errors -------------------------------------------------------

struct Ctx {
  std::string source;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw TokenizerError(source + ": " + key + ": " + what);
  }
};

std::string type_name(const json& j) { return j.type_name(); }

const json* find_key(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& require_object(const Ctx& c, const json& j, const std::string& key) {
  if (!j.is_object()) c.fail(key, std::string("expected an object, got ") + type_name(j));
  return j;
}

std::string require_string(const Ctx& c, const json& j, const std::string& key) {
  if (!j.is_string()) c.fail(key, std::string("expected a string, got ") + type_name(j));
  return j.get<std::string>();
}

bool optional_bool(const Ctx& c, const json& obj, const char* key, const std::string& path, bool def) {
  const json* v = find_key(obj, key);
  if (!v || v->is_null()) return def;
  if (!v->is_boolean()) c.fail(path + "." + key, std::string("expected true or false, got ") + type_name(*v));
  return v->get<bool>();
}

int require_id(const Ctx& c, const json& j, const std::string& key) {
  if (!j.is_number_integer()) c.fail(key, std::string("expected an integer token id, got ") + type_name(j));
  long long v = j.is_number_unsigned() ? static_cast<long long>(std::min<std::uint64_t>(j.get<std::uint64_t>(), 1ULL << 40))
                                       : j.get<long long>();
  if (v < 0 || v > kMaxTokenId)
    c.fail(key, "token id " + std::to_string(v) + " is out of range (0.." + std::to_string(kMaxTokenId) + ")");
  return static_cast<int>(v);
}

std::string require_type(const Ctx& c, const json& obj, const std::string& path) {
  require_object(c, obj, path);
  const json* t = find_key(obj, "type");
  if (!t) c.fail(path + ".type", "missing");
  return require_string(c, *t, path + ".type");
}

[[noreturn]] void unsupported(const Ctx& c, const std::string& key, const std::string& what,
                              const std::vector<std::string>& supported) {
  c.fail(key, "unsupported type '" + what + "'" + did_you_mean(what, supported) + " (supported: " +
                  join(supported, ", ") + ")");
}

// ---- regex translation (Oniguruma syntax of tokenizer.json -> PCRE2) ----------------------
//
// Oniguruma's (and the reference JavaScript port's) \s is Unicode White_Space; PCRE2 10.42's
// \s additionally matches U+180E. Case-insensitive groups (?i:...) fold ASCII letters only, as
// the reference port does (PCRE2 would also fold U+017F LONG S to 's').
constexpr const char* kWhiteSpaceClass =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string translate_regex(const Ctx& c, const std::string& key, const std::string& in) {
  std::string out;
  out.reserve(in.size() * 2);
  std::vector<bool> group_ci;  // per open group: case-insensitive?
  int class_depth = 0;
  auto ci = [&] { return !group_ci.empty() && group_ci.back(); };
  for (std::size_t i = 0; i < in.size(); ++i) {
    char ch = in[i];
    if (ch == '\\') {
      if (i + 1 >= in.size()) c.fail(key, "regex ends with a lone backslash");
      char e = in[++i];
      if (e == 's') {
        out += class_depth > 0 ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (e == 'S' && class_depth == 0) {
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (class_depth > 0) {
      if (ch == '[') ++class_depth;
      if (ch == ']') --class_depth;
      if (ci() && std::isalpha(static_cast<unsigned char>(ch)))
        c.fail(key, "case-insensitive character classes are not supported");
      out += ch;
      continue;
    }
    if (ch == '[') {
      ++class_depth;
      out += ch;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < in.size() && in[i + 1] == '^') out += in[++i];
      if (i + 1 < in.size() && in[i + 1] == ']') out += in[++i];
      continue;
    }
    if (ch == '(') {
      if (in.compare(i, 4, "(?i:") == 0) {
        group_ci.push_back(true);
        out += "(?:";
        i += 3;
        continue;
      }
      if (in.compare(i, 2, "(?") == 0 && i + 2 < in.size() &&
          (in[i + 2] == 'i' || in[i + 2] == 'm' || in[i + 2] == 'x' || in[i + 2] == '-'))
        c.fail(key, "inline regex flags other than (?i:...) are not supported");
      group_ci.push_back(ci());
      out += ch;
      continue;
    }
    if (ch == ')') {
      if (!group_ci.empty()) group_ci.pop_back();
      out += ch;
      continue;
    }
    if (ci() && std::isalpha(static_cast<unsigned char>(ch))) {
      out += '[';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      out += ']';
      continue;
    }
    out += ch;
  }
  return out;
}

class Regex {
 public:
  Regex(const Ctx& c, const std::string& key, const std::string& pattern) {
    std::string translated = translate_regex(c, key, pattern);
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      c.fail(key, "invalid regex at offset " + std::to_string(offset) + ": " + reinterpret_cast<char*>(buf));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // Whether the pattern may match the empty string (PCRE2's lower bound on a match's length is
  // 0; also when PCRE2 cannot tell).
  bool may_match_empty() const {
    uint32_t min_length = 0;
    if (pcre2_pattern_info(code_, PCRE2_INFO_MINLENGTH, &min_length) != 0) return true;
    return min_length == 0;
  }

  // Calls fn(start, end) for every non-empty match, left to right.
  template <typename Fn>
  void for_each_match(std::string_view text, Fn&& fn) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (!md) throw std::bad_alloc();
    struct Guard {
      pcre2_match_data* m;
      ~Guard() { pcre2_match_data_free(m); }
    } guard{md};
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    PCRE2_SIZE pos = 0;
    while (pos < text.size()) {
      int rc;
      if (jit_) {
        rc = pcre2_jit_match(code_, subject, text.size(), pos, 0, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // e.g. JIT stack limit: retry interpreted
          rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, md, nullptr);
      } else {
        rc = pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof buf);
        throw TokenizerError(std::string("encode: pre-tokenizer regex failed: ") + reinterpret_cast<char*>(buf));
      }
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      std::size_t s = ov[0], e = ov[1];
      if (e > s) {
        fn(s, e);
        pos = e;
      } else {  // empty match: step over one UTF-8 character
        pos = e + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      }
    }
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// ---- normalizers ---------------------------------------------------------------------------

enum class NormKind { NFC, NFD, NFKC, NFKD };

std::string utf8proc_normalize(std::string_view s, NormKind kind) {
  utf8proc_option_t opt = UTF8PROC_STABLE;
  switch (kind) {
    case NormKind::NFC: opt = utf8proc_option_t(opt | UTF8PROC_COMPOSE); break;
    case NormKind::NFD: opt = utf8proc_option_t(opt | UTF8PROC_DECOMPOSE); break;
    case NormKind::NFKC: opt = utf8proc_option_t(opt | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
    case NormKind::NFKD: opt = utf8proc_option_t(opt | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
  }
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &dst, opt);
  if (n < 0) throw TokenizerError(std::string("encode: normalization failed: ") + utf8proc_errmsg(n));
  std::string out(reinterpret_cast<char*>(dst), static_cast<std::size_t>(n));
  std::free(dst);
  return out;
}

bool is_ascii(std::string_view s) {
  for (unsigned char ch : s)
    if (ch >= 0x80) return false;
  return true;
}

// A Replace pattern (normalizer or decoder): a literal ("String") or a regex ("Regex"), never
// empty and never able to match the empty string (both are refused when loading).
struct ReplacePattern {
  std::string literal;
  std::shared_ptr<Regex> regex;
};

// Every non-overlapping match of `pattern` in `s`, left to right, replaced by `content` (the Rust
// crate's NormalizedString::replace and Replace decoder). `s` may hold invalid UTF-8 (raw bytes
// from the ByteFallback decoder in decode_bytes()): a regex then runs on each well-formed run
// between the ill-formed bytes, which are kept as they are.
std::string replace_all(std::string_view s, const ReplacePattern& pattern, const std::string& content) {
  std::string out;
  out.reserve(s.size());
  if (!pattern.regex) {
    const std::string& lit = pattern.literal;
    std::size_t pos = 0;
    for (std::size_t at = s.find(lit); at != std::string_view::npos; at = s.find(lit, pos)) {
      out.append(s.data() + pos, at - pos);
      out += content;
      pos = at + lit.size();
    }
    out.append(s.data() + pos, s.size() - pos);
    return out;
  }
  auto replace_valid = [&](std::string_view run) {
    std::size_t pos = 0;
    pattern.regex->for_each_match(run, [&](std::size_t b, std::size_t e) {
      out.append(run.data() + pos, b - pos);
      out += content;
      pos = e;
    });
    out.append(run.data() + pos, run.size() - pos);
  };
  while (!s.empty()) {
    std::size_t bad = unicode::first_invalid_utf8(s);
    if (bad == std::string_view::npos) {
      replace_valid(s);
      break;
    }
    replace_valid(s.substr(0, bad));
    std::size_t len = 0;
    unicode::decode_at(s, bad, &len);  // the maximal ill-formed subsequence
    len = std::max<std::size_t>(len, 1);
    out.append(s.data() + bad, len);
    s.remove_prefix(bad + len);
  }
  return out;
}

// One normalizer of the (flattened) normalizer Sequence.
struct NormStep {
  enum Kind { Unicode, Prepend, Replace } kind = Unicode;
  NormKind form = NormKind::NFC;  // Unicode
  std::string text;               // Prepend: the prefix; Replace: the content
  ReplacePattern pattern;         // Replace
};

std::string apply_normalizers(const std::vector<NormStep>& steps, std::string s) {
  for (const NormStep& n : steps) {
    switch (n.kind) {
      case NormStep::Unicode:
        if (!is_ascii(s)) s = utf8proc_normalize(s, n.form);
        break;
      case NormStep::Prepend:  // the Rust crate prepends only to a non-empty string
        if (!s.empty()) s.insert(0, n.text);
        break;
      case NormStep::Replace:
        s = replace_all(s, n.pattern, n.text);
        break;
    }
  }
  return s;
}

// ---- merge table: (left id, right id) -> (rank, merged id), open addressing ----------------

class MergeTable {
 public:
  struct Entry {
    std::uint64_t key;
    int rank;
    int merged;
  };
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Entry{kEmpty, 0, 0});
    mask_ = cap - 1;
  }
  // Later entries overwrite earlier ones (as the Rust HashMap::from_iter does).
  void insert(int a, int b, int rank, int merged) {
    std::uint64_t k = key(a, b);
    for (std::size_t i = hash(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == k) {
        slots_[i] = Entry{k, rank, merged};
        return;
      }
    }
  }
  const Entry* find(int a, int b) const {
    if (slots_.empty()) return nullptr;
    std::uint64_t k = key(a, b);
    for (std::size_t i = hash(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~0ULL;
  static std::uint64_t key(int a, int b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  std::size_t hash(std::uint64_t k) const { return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ULL) >> 20) & mask_; }
  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
};

// ---- pre-tokenizers ------------------------------------------------------------------------

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Metaspace's prepend_scheme: when the replacement character is put in front of a piece that
// does not start with it.
enum class PrependScheme { First, Never, Always };

struct PreTokenizerStep {
  enum Kind { Split, ByteLevel, Metaspace } kind = Split;
  std::shared_ptr<Regex> regex;  // Split with a Regex pattern, or ByteLevel with use_regex
  std::string literal;           // Split with a String pattern; Metaspace: the replacement
  SplitBehavior behavior = SplitBehavior::Isolated;  // Metaspace: MergedWithNext
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  PrependScheme prepend_scheme = PrependScheme::Always;  // Metaspace
  bool split = true;                                      // Metaspace: split on the replacement
};

// One decoder of the (flattened) decoder Sequence of a SentencePiece-style tokenizer; byte-level
// tokenizers decode through the ByteLevel byte table instead.
struct DecoderStep {
  enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace } kind = Fuse;
  ReplacePattern pattern;  // Replace
  std::string content;     // Replace: the content; Strip: the character; Metaspace: the replacement
  std::uint32_t content_cp = 0;  // Strip: the character
  std::size_t start = 0, stop = 0;  // Strip
  bool strip_first = true;          // Metaspace: prepend_scheme is not never
};

// The GPT-2 pattern ByteLevel uses when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- added-token matcher (leftmost-longest) ------------------------------------------------

class AddedTokenMatcher {
 public:
  struct Pattern {
    std::string text;
    int index;  // into Impl::added
  };
  // A byte trie: finding the longest pattern at a position costs the length of the match, not
  // the number of patterns (Gemma has 6,400 added tokens, most of them starting with '<').
  AddedTokenMatcher() { root_.fill(-1); }
  void add(std::string text, int index) {
    if (text.empty()) return;
    int node = -1;
    for (unsigned char b : text) {
      int next = node < 0 ? root_[b] : child_unsorted(node, b);
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        nodes_.emplace_back();
        if (node < 0)
          root_[b] = next;
        else
          nodes_[static_cast<std::size_t>(node)].children.emplace_back(b, next);
      }
      node = next;
    }
    int& pattern = nodes_[static_cast<std::size_t>(node)].pattern;
    if (pattern < 0) {  // the same text twice: the first one added wins
      pattern = static_cast<int>(patterns_.size());
      patterns_.push_back(Pattern{std::move(text), index});
    }
  }
  void finish() {
    for (Node& n : nodes_) std::sort(n.children.begin(), n.children.end());
  }
  bool empty() const { return patterns_.empty(); }
  // First match at or after `from`, the longest one there (leftmost-longest): returns (start,
  // pattern) or start == npos.
  std::pair<std::size_t, const Pattern*> find(std::string_view text, std::size_t from) const {
    for (std::size_t i = from; i < text.size(); ++i) {
      int node = root_[static_cast<unsigned char>(text[i])];
      int best = -1;
      for (std::size_t j = i + 1; node >= 0; ++j) {
        if (nodes_[static_cast<std::size_t>(node)].pattern >= 0) best = nodes_[static_cast<std::size_t>(node)].pattern;
        if (j >= text.size()) break;
        node = child(node, static_cast<unsigned char>(text[j]));
      }
      if (best >= 0) return {i, &patterns_[static_cast<std::size_t>(best)]};
    }
    return {std::string_view::npos, nullptr};
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> children;  // sorted by byte after finish()
    int pattern = -1;
  };
  int child(int node, unsigned char b) const {  // after finish()
    const auto& c = nodes_[static_cast<std::size_t>(node)].children;
    auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(b, -1));
    return it != c.end() && it->first == b ? it->second : -1;
  }
  int child_unsorted(int node, unsigned char b) const {
    for (const auto& [byte, next] : nodes_[static_cast<std::size_t>(node)].children)
      if (byte == b) return next;
    return -1;
  }
  std::array<int, 256> root_;
  std::vector<Node> nodes_;
  std::vector<Pattern> patterns_;
};

bool is_unicode_whitespace(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace

// ---- Impl ----------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string source;
  std::string json_text;

  // vocabulary
  std::vector<std::string> id_to_token;  // "" for holes
  std::vector<char> id_known;
  std::unordered_map<std::string, int> token_to_id;
  std::vector<std::string> id_to_bytes;  // decoded bytes of each id
  std::vector<char> id_is_special;

  // normalizer
  std::vector<NormStep> normalizers;
  bool unicode_normalizers_only = true;  // every step is NFC/NFD/NFKC/NFKD (no-ops on ASCII)

  // pre-tokenizer
  std::vector<PreTokenizerStep> pre_steps;
  bool has_metaspace = false;  // a Metaspace step (whose prepend_scheme "first" needs offsets)

  // Byte-level BPE (a ByteLevel pre-tokenizer: BPE runs over the bytes of each piece, through
  // GPT-2's byte table) or SentencePiece-style BPE (no ByteLevel: BPE runs over the characters
  // of each piece, with byte_fallback and the Replace/ByteFallback/Fuse/Strip/Metaspace decoders).
  bool byte_level = true;

  // model
  std::array<int, 256> byte_id{};  // id of each byte's byte-level symbol, -1 if absent
  MergeTable merges;
  bool ignore_merges = false;
  std::optional<int> unk_id;
  bool fuse_unk = false;
  bool byte_fallback = false;
  std::array<int, 256> fallback_id{};  // id of each byte's "<0xXX>" token (model vocabulary), -1 if absent
  std::array<int, 128> ascii_id{};     // model-vocabulary id of each ASCII character, -1 if absent
  std::unordered_map<std::uint32_t, int> char_id;  // model-vocabulary id of each other one-character token
  // The model vocabulary is token_to_id without the added tokens: for added contents that are
  // not in the model vocabulary (-1) or are there with another id, the model's answer.
  std::unordered_map<std::string, int> model_shadowed;

  // decoder (SentencePiece-style only)
  std::vector<DecoderStep> decoder_steps;

  // post-processor (TemplateProcessing single)
  std::vector<int> post_prefix, post_suffix;

  // added tokens
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // normalized == false
  AddedTokenMatcher normalized_matcher;  // normalized == true (content normalized)

  // config
  std::optional<std::string> eos, pad, bos;
  std::optional<int> eos_id, pad_id, bos_id;
  std::vector<std::pair<std::string, std::string>> special_token_strings;  // tokenizer_config.json *_token
  std::vector<std::string> additional_special_tokens;
  std::vector<NamedChatTemplate> chat_templates;
  std::optional<std::string> chat_template;  // the "default" one
  std::string chat_template_origin;

  // Tokenizer::max_bytes_per_token(); 0: no bound
  std::size_t max_bytes_per_token = 0;

  // piece cache: raw piece bytes -> ids
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kShardCapacity = 1 << 14;
  static constexpr std::size_t kMaxCachedPiece = 128;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int>> map;
  };
  mutable std::array<Shard, kShards> cache;
  std::atomic<bool> cache_enabled{true};

  // `at_start`: the text starts at offset 0 of encode()'s input (Metaspace's prepend_scheme
  // "first" prepends only there, as the Rust crate's offsets_original().0 == 0).
  void encode_segment(std::string_view text, std::vector<int>& out, bool at_start) const;
  void encode_normalized(std::string_view text, std::vector<int>& out, bool at_start) const;
  void pre_tokenize(std::string_view text, bool at_start, std::deque<std::string>& arena,
                    std::vector<std::string_view>& pieces) const;
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  void bpe(std::string_view piece, std::vector<int>& out) const;
  void encode_with_added(std::string_view text, const AddedTokenMatcher& matcher, bool raw_level,
                         std::vector<int>& out, bool at_start) const;
  // The model-vocabulary id of a token string (added tokens left out), -1 if absent.
  int model_id(std::string_view token) const;
  // SentencePiece-style decode: the token strings through decoder_steps, joined. `raw`: the
  // ByteFallback decoder keeps the bytes of an ill-formed run (decode_bytes) instead of
  // replacing each by U+FFFD (decode).
  std::string decode_chain(const std::vector<int>& ids, const DecodeOptions& options, bool raw) const;
};

namespace {

// Splits `text` around matches of an added-token matcher, honouring lstrip/rstrip. Calls
// seg(string_view) for plain text and tok(index) for each added token.
template <typename Seg, typename Tok>
void split_added(std::string_view text, const AddedTokenMatcher& m, const std::vector<AddedToken>& added, Seg&& seg,
                 Tok&& tok) {
  std::size_t pos = 0;  // start of pending plain text
  std::size_t from = 0;
  while (from < text.size()) {
    auto [start, pat] = m.find(text, from);
    if (!pat) break;
    const AddedToken& at = added[static_cast<std::size_t>(pat->index)];
    std::size_t s = start, e = start + pat->text.size();
    if (at.lstrip) {
      while (s > pos) {
        std::size_t p = s - 1;
        while (p > pos && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        std::uint32_t cp = unicode::decode_at(text, p);
        if (!is_unicode_whitespace(cp)) break;
        s = p;
      }
    }
    if (at.rstrip) {
      while (e < text.size()) {
        std::size_t len = 0;
        std::uint32_t cp = unicode::decode_at(text, e, &len);
        if (!is_unicode_whitespace(cp)) break;
        e += len;
      }
    }
    if (s > pos) seg(text.substr(pos, s - pos));
    tok(pat->index);
    pos = from = e;
  }
  if (pos < text.size()) seg(text.substr(pos));
}

}  // namespace

void Tokenizer::Impl::encode_with_added(std::string_view text, const AddedTokenMatcher& matcher, bool raw_level,
                                        std::vector<int>& out, bool at_start) const {
  split_added(
      text, matcher, added,
      [&](std::string_view seg) {
        const bool seg_at_start = at_start && seg.data() == text.data();
        if (raw_level)
          encode_segment(seg, out, seg_at_start);
        else
          encode_normalized(seg, out, seg_at_start);
      },
      [&](int index) { out.push_back(added[static_cast<std::size_t>(index)].id); });
}

void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<int>& out, bool at_start) const {
  if (normalizers.empty() || (unicode_normalizers_only && is_ascii(text))) {
    if (normalized_matcher.empty())
      encode_normalized(text, out, at_start);
    else
      encode_with_added(text, normalized_matcher, false, out, at_start);
    return;
  }
  std::string norm = apply_normalizers(normalizers, std::string(text));
  if (normalized_matcher.empty())
    encode_normalized(norm, out, at_start);
  else
    encode_with_added(norm, normalized_matcher, false, out, at_start);
}

void Tokenizer::Impl::pre_tokenize(std::string_view text, bool at_start, std::deque<std::string>& arena,
                                   std::vector<std::string_view>& pieces) const {
  pieces.clear();
  pieces.push_back(text);
  // Per piece, when a Metaspace step needs it: does it start at offset 0 of encode()'s input?
  std::vector<char> starts, next_starts;
  if (has_metaspace) starts.push_back(at_start ? 1 : 0);
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : pre_steps) {
    next.clear();
    next_starts.clear();
    for (std::size_t pi = 0; pi < pieces.size(); ++pi) {
      std::string_view piece = pieces[pi];
      const bool piece_at_start = has_metaspace && starts[pi] != 0;
      if (step.kind == PreTokenizerStep::ByteLevel) {
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
          arena.push_back(" " + std::string(piece));
          piece = arena.back();
        }
        if (!step.regex) {
          next.push_back(piece);
          if (has_metaspace) next_starts.push_back(piece_at_start);
          continue;
        }
      }
      if (step.kind == PreTokenizerStep::Metaspace) {
        // Every ' ' becomes the replacement; the replacement goes in front as prepend_scheme says
        // (unless the piece already starts with it); with split, the piece is split before each
        // replacement (MergedWithNext), as the Rust crate's Metaspace.
        const std::string& rep = step.literal;
        std::string s;
        s.reserve(piece.size() + rep.size() * 4);
        for (char ch : piece) {
          if (ch == ' ')
            s += rep;
          else
            s += ch;
        }
        if ((step.prepend_scheme == PrependScheme::Always ||
             (step.prepend_scheme == PrependScheme::First && piece_at_start)) &&
            s.compare(0, rep.size(), rep) != 0)
          s.insert(0, rep);
        arena.push_back(std::move(s));
        piece = arena.back();
        if (!step.split) {
          next.push_back(piece);
          next_starts.push_back(piece_at_start);  // (has_metaspace)
          continue;
        }
      }
      // Collect (start, end, is_match) segments covering the piece.
      struct SegM {
        std::size_t s, e;
        bool match;
      };
      std::vector<SegM> segs;
      std::size_t prev = 0;
      auto on_match = [&](std::size_t s, std::size_t e) {
        if (s > prev) segs.push_back({prev, s, false});
        segs.push_back({s, e, true});
        prev = e;
      };
      if (step.regex) {
        step.regex->for_each_match(piece, on_match);
      } else if (!step.literal.empty()) {
        for (std::size_t at = piece.find(step.literal); at != std::string_view::npos;
             at = piece.find(step.literal, at + step.literal.size()))
          on_match(at, at + step.literal.size());
      }
      if (prev < piece.size()) segs.push_back({prev, piece.size(), false});
      if (step.invert)
        for (auto& s : segs) s.match = !s.match;
      auto emit = [&](std::size_t s, std::size_t e) {
        if (e > s) {
          next.push_back(piece.substr(s, e - s));
          if (has_metaspace) next_starts.push_back(piece_at_start && s == 0);
        }
      };
      switch (step.behavior) {
        case SplitBehavior::Isolated:
          for (auto& s : segs) emit(s.s, s.e);
          break;
        case SplitBehavior::Removed:
          for (auto& s : segs)
            if (!s.match) emit(s.s, s.e);
          break;
        case SplitBehavior::MergedWithPrevious: {
          std::size_t start = 0;
          bool open = false;
          for (auto& s : segs) {
            if (s.match) {
              emit(open ? start : s.s, s.e);
              open = false;
            } else {
              if (open) emit(start, s.s);
              start = s.s;
              open = true;
            }
          }
          if (open) emit(start, piece.size());
          break;
        }
        case SplitBehavior::MergedWithNext: {
          std::size_t start = 0;
          bool open = false;
          for (auto& s : segs) {
            if (s.match) {
              if (open) emit(start, s.s);
              start = s.s;
              open = true;
            } else {
              emit(open ? start : s.s, s.e);
              open = false;
            }
          }
          if (open) emit(start, piece.size());
          break;
        }
        case SplitBehavior::Contiguous: {
          std::size_t i = 0;
          while (i < segs.size()) {
            std::size_t j = i;
            while (j + 1 < segs.size() && segs[j + 1].match == segs[i].match) ++j;
            emit(segs[i].s, segs[j].e);
            i = j + 1;
          }
          break;
        }
      }
    }
    pieces.swap(next);
    starts.swap(next_starts);
  }
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int>& out, bool at_start) const {
  if (text.empty()) return;
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
  pre_tokenize(text, at_start, arena, pieces);
  for (std::string_view p : pieces) encode_piece(p, out);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (byte_level && piece.size() == 1) {  // single byte: no merges possible
    int id = byte_id[static_cast<unsigned char>(piece[0])];
    if (id >= 0)
      out.push_back(id);
    else if (unk_id)
      out.push_back(*unk_id);
    return;
  }
  if (!cache_enabled.load(std::memory_order_relaxed) || piece.size() > kMaxCachedPiece || piece.size() == 1) {
    bpe(piece, out);
    return;
  }
  std::string key(piece);
  std::size_t h = std::hash<std::string>{}(key);
  Shard& shard = cache[h % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::size_t before = out.size();
  bpe(piece, out);
  std::vector<int> ids(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::move(key), std::move(ids));
}

int Tokenizer::Impl::model_id(std::string_view token) const {
  if (token.size() == 1 && static_cast<unsigned char>(token[0]) < 0x80) return ascii_id[static_cast<unsigned char>(token[0])];
  auto it = token_to_id.find(std::string(token));
  if (it == token_to_id.end()) return -1;
  if (!model_shadowed.empty()) {
    auto sh = model_shadowed.find(it->first);
    if (sh != model_shadowed.end()) return sh->second;
  }
  return it->second;
}

// Byte-pair merging as in the Rust crate's BPE::merge_word + Word::merge_all: the piece becomes
// symbols (byte-level: one per byte; SentencePiece-style: one per character, a character missing
// from the vocabulary becoming its bytes' <0xXX> tokens with byte_fallback, else unk, consecutive
// unks fused with fuse_unk), then the lowest-rank merge is applied repeatedly (leftmost first
// among equal ranks), skipping stale queue entries.
// Long because the symbol list, its links and the merge queue are one data structure that every
// step edits; split, each step would take all three.
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int>& out) const {
  if (ignore_merges) {
    if (byte_level) {
      std::string bl;
      bl.reserve(piece.size() * 2);
      for (unsigned char b : piece) bl += unicode::byte_to_unicode(b);
      auto it = token_to_id.find(bl);
      if (it != token_to_id.end()) {
        out.push_back(it->second);
        return;
      }
    } else if (int id = model_id(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Sym {
    int id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(piece.size());
  auto push = [&](int id) {
    int n = static_cast<int>(syms.size());
    syms.push_back(Sym{id, n - 1, n + 1, true});
  };
  // An unknown symbol becomes unk (nothing when there is no unk token: it is dropped). As in the
  // Rust crate, the unk waits until the next known symbol or the end, so that fuse_unk can fuse
  // a run of them; byte-fallback tokens do not flush it (they may land before it).
  bool unk_pending = false;
  auto unknown = [&] {
    if (!unk_id) return;
    if (unk_pending && !fuse_unk) push(*unk_id);
    unk_pending = true;
  };
  auto known = [&](int id) {
    if (unk_pending) {
      push(*unk_id);
      unk_pending = false;
    }
    push(id);
  };
  if (byte_level) {
    for (unsigned char b : piece) {
      int id = byte_id[b];
      if (id >= 0)
        known(id);
      else
        unknown();
    }
  } else {
    for (std::size_t i = 0; i < piece.size();) {
      std::size_t len = 1;
      unicode::decode_at(piece, i, &len);
      std::string_view ch = piece.substr(i, len);
      i += len;
      int id = -1;
      if (len == 1) {
        id = ascii_id[static_cast<unsigned char>(ch[0])];
      } else {
        auto it = char_id.find(unicode::decode_at(ch, 0));
        if (it != char_id.end()) id = it->second;
      }
      if (id >= 0) {
        known(id);
        continue;
      }
      if (byte_fallback &&
          std::all_of(ch.begin(), ch.end(), [&](char b) { return fallback_id[static_cast<unsigned char>(b)] >= 0; })) {
        for (char b : ch) push(fallback_id[static_cast<unsigned char>(b)]);
        continue;
      }
      unknown();
    }
  }
  if (unk_pending) push(*unk_id);
  if (syms.empty()) return;
  syms.back().next = -1;
  struct Cand {
    int rank;
    int pos;
    int merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap_storage;
  heap_storage.reserve(syms.size());
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue(std::greater<Cand>(), std::move(heap_storage));
  for (int i = 0; i + 1 < static_cast<int>(syms.size()); ++i)
    if (const MergeTable::Entry* m = merges.find(syms[i].id, syms[i + 1].id)) queue.push(Cand{m->rank, i, m->merged});
  while (!queue.empty()) {
    Cand top = queue.top();
    queue.pop();
    Sym& cur = syms[static_cast<std::size_t>(top.pos)];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[static_cast<std::size_t>(cur.next)];
    const MergeTable::Entry* m = merges.find(cur.id, right.id);
    if (!m || m->merged != top.merged) continue;  // stale
    cur.id = top.merged;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[static_cast<std::size_t>(cur.next)].prev = top.pos;
    if (cur.prev >= 0) {
      const Sym& p = syms[static_cast<std::size_t>(cur.prev)];
      if (const MergeTable::Entry* pm = merges.find(p.id, cur.id)) queue.push(Cand{pm->rank, cur.prev, pm->merged});
    }
    if (cur.next >= 0) {
      const Sym& n = syms[static_cast<std::size_t>(cur.next)];
      if (const MergeTable::Entry* nm = merges.find(cur.id, n.id)) queue.push(Cand{nm->rank, top.pos, nm->merged});
    }
  }
  for (int i = 0; i >= 0; i = syms[static_cast<std::size_t>(i)].next) out.push_back(syms[static_cast<std::size_t>(i)].id);
}

// ---- loading -------------------------------------------------------------------------------

namespace {

NormKind norm_kind(const std::string& t) {
  if (t == "NFC") return NormKind::NFC;
  if (t == "NFD") return NormKind::NFD;
  if (t == "NFKC") return NormKind::NFKC;
  return NormKind::NFKD;
}

// A string of exactly one character (the Rust crate's `char` fields); its code point to *cp.
std::string require_char(const Ctx& c, const json& j, const std::string& key, std::uint32_t* cp = nullptr) {
  std::string s = require_string(c, j, key);
  if (s.empty()) c.fail(key, "expected one character, got an empty string");
  std::size_t len = 0;
  std::uint32_t v = unicode::decode_at(s, 0, &len);
  if (len != s.size()) c.fail(key, "expected one character, got '" + s + "'");
  if (cp) *cp = v;
  return s;
}

// A non-negative integer (a count such as Strip's start/stop).
std::size_t require_count(const Ctx& c, const json& obj, const char* name, const std::string& path) {
  const json* v = find_key(obj, name);
  const std::string key = path + "." + name;
  if (!v) c.fail(key, "missing");
  if (!v->is_number_integer()) c.fail(key, std::string("expected a non-negative integer, got ") + type_name(*v));
  if (v->is_number_unsigned()) return static_cast<std::size_t>(std::min<std::uint64_t>(v->get<std::uint64_t>(), 1ULL << 30));
  long long n = v->get<long long>();
  if (n < 0) c.fail(key, "expected a non-negative integer, got " + std::to_string(n));
  return static_cast<std::size_t>(std::min<long long>(n, 1LL << 30));
}

// Replace's pattern: {"String": "..."} or {"Regex": "..."}.
ReplacePattern parse_replace_pattern(const Ctx& c, const json& obj, const std::string& path) {
  const json* pat = find_key(obj, "pattern");
  if (!pat) c.fail(path + ".pattern", "missing");
  if (!pat->is_object() || pat->size() != 1)
    c.fail(path + ".pattern", "expected an object with one key, {\"String\": ...} or {\"Regex\": ...}");
  ReplacePattern p;
  if (const json* lit = find_key(*pat, "String")) {
    p.literal = require_string(c, *lit, path + ".pattern.String");
    if (p.literal.empty()) c.fail(path + ".pattern.String", "an empty pattern is not supported");
  } else if (const json* re = find_key(*pat, "Regex")) {
    const std::string key = path + ".pattern.Regex";
    p.regex = std::make_shared<Regex>(c, key, require_string(c, *re, key));
    if (p.regex->may_match_empty()) c.fail(key, "a pattern that can match the empty string is not supported");
  } else {
    c.fail(path + ".pattern", "expected a \"String\" or \"Regex\" key");
  }
  return p;
}

std::string require_string_key(const Ctx& c, const json& obj, const char* name, const std::string& path) {
  const json* v = find_key(obj, name);
  if (!v) c.fail(path + "." + name, "missing");
  return require_string(c, *v, path + "." + name);
}

// Metaspace (pre-tokenizer and decoder): replacement, prepend_scheme, split, and the older
// add_prefix_space, read as the Rust crate reads them.
struct MetaspaceOptions {
  std::string replacement;
  PrependScheme scheme = PrependScheme::Always;
  bool split = true;
};

MetaspaceOptions parse_metaspace(const Ctx& c, const json& j, const std::string& path) {
  MetaspaceOptions m;
  const json* rep = find_key(j, "replacement");
  if (!rep) c.fail(path + ".replacement", "missing");
  m.replacement = require_char(c, *rep, path + ".replacement");
  static const std::vector<std::string> schemes = {"first", "never", "always"};
  std::string scheme = "always";
  if (const json* ps = find_key(j, "prepend_scheme"); ps && !ps->is_null()) {
    scheme = require_string(c, *ps, path + ".prepend_scheme");
    auto it = std::find(schemes.begin(), schemes.end(), scheme);
    if (it == schemes.end())
      c.fail(path + ".prepend_scheme", "unknown prepend_scheme '" + scheme + "'" + did_you_mean(scheme, schemes) +
                                           " (supported: " + join(schemes, ", ") + ")");
    m.scheme = static_cast<PrependScheme>(it - schemes.begin());
  }
  // Files written before prepend_scheme existed say add_prefix_space; false only goes with
  // "never" (an absent prepend_scheme means "always", as in the Rust crate, which refuses the mix).
  if (!optional_bool(c, j, "add_prefix_space", path, true) && m.scheme != PrependScheme::Never)
    c.fail(path + ".add_prefix_space", "add_prefix_space: false does not match prepend_scheme '" + scheme +
                                           "' (use \"prepend_scheme\": \"never\")");
  m.split = optional_bool(c, j, "split", path, true);
  return m;
}

void parse_normalizer(const Ctx& c, const json& j, const std::string& path, std::vector<NormStep>& out, int depth) {
  if (j.is_null()) return;
  if (depth > 16) c.fail(path, "nested too deeply");
  std::string type = require_type(c, j, path);
  if (type == "Sequence") {
    const json* list = find_key(j, "normalizers");
    if (!list || !list->is_array()) c.fail(path + ".normalizers", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      parse_normalizer(c, (*list)[i], path + ".normalizers[" + std::to_string(i) + "]", out, depth + 1);
    return;
  }
  NormStep step;
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = NormStep::Unicode;
    step.form = norm_kind(type);
  } else if (type == "Prepend") {
    step.kind = NormStep::Prepend;
    step.text = require_string_key(c, j, "prepend", path);
  } else if (type == "Replace") {
    step.kind = NormStep::Replace;
    step.pattern = parse_replace_pattern(c, j, path);
    step.text = require_string_key(c, j, "content", path);
  } else {
    unsupported(c, path + ".type", type, {"NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace", "Sequence"});
  }
  out.push_back(std::move(step));
}

// Whether a pre-tokenizer (a Sequence of them) has a ByteLevel step.
bool has_byte_level(const json& j, int depth) {
  if (!j.is_object() || depth > 16) return false;
  const json* type = find_key(j, "type");
  if (!type || !type->is_string()) return false;
  if (*type == "ByteLevel") return true;
  const json* list = find_key(j, "pretokenizers");
  if (*type != "Sequence" || !list || !list->is_array()) return false;
  return std::any_of(list->begin(), list->end(), [&](const json& e) { return has_byte_level(e, depth + 1); });
}

// byte_level: the pre-tokenizer has a ByteLevel step (which rules out Metaspace).
void parse_pre_tokenizer(const Ctx& c, const json& j, const std::string& path, std::vector<PreTokenizerStep>& out,
                         bool byte_level, int depth) {
  if (j.is_null()) return;
  if (depth > 16) c.fail(path, "nested too deeply");
  std::string type = require_type(c, j, path);
  if (type == "Sequence") {
    const json* list = find_key(j, "pretokenizers");
    if (!list || !list->is_array()) c.fail(path + ".pretokenizers", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      parse_pre_tokenizer(c, (*list)[i], path + ".pretokenizers[" + std::to_string(i) + "]", out, byte_level, depth + 1);
    return;
  }
  PreTokenizerStep step;
  if (type == "Split") {
    step.kind = PreTokenizerStep::Split;
    const json* pat = find_key(j, "pattern");
    if (!pat || !pat->is_object()) c.fail(path + ".pattern", "expected an object {\"Regex\": ...} or {\"String\": ...}");
    if (const json* re = find_key(*pat, "Regex")) {
      step.regex = std::make_shared<Regex>(c, path + ".pattern.Regex", require_string(c, *re, path + ".pattern.Regex"));
    } else if (const json* lit = find_key(*pat, "String")) {
      step.literal = require_string(c, *lit, path + ".pattern.String");
    } else {
      c.fail(path + ".pattern", "expected a \"Regex\" or \"String\" key");
    }
    const json* beh = find_key(j, "behavior");
    std::string b = beh ? require_string(c, *beh, path + ".behavior") : "Isolated";
    static const std::vector<std::string> behaviors = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                                       "Contiguous"};
    auto it = std::find(behaviors.begin(), behaviors.end(), b);
    if (it == behaviors.end())
      c.fail(path + ".behavior", "unknown behavior '" + b + "'" + did_you_mean(b, behaviors) +
                                     " (supported: " + join(behaviors, ", ") + ")");
    step.behavior = static_cast<SplitBehavior>(it - behaviors.begin());
    step.invert = optional_bool(c, j, "invert", path, false);
    out.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::ByteLevel;
    step.add_prefix_space = optional_bool(c, j, "add_prefix_space", path, true);
    if (optional_bool(c, j, "use_regex", path, true)) step.regex = std::make_shared<Regex>(c, path, kGpt2Pattern);
    out.push_back(std::move(step));
    return;
  }
  if (type == "Metaspace") {
    if (byte_level)
      c.fail(path + ".type", "unsupported type 'Metaspace' together with a ByteLevel pre-tokenizer (Metaspace is for "
                             "SentencePiece-style BPE)");
    MetaspaceOptions o = parse_metaspace(c, j, path);
    step.kind = PreTokenizerStep::Metaspace;
    step.literal = o.replacement;
    step.behavior = SplitBehavior::MergedWithNext;
    step.prepend_scheme = o.scheme;
    step.split = o.split;
    out.push_back(std::move(step));
    return;
  }
  unsupported(c, path + ".type", type, {"ByteLevel", "Metaspace", "Split", "Sequence"});
}

// byte_level: the decoder must be ByteLevel (a Sequence of those); else (SentencePiece-style)
// the steps go to `out`.
void parse_decoder(const Ctx& c, const json& j, const std::string& path, bool byte_level, std::vector<DecoderStep>& out,
                   int depth) {
  if (j.is_null())
    c.fail(path, byte_level ? "a ByteLevel decoder is required (got null)"
                            : "a decoder is required (got null), e.g. Sequence[Replace, ByteFallback, Fuse]");
  if (depth > 16) c.fail(path, "nested too deeply");
  std::string type = require_type(c, j, path);
  if (type == "Sequence") {
    const json* list = find_key(j, "decoders");
    if (!list || !list->is_array() || list->empty()) c.fail(path + ".decoders", "expected a non-empty array");
    for (std::size_t i = 0; i < list->size(); ++i)
      parse_decoder(c, (*list)[i], path + ".decoders[" + std::to_string(i) + "]", byte_level, out, depth + 1);
    return;
  }
  static const std::vector<std::string> sp_types = {"ByteFallback", "Fuse", "Metaspace", "Replace", "Strip", "Sequence"};
  if (byte_level) {
    if (type == "ByteLevel") return;
    if (std::find(sp_types.begin(), sp_types.end(), type) != sp_types.end())
      c.fail(path + ".type", "unsupported type '" + type +
                                 "' with a ByteLevel pre-tokenizer (a byte-level tokenizer decodes with ByteLevel)");
    unsupported(c, path + ".type", type, {"ByteLevel", "Sequence"});
  }
  if (type == "ByteLevel")
    c.fail(path + ".type", "a ByteLevel decoder needs a ByteLevel pre-tokenizer (pre_tokenizer has none: this is read "
                           "as a SentencePiece-style BPE)");
  DecoderStep d;
  if (type == "Replace") {
    d.kind = DecoderStep::Replace;
    d.pattern = parse_replace_pattern(c, j, path);
    d.content = require_string_key(c, j, "content", path);
  } else if (type == "ByteFallback") {
    d.kind = DecoderStep::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = DecoderStep::Fuse;
  } else if (type == "Strip") {
    d.kind = DecoderStep::Strip;
    const json* content = find_key(j, "content");
    if (!content) c.fail(path + ".content", "missing");
    d.content = require_char(c, *content, path + ".content", &d.content_cp);
    d.start = require_count(c, j, "start", path);
    d.stop = require_count(c, j, "stop", path);
  } else if (type == "Metaspace") {
    MetaspaceOptions o = parse_metaspace(c, j, path);
    d.kind = DecoderStep::Metaspace;
    d.content = o.replacement;
    d.strip_first = o.scheme != PrependScheme::Never;
  } else {
    unsupported(c, path + ".type", type, sp_types);
  }
  out.push_back(std::move(d));
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view source_name,
                               std::string_view config_json, std::string_view config_source_name,
                               std::string_view chat_template_override) {
  // Every type check is explicit; a json::exception escaping one would still be a bad file,
  // never a crash.
  try {
  Ctx c{std::string(source_name)};
  if (auto deep = json_nesting_error(tokenizer_json)) throw TokenizerError(c.source + ": " + *deep);
  json root;
  try {
    root = json::parse(tokenizer_json.begin(), tokenizer_json.end());
  } catch (const json::parse_error& e) {
    throw TokenizerError(c.source + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) c.fail("(top level)", std::string("expected an object, got ") + type_name(root));

  auto impl = std::make_unique<Impl>();
  impl->source = c.source;
  impl->json_text = std::string(tokenizer_json);
  Impl& m = *impl;

  // model
  const json* model = find_key(root, "model");
  if (!model) c.fail("model", "missing");
  std::string mtype = require_type(c, *model, "model");
  if (mtype != "BPE") unsupported(c, "model.type", mtype, {"BPE"});
  m.byte_fallback = optional_bool(c, *model, "byte_fallback", "model", false);
  m.fuse_unk = optional_bool(c, *model, "fuse_unk", "model", false);
  m.ignore_merges = optional_bool(c, *model, "ignore_merges", "model", false);
  if (const json* d = find_key(*model, "dropout"); d && !d->is_null()) {
    if (!d->is_number()) c.fail("model.dropout", "expected a number or null");
    if (d->get<double>() != 0.0) c.fail("model.dropout", "BPE dropout is not supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = find_key(*model, k);
    if (v && !v->is_null() && !(v->is_string() && v->get<std::string>().empty()))
      c.fail(std::string("model.") + k, "a non-empty value is not supported");
  }

  const json* vocab = find_key(*model, "vocab");
  if (!vocab) c.fail("model.vocab", "missing");
  if (!vocab->is_object()) c.fail("model.vocab", std::string("expected an object {token: id}, got ") + type_name(*vocab));
  int max_id = -1;
  std::vector<std::pair<int, const std::string*>> entries;
  entries.reserve(vocab->size());
  m.token_to_id.reserve(vocab->size() + 64);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    int id = require_id(c, it.value(), "model.vocab[\"" + it.key() + "\"]");
    m.token_to_id.emplace(it.key(), id);
    entries.emplace_back(id, &it.key());
    max_id = std::max(max_id, id);
  }

  // merges
  const json* merges = find_key(*model, "merges");
  std::size_t n_merges = (merges && merges->is_array()) ? merges->size() : 0;
  if (merges && !merges->is_null() && !merges->is_array())
    c.fail("model.merges", std::string("expected an array, got ") + type_name(*merges));
  m.merges.reserve(n_merges);
  // (token_to_id holds only the model vocabulary at this point.)
  auto vocab_id = [&](const std::string& tok, const std::string& path) {
    auto it = m.token_to_id.find(tok);
    if (it == m.token_to_id.end()) c.fail(path, "unknown token '" + tok + "' (not in model.vocab)");
    return it->second;
  };
  for (std::size_t i = 0; i < n_merges; ++i) {
    std::string p = "model.merges[" + std::to_string(i) + "]";
    const json& e = (*merges)[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
        c.fail(p, "expected \"left right\" (two tokens separated by one space), got '" + s + "'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      c.fail(p, "expected \"left right\" or [\"left\", \"right\"]");
    }
    int ia = vocab_id(a, p);
    int ib = vocab_id(b, p);
    int im = vocab_id(a + b, p + " (merged token)");
    m.merges.insert(ia, ib, static_cast<int>(i), im);
  }

  // SentencePiece-style: the model vocabulary's one-character tokens (BPE symbols)
  for (auto& [id, tok] : entries) {
    std::size_t len = 0;
    if (tok->size() > 1 && tok->size() <= 4) {
      std::uint32_t cp = unicode::decode_at(*tok, 0, &len);
      if (len == tok->size()) m.char_id.emplace(cp, id);
    }
  }
  // byte-level alphabet; SentencePiece-style: the <0xXX> byte-fallback tokens (as the Rust crate
  // spells them, format!("<{b:#04X}>")) and the ASCII characters
  for (int b = 0; b < 256; ++b) {
    auto it = m.token_to_id.find(unicode::byte_to_unicode(static_cast<unsigned char>(b)));
    m.byte_id[static_cast<std::size_t>(b)] = it == m.token_to_id.end() ? -1 : it->second;
    static const char* const hex = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
    auto fb = m.token_to_id.find(name);
    m.fallback_id[static_cast<std::size_t>(b)] = fb == m.token_to_id.end() ? -1 : fb->second;
    if (b < 128) {
      auto a = m.token_to_id.find(std::string(1, static_cast<char>(b)));
      m.ascii_id[static_cast<std::size_t>(b)] = a == m.token_to_id.end() ? -1 : a->second;
    }
  }
  if (const json* unk = find_key(*model, "unk_token"); unk && !unk->is_null()) {
    std::string u = require_string(c, *unk, "model.unk_token");
    auto it = m.token_to_id.find(u);
    if (it == m.token_to_id.end()) c.fail("model.unk_token", "'" + u + "' is not in the vocabulary");
    m.unk_id = it->second;
  }

  // added tokens
  const json* added = find_key(root, "added_tokens");
  std::vector<AddedToken> added_list;
  if (added && !added->is_null()) {
    if (!added->is_array()) c.fail("added_tokens", std::string("expected an array, got ") + type_name(*added));
    for (std::size_t i = 0; i < added->size(); ++i) {
      std::string p = "added_tokens[" + std::to_string(i) + "]";
      const json& a = require_object(c, (*added)[i], p);
      AddedToken t;
      const json* id = find_key(a, "id");
      if (!id) c.fail(p + ".id", "missing");
      t.id = require_id(c, *id, p + ".id");
      const json* content = find_key(a, "content");
      if (!content) c.fail(p + ".content", "missing");
      t.content = require_string(c, *content, p + ".content");
      if (t.content.empty()) c.fail(p + ".content", "empty");
      t.special = optional_bool(c, a, "special", p, false);
      t.lstrip = optional_bool(c, a, "lstrip", p, false);
      t.rstrip = optional_bool(c, a, "rstrip", p, false);
      t.single_word = optional_bool(c, a, "single_word", p, false);
      t.normalized = optional_bool(c, a, "normalized", p, !t.special);
      if (t.single_word) c.fail(p + ".single_word", "single_word: true is not supported");
      max_id = std::max(max_id, t.id);
      added_list.push_back(std::move(t));
    }
  }
  if (max_id < 0) c.fail("model.vocab", "the vocabulary is empty");

  m.id_to_token.assign(static_cast<std::size_t>(max_id) + 1, std::string());
  m.id_known.assign(static_cast<std::size_t>(max_id) + 1, 0);
  m.id_is_special.assign(static_cast<std::size_t>(max_id) + 1, 0);
  for (auto& [id, tok] : entries) {
    if (m.id_known[static_cast<std::size_t>(id)])
      c.fail("model.vocab[\"" + *tok + "\"]", "id " + std::to_string(id) + " is also used by '" +
                                                  m.id_to_token[static_cast<std::size_t>(id)] + "' (duplicate id)");
    m.id_known[static_cast<std::size_t>(id)] = 1;
    m.id_to_token[static_cast<std::size_t>(id)] = *tok;
  }
  for (std::size_t i = 0; i < added_list.size(); ++i) {
    const AddedToken& t = added_list[i];
    std::string p = "added_tokens[" + std::to_string(i) + "]";
    auto idx = static_cast<std::size_t>(t.id);
    if (m.id_known[idx] && m.id_to_token[idx] != t.content)
      c.fail(p + ".id", "id " + std::to_string(t.id) + " is already the token '" + m.id_to_token[idx] +
                            "' (duplicate id)");
    auto found = m.token_to_id.find(t.content);
    if (found != m.token_to_id.end() && found->second != t.id && m.id_is_special[static_cast<std::size_t>(found->second)])
      c.fail(p + ".content", "'" + t.content + "' is already added with id " + std::to_string(found->second));
    m.id_known[idx] = 1;
    m.id_to_token[idx] = t.content;
    m.id_is_special[idx] = t.special ? 1 : 2;  // 2: added, not special
    // Until an added token changes it, token_to_id[content] is the model vocabulary's answer.
    if (!m.model_shadowed.count(t.content) && (found == m.token_to_id.end() || found->second != t.id))
      m.model_shadowed.emplace(t.content, found == m.token_to_id.end() ? -1 : found->second);
    m.token_to_id[t.content] = t.id;
  }
  m.added = added_list;

  // normalizer, pre-tokenizer, post-processor, decoder
  if (const json* n = find_key(root, "normalizer")) parse_normalizer(c, *n, "normalizer", m.normalizers, 0);
  m.unicode_normalizers_only = std::all_of(m.normalizers.begin(), m.normalizers.end(),
                                           [](const NormStep& n) { return n.kind == NormStep::Unicode; });
  // A ByteLevel pre-tokenizer makes a byte-level BPE; without one the BPE is SentencePiece-style.
  const json* pt = find_key(root, "pre_tokenizer");
  m.byte_level = pt && has_byte_level(*pt, 0);
  if (pt) parse_pre_tokenizer(c, *pt, "pre_tokenizer", m.pre_steps, m.byte_level, 0);
  m.has_metaspace = std::any_of(m.pre_steps.begin(), m.pre_steps.end(),
                                [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Metaspace; });
  if (m.byte_level && m.byte_fallback)
    c.fail("model.byte_fallback", "byte_fallback: true is not supported with a ByteLevel pre-tokenizer (byte "
                                  "fallback is for SentencePiece-style BPE)");
  const json* dec = find_key(root, "decoder");
  if (!dec) c.fail("decoder", m.byte_level ? "missing (a ByteLevel decoder is required)" : "missing");
  parse_decoder(c, *dec, "decoder", m.byte_level, m.decoder_steps, 0);

  if (const json* pp = find_key(root, "post_processor"); pp && !pp->is_null()) {
    std::function<void(const json&, const std::string&, int)> parse_pp = [&](const json& j, const std::string& path,
                                                                              int depth) {
      if (depth > 16) c.fail(path, "nested too deeply");
      std::string type = require_type(c, j, path);
      if (type == "ByteLevel") return;  // only adjusts offsets
      if (type == "Sequence") {
        const json* list = find_key(j, "processors");
        if (!list || !list->is_array()) c.fail(path + ".processors", "expected an array");
        for (std::size_t i = 0; i < list->size(); ++i)
          parse_pp((*list)[i], path + ".processors[" + std::to_string(i) + "]", depth + 1);
        return;
      }
      if (type != "TemplateProcessing") unsupported(c, path + ".type", type, {"ByteLevel", "TemplateProcessing", "Sequence"});
      const json* single = find_key(j, "single");
      if (!single || !single->is_array()) c.fail(path + ".single", "expected an array");
      const json* specials = find_key(j, "special_tokens");
      bool seen_seq = false;
      for (std::size_t i = 0; i < single->size(); ++i) {
        std::string p = path + ".single[" + std::to_string(i) + "]";
        const json& item = require_object(c, (*single)[i], p);
        if (find_key(item, "Sequence")) {
          if (seen_seq) c.fail(p, "more than one Sequence");
          seen_seq = true;
          continue;
        }
        const json* st = find_key(item, "SpecialToken");
        if (!st || !st->is_object()) c.fail(p, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
        const json* sid = find_key(*st, "id");
        if (!sid) c.fail(p + ".SpecialToken.id", "missing");
        std::string name = require_string(c, *sid, p + ".SpecialToken.id");
        std::vector<int> ids;
        const json* spec = specials && specials->is_object() ? find_key(*specials, name.c_str()) : nullptr;
        if (spec && spec->is_object() && find_key(*spec, "ids") && (*spec)["ids"].is_array()) {
          const json& arr = (*spec)["ids"];
          for (std::size_t k = 0; k < arr.size(); ++k) {
            int id = require_id(c, arr[k], path + ".special_tokens[\"" + name + "\"].ids[" + std::to_string(k) + "]");
            if (id > max_id || !m.id_known[static_cast<std::size_t>(id)])
              c.fail(path + ".special_tokens[\"" + name + "\"].ids[" + std::to_string(k) + "]",
                     "unknown token id " + std::to_string(id));
            ids.push_back(id);
          }
        } else {
          auto it = m.token_to_id.find(name);
          if (it == m.token_to_id.end()) c.fail(p + ".SpecialToken.id", "unknown token '" + name + "'");
          ids.push_back(it->second);
        }
        auto& dst = seen_seq ? m.post_suffix : m.post_prefix;
        dst.insert(dst.end(), ids.begin(), ids.end());
      }
    };
    parse_pp(*pp, "post_processor", 0);
  }

  // decoded bytes per id (ByteLevel decoder: every char through the byte table, else raw;
  // SentencePiece-style: the token string, which is the normalized text it covers)
  m.id_to_bytes.resize(m.id_to_token.size());
  for (std::size_t id = 0; id < m.id_to_token.size(); ++id) {
    const std::string& tok = m.id_to_token[id];
    std::string bytes;
    bool ok = m.byte_level && unicode::byte_level_decode(tok, bytes);
    m.id_to_bytes[id] = ok ? std::move(bytes) : tok;
  }

  // added-token matchers
  std::size_t longest_added = 0;  // the most text one added token matches
  for (std::size_t i = 0; i < m.added.size(); ++i) {
    const AddedToken& t = m.added[i];
    if (!t.normalized || m.normalizers.empty()) {
      longest_added = std::max(longest_added, t.content.size());
      m.raw_matcher.add(t.content, static_cast<int>(i));
    } else {
      std::string norm = apply_normalizers(m.normalizers, t.content);
      longest_added = std::max(longest_added, norm.size());
      m.normalized_matcher.add(norm, static_cast<int>(i));
    }
  }
  m.raw_matcher.finish();
  m.normalized_matcher.finish();

  // Tokenizer::max_bytes_per_token. Every byte of the normalized text ends up in exactly one
  // token: a vocabulary token's decoded bytes (SentencePiece-style: its string), an added token's
  // (normalized) content, one byte of a byte-fallback token, or an unknown byte's (character's)
  // unk; unless a step drops text, or fuse_unk lets one unk stand for any run of unknown
  // symbols: then no bound holds.
  bool drops_text = std::any_of(m.added.begin(), m.added.end(), [](const AddedToken& t) { return t.lstrip || t.rstrip; });
  for (const PreTokenizerStep& step : m.pre_steps)
    drops_text = drops_text || (step.kind == PreTokenizerStep::Split && step.behavior == SplitBehavior::Removed);
  std::size_t unk_covers = 0;  // the most bytes one unk stands for
  if (m.byte_level) {
    if (std::any_of(m.byte_id.begin(), m.byte_id.end(), [](int id) { return id < 0; })) {
      drops_text = drops_text || !m.unk_id || m.fuse_unk;
      unk_covers = 1;
    }
  } else if (!m.byte_fallback ||
             std::any_of(m.fallback_id.begin(), m.fallback_id.end(), [](int id) { return id < 0; })) {
    // Some character may be missing from the vocabulary with no byte fallback for it.
    drops_text = drops_text || !m.unk_id || m.fuse_unk;
    unk_covers = 4;
  }
  // How much normalization can shrink the text: Unicode normalization by at most 4x (NFKC maps a
  // 4-byte mathematical letter to one ASCII byte; NFC composes Hangul L+V+T, 9 bytes, into 3), 8
  // leaves a margin; a literal Replace by |pattern| / |content|; a regex Replace or one with an
  // empty content, without bound. Prepend and Metaspace only add text.
  std::size_t shrink =
      std::any_of(m.normalizers.begin(), m.normalizers.end(), [](const NormStep& n) { return n.kind == NormStep::Unicode; })
          ? 8
          : 1;
  for (const NormStep& n : m.normalizers) {
    if (n.kind != NormStep::Replace) continue;
    if (n.pattern.regex || n.text.empty()) {
      drops_text = true;
      break;
    }
    const std::size_t factor = (n.pattern.literal.size() + n.text.size() - 1) / n.text.size();
    shrink *= std::max<std::size_t>(1, factor);
    if (shrink > (std::size_t{1} << 20)) {  // no useful bound (and no overflow)
      drops_text = true;
      break;
    }
  }
  if (!drops_text) {
    std::size_t longest = std::max<std::size_t>({1, longest_added, unk_covers});
    for (const std::string& bytes : m.id_to_bytes) longest = std::max(longest, bytes.size());
    m.max_bytes_per_token = shrink * longest;
  }

  // tokenizer_config.json
  if (!config_json.empty()) {
    Ctx cc{std::string(config_source_name)};
    if (auto deep = json_nesting_error(config_json)) throw TokenizerError(cc.source + ": " + *deep);
    json cfg;
    try {
      cfg = json::parse(config_json.begin(), config_json.end());
    } catch (const json::parse_error& e) {
      throw TokenizerError(cc.source + ": invalid JSON: " + e.what());
    }
    if (!cfg.is_object()) cc.fail("(top level)", std::string("expected an object, got ") + type_name(cfg));
    auto special = [&](const char* key, std::optional<std::string>& name, std::optional<int>& id) {
      const json* v = find_key(cfg, key);
      if (!v || v->is_null()) return;
      std::string content;
      if (v->is_string()) {
        content = v->get<std::string>();
      } else if (v->is_object() && find_key(*v, "content")) {
        content = require_string(cc, (*v)["content"], std::string(key) + ".content");
      } else {
        cc.fail(key, std::string("expected a string or {\"content\": ...}, got ") + type_name(*v));
      }
      auto it = m.token_to_id.find(content);
      if (it == m.token_to_id.end()) cc.fail(key, "'" + content + "' is not a token of " + c.source);
      name = content;
      id = it->second;
    };
    special("eos_token", m.eos, m.eos_id);
    special("pad_token", m.pad, m.pad_id);
    special("bos_token", m.bos, m.bos_id);
    // Every special token string the config names, as transformers passes them to chat
    // templates (special_tokens_map); these need not be in the vocabulary.
    auto token_string = [&](const json& v, const std::string& key) -> std::optional<std::string> {
      if (v.is_null()) return std::nullopt;
      if (v.is_string()) return v.get<std::string>();
      if (v.is_object() && find_key(v, "content")) return require_string(cc, v["content"], key + ".content");
      cc.fail(key, std::string("expected a string or {\"content\": ...}, got ") + type_name(v));
    };
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
      if (const json* v = find_key(cfg, key))
        if (auto s = token_string(*v, key)) m.special_token_strings.emplace_back(key, *s);
    if (const json* v = find_key(cfg, "additional_special_tokens"); v && !v->is_null()) {
      if (!v->is_array()) cc.fail("additional_special_tokens", std::string("expected a list, got ") + type_name(*v));
      for (std::size_t i = 0; i < v->size(); ++i)
        if (auto s = token_string((*v)[i], "additional_special_tokens[" + std::to_string(i) + "]"))
          m.additional_special_tokens.push_back(*s);
    }
    // chat_template: a string, or a list of {"name", "template"} (transformers picks "default",
    // or "tool_use" when tools are passed).
    if (const json* ct = find_key(cfg, "chat_template"); ct && !ct->is_null()) {
      if (ct->is_string()) {
        m.chat_templates.push_back({"default", ct->get<std::string>()});
      } else if (ct->is_array()) {
        for (std::size_t i = 0; i < ct->size(); ++i) {
          const json& e = (*ct)[i];
          const std::string at = "chat_template[" + std::to_string(i) + "]";
          require_object(cc, e, at);
          const json* name = find_key(e, "name");
          const json* tmpl = find_key(e, "template");
          if (!name) cc.fail(at + ".name", "missing");
          if (!tmpl) cc.fail(at + ".template", "missing");
          m.chat_templates.push_back({require_string(cc, *name, at + ".name"), require_string(cc, *tmpl, at + ".template")});
        }
      } else {
        cc.fail("chat_template", std::string("expected a string or a list of {\"name\", \"template\"}, got ") +
                                     type_name(*ct));
      }
    }
  }
  if (!chat_template_override.empty()) {
    auto def = std::find_if(m.chat_templates.begin(), m.chat_templates.end(),
                            [](const NamedChatTemplate& t) { return t.name == "default"; });
    if (def != m.chat_templates.end()) def->source = std::string(chat_template_override);
    else m.chat_templates.insert(m.chat_templates.begin(), {"default", std::string(chat_template_override)});
  }
  for (const NamedChatTemplate& t : m.chat_templates)
    if (t.name == "default") m.chat_template = t.source;
  return Tokenizer(std::move(impl));
  } catch (const json::exception& e) {
    throw TokenizerError(std::string(source_name) + " (or " + std::string(config_source_name) + "): " + e.what());
  }
}

Tokenizer Tokenizer::load(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  fs::path p(dir_or_file);
  std::error_code ec;
  fs::path json_path;
  if (fs::is_directory(p, ec)) {
    json_path = p / "tokenizer.json";
    if (!fs::exists(json_path, ec))
      throw TokenizerError(dir_or_file + ": no tokenizer.json in this folder");
  } else {
    if (!fs::exists(p, ec)) throw TokenizerError(dir_or_file + ": no such file or folder");
    json_path = p;
  }
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  // transformers >= 4.43 saves the template as chat_template.jinja, which wins over
  // tokenizer_config.json's chat_template when both exist.
  const fs::path jinja_path = json_path.parent_path() / "chat_template.jinja";
  std::string text, config, jinja;
  try {
    text = read_file(json_path.string());
    if (fs::exists(config_path, ec)) config = read_file(config_path.string());
    if (fs::exists(jinja_path, ec)) jinja = read_file(jinja_path.string());
  } catch (const TokenizerError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw TokenizerError(e.what());
  }
  Tokenizer t = from_json(text, json_path.string(), config, config_path.string(), jinja);
  t.impl_->chat_template_origin = !jinja.empty() ? jinja_path.string()
                                  : !t.impl_->chat_templates.empty() ? config_path.string() + ": chat_template"
                                                                     : "";
  return t;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::encode_into(std::string_view text, std::vector<int>& out, const EncodeOptions& options) const {
  std::size_t bad = unicode::first_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw TokenizerError("encode: the text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  if (options.add_special_tokens) out.insert(out.end(), impl_->post_prefix.begin(), impl_->post_prefix.end());
  if (impl_->raw_matcher.empty())
    impl_->encode_segment(text, out, true);
  else
    impl_->encode_with_added(text, impl_->raw_matcher, true, out, true);
  if (options.add_special_tokens) out.insert(out.end(), impl_->post_suffix.begin(), impl_->post_suffix.end());
}

std::vector<int> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, options);
  return out;
}

namespace {

// The byte a "<0xXX>" token stands for, as the Rust crate's ByteFallback decoder reads it
// (u8::from_str_radix of the two characters, which also takes "+X").
std::optional<unsigned char> byte_fallback_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') {
    int lo = hex(token[4]);
    if (lo < 0) return std::nullopt;
    return static_cast<unsigned char>(lo);
  }
  int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

}  // namespace

std::string Tokenizer::Impl::decode_chain(const std::vector<int>& ids, const DecodeOptions& options, bool raw) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= id_known.size() || !id_known[static_cast<std::size_t>(id)])
      throw TokenizerError("decode: unknown token id " + std::to_string(id) + " (vocabulary size " +
                           std::to_string(id_known.size()) + ")");
    if (options.skip_special_tokens && id_is_special[static_cast<std::size_t>(id)] == 1) continue;
    toks.push_back(id_to_token[static_cast<std::size_t>(id)]);
  }
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  for (const DecoderStep& d : decoder_steps) {
    switch (d.kind) {
      case DecoderStep::Replace:
        for (std::string& t : toks) t = replace_all(t, d.pattern, d.content);
        break;
      case DecoderStep::ByteFallback: {
        // Runs of <0xXX> tokens become their bytes: one token when they are well-formed UTF-8,
        // else one U+FFFD per byte (the Rust crate's rule; raw: the bytes themselves, one token
        // each, so that later steps see as many tokens).
        std::vector<std::string> next;
        next.reserve(toks.size());
        std::string run;
        auto flush = [&] {
          if (run.empty()) return;
          if (unicode::first_invalid_utf8(run) == std::string::npos)
            next.push_back(run);
          else
            for (char b : run) next.push_back(raw ? std::string(1, b) : kReplacement);
          run.clear();
        };
        for (std::string& t : toks) {
          if (auto b = byte_fallback_value(t)) {
            run += static_cast<char>(*b);
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        toks.swap(next);
        break;
      }
      case DecoderStep::Fuse: {
        std::string all;
        for (const std::string& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Strip:
        // Up to `start` leading and `stop` trailing copies of the character (an ill-formed byte
        // counts as U+FFFD); a token stripped from both ends past its middle becomes empty.
        for (std::string& t : toks) {
          std::vector<std::size_t> at;  // character offsets, then the end
          for (std::size_t i = 0, len = 1; i < t.size(); i += len) {
            at.push_back(i);
            unicode::decode_at(t, i, &len);
          }
          const std::size_t n = at.size();
          at.push_back(t.size());
          std::size_t start_cut = 0, stop_cut = n;
          for (std::size_t i = 0; i < std::min(d.start, n) && unicode::decode_at(t, at[i]) == d.content_cp; ++i)
            start_cut = i + 1;
          for (std::size_t i = 0; i < std::min(d.stop, n) && unicode::decode_at(t, at[n - 1 - i]) == d.content_cp; ++i)
            stop_cut = n - 1 - i;
          t = stop_cut <= start_cut ? std::string() : t.substr(at[start_cut], at[stop_cut] - at[start_cut]);
        }
        break;
      case DecoderStep::Metaspace:
        // Every replacement becomes a space, except the leading one of the first token unless
        // prepend_scheme is "never" (the JavaScript port's rule and SentencePiece's; the Rust
        // crate drops every replacement of the first token, a known bug).
        for (std::size_t i = 0; i < toks.size(); ++i) {
          std::string& t = toks[i];
          std::size_t from = 0;
          if (i == 0 && d.strip_first && t.compare(0, d.content.size(), d.content) == 0) from = d.content.size();
          std::string out;
          out.reserve(t.size());
          for (std::size_t p = from; p < t.size();) {
            if (t.compare(p, d.content.size(), d.content) == 0) {
              out += ' ';
              p += d.content.size();
            } else {
              out += t[p++];
            }
          }
          t.swap(out);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : toks) out += t;
  return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int>& ids, const DecodeOptions& options) const {
  if (!impl_->byte_level) return impl_->decode_chain(ids, options, true);
  std::string out;
  for (int id : ids) {
    if (id < 0 || id >= vocab_size() || !impl_->id_known[static_cast<std::size_t>(id)])
      throw TokenizerError("decode: unknown token id " + std::to_string(id) + " (vocabulary size " +
                           std::to_string(vocab_size()) + ")");
    if (options.skip_special_tokens && impl_->id_is_special[static_cast<std::size_t>(id)] == 1) continue;
    out += impl_->id_to_bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids, const DecodeOptions& options) const {
  // SentencePiece-style: the decoders' text is valid UTF-8 already (ByteFallback replaced what
  // was not); to_valid_utf8 then returns it unchanged.
  if (!impl_->byte_level) return unicode::to_valid_utf8(impl_->decode_chain(ids, options, false));
  return unicode::to_valid_utf8(decode_bytes(ids, options));
}

std::optional<int> Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(std::string(token));
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::id_to_token(int id) const {
  if (id < 0 || id >= vocab_size() || !impl_->id_known[static_cast<std::size_t>(id)])
    throw TokenizerError("unknown token id " + std::to_string(id) + " (vocabulary size " + std::to_string(vocab_size()) + ")");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }
std::size_t Tokenizer::max_bytes_per_token() const { return impl_->max_bytes_per_token; }

std::string decode_bytes_appended(const Tokenizer& tokenizer, const std::vector<int>& ids, const DecodeOptions& options) {
  // Long enough that the window's first token is never the one a decoder special-cases at the
  // start of the whole sequence unless it is (a window starting at id 0).
  constexpr std::size_t kWindow = 8;
  if (ids.empty()) return "";
  const int vocab = tokenizer.vocab_size();
  const int last = ids.back();
  if (last < 0 || last >= vocab) return "";
  std::vector<int> window;
  for (std::size_t i = ids.size() > kWindow ? ids.size() - kWindow : 0; i + 1 < ids.size(); ++i)
    if (ids[i] >= 0 && ids[i] < vocab) window.push_back(ids[i]);
  const std::string before = window.empty() ? std::string() : tokenizer.decode_bytes(window, options);
  window.push_back(last);
  const std::string after = tokenizer.decode_bytes(window, options);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  return tokenizer.decode_bytes({last}, options);  // a decoder that rewrites earlier text
}

std::optional<std::vector<int>> encode_within(const Tokenizer& tokenizer, std::string_view text, std::size_t max_tokens) {
  const std::size_t per_token = tokenizer.max_bytes_per_token();
  // Invalid UTF-8 goes on to encode(), whose error names the offset.
  if (per_token > 0 && text.size() / per_token > max_tokens && unicode::first_invalid_utf8(text) == std::string_view::npos)
    return std::nullopt;
  std::vector<int> ids = tokenizer.encode(text);
  if (ids.size() > max_tokens) return std::nullopt;
  return ids;
}
std::optional<int> Tokenizer::eos_id() const { return impl_->eos_id; }
std::optional<int> Tokenizer::pad_id() const { return impl_->pad_id; }
std::optional<int> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<std::string> Tokenizer::eos_token() const { return impl_->eos; }
std::optional<std::string> Tokenizer::pad_token() const { return impl_->pad; }
std::optional<std::string> Tokenizer::bos_token() const { return impl_->bos; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::optional<std::string>& Tokenizer::chat_template_source() const { return impl_->chat_template; }
const std::vector<NamedChatTemplate>& Tokenizer::chat_templates() const { return impl_->chat_templates; }
const std::string& Tokenizer::chat_template_origin() const { return impl_->chat_template_origin; }
const std::vector<std::pair<std::string, std::string>>& Tokenizer::special_token_strings() const {
  return impl_->special_token_strings;
}
const std::vector<std::string>& Tokenizer::additional_special_tokens() const { return impl_->additional_special_tokens; }
const std::string& Tokenizer::json_text() const { return impl_->json_text; }
void Tokenizer::set_cache_enabled(bool enabled) {
  impl_->cache_enabled.store(enabled);
  for (auto& s : impl_->cache) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.map.clear();
  }
}

}  // namespace grpo::core
