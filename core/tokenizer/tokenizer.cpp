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

struct PreTokenizerStep {
  enum Kind { Split, ByteLevel } kind = Split;
  std::shared_ptr<Regex> regex;  // Split with a Regex pattern, or ByteLevel with use_regex
  std::string literal;           // Split with a String pattern
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
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
  void add(std::string text, int index) {
    if (text.empty()) return;
    unsigned char b = static_cast<unsigned char>(text[0]);
    by_first_[b].push_back(Pattern{std::move(text), index});
  }
  void finish() {
    for (auto& v : by_first_)
      std::stable_sort(v.begin(), v.end(), [](const Pattern& a, const Pattern& b) { return a.text.size() > b.text.size(); });
  }
  bool empty() const {
    for (auto& v : by_first_)
      if (!v.empty()) return false;
    return true;
  }
  // First match at or after `from`: returns (start, pattern) or start == npos.
  std::pair<std::size_t, const Pattern*> find(std::string_view text, std::size_t from) const {
    for (std::size_t i = from; i < text.size(); ++i) {
      const auto& cands = by_first_[static_cast<unsigned char>(text[i])];
      for (const Pattern& p : cands)
        if (text.size() - i >= p.text.size() && std::memcmp(text.data() + i, p.text.data(), p.text.size()) == 0)
          return {i, &p};
    }
    return {std::string_view::npos, nullptr};
  }

 private:
  std::array<std::vector<Pattern>, 256> by_first_;
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
  std::vector<NormKind> normalizers;

  // pre-tokenizer
  std::vector<PreTokenizerStep> pre_steps;

  // model
  std::array<int, 256> byte_id{};  // id of each byte's byte-level symbol, -1 if absent
  MergeTable merges;
  bool ignore_merges = false;
  std::optional<int> unk_id;

  // post-processor (TemplateProcessing single)
  std::vector<int> post_prefix, post_suffix;

  // added tokens
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // normalized == false
  AddedTokenMatcher normalized_matcher;  // normalized == true (content normalized)

  // config
  std::optional<std::string> eos, pad, bos;
  std::optional<int> eos_id, pad_id, bos_id;
  std::optional<std::string> chat_template;

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

  void encode_segment(std::string_view text, std::vector<int>& out) const;
  void encode_normalized(std::string_view text, std::vector<int>& out) const;
  void pre_tokenize(std::string_view text, std::deque<std::string>& arena, std::vector<std::string_view>& pieces) const;
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  void bpe(std::string_view piece, std::vector<int>& out) const;
  void encode_with_added(std::string_view text, const AddedTokenMatcher& matcher, bool raw_level,
                         std::vector<int>& out) const;
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
                                        std::vector<int>& out) const {
  split_added(
      text, matcher, added,
      [&](std::string_view seg) {
        if (raw_level)
          encode_segment(seg, out);
        else
          encode_normalized(seg, out);
      },
      [&](int index) { out.push_back(added[static_cast<std::size_t>(index)].id); });
}

void Tokenizer::Impl::encode_segment(std::string_view text, std::vector<int>& out) const {
  if (normalizers.empty() || is_ascii(text)) {
    if (normalized_matcher.empty())
      encode_normalized(text, out);
    else
      encode_with_added(text, normalized_matcher, false, out);
    return;
  }
  std::string norm(text);
  for (NormKind k : normalizers) norm = utf8proc_normalize(norm, k);
  if (normalized_matcher.empty())
    encode_normalized(norm, out);
  else
    encode_with_added(norm, normalized_matcher, false, out);
}

void Tokenizer::Impl::pre_tokenize(std::string_view text, std::deque<std::string>& arena,
                                   std::vector<std::string_view>& pieces) const {
  pieces.clear();
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : pre_steps) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.kind == PreTokenizerStep::ByteLevel) {
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
          arena.push_back(" " + std::string(piece));
          piece = arena.back();
        }
        if (!step.regex) {
          next.push_back(piece);
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
        if (e > s) next.push_back(piece.substr(s, e - s));
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
  }
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int>& out) const {
  if (text.empty()) return;
  std::deque<std::string> arena;
  std::vector<std::string_view> pieces;
  pre_tokenize(text, arena, pieces);
  for (std::string_view p : pieces) encode_piece(p, out);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (piece.size() == 1) {  // single byte: no merges possible
    int id = byte_id[static_cast<unsigned char>(piece[0])];
    if (id >= 0)
      out.push_back(id);
    else if (unk_id)
      out.push_back(*unk_id);
    return;
  }
  if (!cache_enabled.load(std::memory_order_relaxed) || piece.size() > kMaxCachedPiece) {
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

// Byte-pair merging as in the Rust crate's Word::merge_all: repeatedly apply the lowest-rank
// merge (leftmost first among equal ranks), skipping stale queue entries.
void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int>& out) const {
  if (ignore_merges) {
    std::string bl;
    bl.reserve(piece.size() * 2);
    for (unsigned char b : piece) bl += unicode::byte_to_unicode(b);
    auto it = token_to_id.find(bl);
    if (it != token_to_id.end()) {
      out.push_back(it->second);
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
  for (unsigned char b : piece) {
    int id = byte_id[b];
    if (id < 0) {
      if (!unk_id) continue;  // no vocabulary entry and no unk token: the byte is dropped
      id = *unk_id;
    }
    int n = static_cast<int>(syms.size());
    syms.push_back(Sym{id, n - 1, n + 1, true});
  }
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

void parse_normalizer(const Ctx& c, const json& j, const std::string& path, std::vector<NormKind>& out, int depth) {
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
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    out.push_back(norm_kind(type));
    return;
  }
  unsupported(c, path + ".type", type, {"NFC", "NFD", "NFKC", "NFKD", "Sequence"});
}

void parse_pre_tokenizer(const Ctx& c, const json& j, const std::string& path, std::vector<PreTokenizerStep>& out,
                         int depth) {
  if (j.is_null()) return;
  if (depth > 16) c.fail(path, "nested too deeply");
  std::string type = require_type(c, j, path);
  if (type == "Sequence") {
    const json* list = find_key(j, "pretokenizers");
    if (!list || !list->is_array()) c.fail(path + ".pretokenizers", "expected an array");
    for (std::size_t i = 0; i < list->size(); ++i)
      parse_pre_tokenizer(c, (*list)[i], path + ".pretokenizers[" + std::to_string(i) + "]", out, depth + 1);
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
  unsupported(c, path + ".type", type, {"ByteLevel", "Split", "Sequence"});
}

void check_decoder(const Ctx& c, const json& j, const std::string& path, int depth) {
  if (j.is_null()) c.fail(path, "a ByteLevel decoder is required (got null)");
  if (depth > 16) c.fail(path, "nested too deeply");
  std::string type = require_type(c, j, path);
  if (type == "Sequence") {
    const json* list = find_key(j, "decoders");
    if (!list || !list->is_array() || list->empty()) c.fail(path + ".decoders", "expected a non-empty array");
    for (std::size_t i = 0; i < list->size(); ++i)
      check_decoder(c, (*list)[i], path + ".decoders[" + std::to_string(i) + "]", depth + 1);
    return;
  }
  if (type != "ByteLevel") unsupported(c, path + ".type", type, {"ByteLevel", "Sequence"});
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view source_name,
                               std::string_view config_json, std::string_view config_source_name) {
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
  if (optional_bool(c, *model, "byte_fallback", "model", false))
    c.fail("model.byte_fallback", "byte_fallback: true is not supported (byte-level BPE only)");
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

  // byte-level alphabet
  for (int b = 0; b < 256; ++b) {
    auto it = m.token_to_id.find(unicode::byte_to_unicode(static_cast<unsigned char>(b)));
    m.byte_id[static_cast<std::size_t>(b)] = it == m.token_to_id.end() ? -1 : it->second;
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
    m.token_to_id[t.content] = t.id;
  }
  m.added = added_list;

  // normalizer, pre-tokenizer, post-processor, decoder
  if (const json* n = find_key(root, "normalizer")) parse_normalizer(c, *n, "normalizer", m.normalizers, 0);
  if (const json* pt = find_key(root, "pre_tokenizer")) parse_pre_tokenizer(c, *pt, "pre_tokenizer", m.pre_steps, 0);
  const json* dec = find_key(root, "decoder");
  if (!dec) c.fail("decoder", "missing (a ByteLevel decoder is required)");
  check_decoder(c, *dec, "decoder", 0);

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

  // decoded bytes per id (ByteLevel decoder: every char through the byte table, else raw)
  m.id_to_bytes.resize(m.id_to_token.size());
  for (std::size_t id = 0; id < m.id_to_token.size(); ++id) {
    const std::string& tok = m.id_to_token[id];
    std::string bytes;
    bool ok = unicode::byte_level_decode(tok, bytes);
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
      std::string norm = t.content;
      for (NormKind k : m.normalizers) norm = utf8proc_normalize(norm, k);
      longest_added = std::max(longest_added, norm.size());
      m.normalized_matcher.add(norm, static_cast<int>(i));
    }
  }
  m.raw_matcher.finish();
  m.normalized_matcher.finish();

  // Tokenizer::max_bytes_per_token. Every byte of the normalized text ends up in exactly one
  // token: a vocabulary token's decoded bytes, an added token's (normalized) content, or an
  // unknown byte's unk; unless a step drops text: then no bound holds.
  bool drops_text = std::any_of(m.added.begin(), m.added.end(), [](const AddedToken& t) { return t.lstrip || t.rstrip; });
  for (const PreTokenizerStep& step : m.pre_steps)
    drops_text = drops_text || (step.kind == PreTokenizerStep::Split && step.behavior == SplitBehavior::Removed);
  if (!m.unk_id)
    for (int id : m.byte_id) drops_text = drops_text || id < 0;
  if (!drops_text) {
    std::size_t longest = std::max<std::size_t>(1, longest_added);
    for (const std::string& bytes : m.id_to_bytes) longest = std::max(longest, bytes.size());
    // Normalization shrinks UTF-8 by at most 4x (NFKC maps a 4-byte mathematical letter to one
    // ASCII byte; NFC composes Hangul L+V+T, 9 bytes, into 3); 8 leaves a margin.
    m.max_bytes_per_token = m.normalizers.empty() ? longest : 8 * longest;
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
    if (const json* ct = find_key(cfg, "chat_template"); ct && !ct->is_null()) {
      if (ct->is_string()) {
        m.chat_template = ct->get<std::string>();
      } else if (ct->is_array()) {
        for (const json& e : *ct)
          if (e.is_object() && find_key(e, "name") && e["name"] == "default" && find_key(e, "template") &&
              e["template"].is_string())
            m.chat_template = e["template"].get<std::string>();
      } else {
        cc.fail("chat_template", std::string("expected a string, got ") + type_name(*ct));
      }
    }
  }
  return Tokenizer(std::move(impl));
  } catch (const json::exception& e) {
    throw TokenizerError(std::string(source_name) + " (or " + std::string(config_source_name) + "): " + e.what());
  }
}

Tokenizer Tokenizer::load(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  fs::path p(dir_or_file);
  std::error_code ec;
  fs::path json_path, config_path;
  if (fs::is_directory(p, ec)) {
    json_path = p / "tokenizer.json";
    config_path = p / "tokenizer_config.json";
    if (!fs::exists(json_path, ec))
      throw TokenizerError(dir_or_file + ": no tokenizer.json in this folder");
  } else {
    if (!fs::exists(p, ec)) throw TokenizerError(dir_or_file + ": no such file or folder");
    json_path = p;
    config_path = p.parent_path() / "tokenizer_config.json";
  }
  std::string text, config;
  try {
    text = read_file(json_path.string());
    if (fs::exists(config_path, ec)) config = read_file(config_path.string());
  } catch (const TokenizerError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw TokenizerError(e.what());
  }
  return from_json(text, json_path.string(), config, config_path.string());
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
    impl_->encode_segment(text, out);
  else
    impl_->encode_with_added(text, impl_->raw_matcher, true, out);
  if (options.add_special_tokens) out.insert(out.end(), impl_->post_suffix.begin(), impl_->post_suffix.end());
}

std::vector<int> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, options);
  return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int>& ids, const DecodeOptions& options) const {
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
const std::string& Tokenizer::json_text() const { return impl_->json_text; }
void Tokenizer::set_cache_enabled(bool enabled) {
  impl_->cache_enabled.store(enabled);
  for (auto& s : impl_->cache) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.map.clear();
  }
}

}  // namespace grpo::core
