// format: the DeepSeek-R1 / open-instruct format reward. 1.0 when the completion matches a
// regex (default: R1 `<think>...</think><answer>...</answer>`), else 0.0. See
// docs/verifiers.md for the rule, the options and the details fields.
//
// Reference (open-instruct, grpo_fast.py / the R1 format reward, see shared/REFERENCE.md
// "Rewards"): pattern r".*?</think>\s*<answer>.*?</answer>", re.match(pattern, text, re.DOTALL).
// re.match anchors at the start only: text after </answer> still matches.
//
// The regex engine is PCRE2 (8-bit, UTF mode; invalid UTF-8 subjects matched byte-wise), not std::regex:
//  - PCRE2's syntax is Python's for everything the format patterns use (lazy quantifiers,
//    \s, inline flags such as (?i)), and it has DOTALL (PCRE2_DOTALL); ECMAScript has none.
//  - libstdc++'s std::regex executor recurses once per character for `.*`-style loops and
//    overflows the stack on long completions (tens of KB): an uncatchable crash inside the
//    trainer's thread pool. PCRE2 >= 10.30 keeps its backtracking state on the heap, bounded
//    by a match limit and a heap limit; hitting either scores 0 with the reason.
// Depends only on the SDK, the C++ standard library, nlohmann-json and libpcre2-8: no LibTorch.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"

namespace {

namespace sdk = ::grpo::sdk;

constexpr const char* kR1Pattern = R"(.*?</think>\s*<answer>.*?</answer>)";
constexpr std::size_t kMaxEchoBytes = 200;

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

enum class Mode { kMatch, kSearch, kFullmatch };

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* m) const { pcre2_match_context_free(m); }
};

class FormatVerifier final : public sdk::Verifier {
 public:
  // Every option is read here: the host rejects any key the constructor did not read.
  explicit FormatVerifier(const sdk::ConfigView& cfg)
      : pattern_(cfg.get_string("pattern", kR1Pattern)),
        mode_(parse_mode(cfg.get_choice("mode", "match", {"match", "search", "fullmatch"}))),
        mode_name_(cfg.get_choice("mode", "match", {"match", "search", "fullmatch"})),
        dotall_(cfg.get_bool("dotall", true)),
        ignore_case_(cfg.get_bool("ignore_case", false)),
        is_default_pattern_(pattern_ == kR1Pattern) {
    const std::int64_t match_limit = cfg.get_int_at_least("match_limit", 10'000'000, 1);

    std::uint32_t flags = 0;
    if (dotall_) flags |= PCRE2_DOTALL;
    if (ignore_case_) flags |= PCRE2_CASELESS;
    if (mode_ == Mode::kMatch || mode_ == Mode::kFullmatch) flags |= PCRE2_ANCHORED;
    if (mode_ == Mode::kFullmatch) flags |= PCRE2_ENDANCHORED;
    code_.reset(compile(cfg, flags | PCRE2_UTF));
    // Invalid UTF-8 (a generation cut mid-character) is matched byte-wise by a second,
    // non-UTF compilation: in PCRE2's invalid-UTF mode no pattern item may consume an
    // invalid sequence, so `.*?` could not cross it.
    bytes_code_.reset(compile(cfg, flags));
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    if (ctx == nullptr) throw std::bad_alloc();
    ctx_.reset(ctx);
    pcre2_set_match_limit(ctx, static_cast<std::uint32_t>(std::min<std::int64_t>(match_limit, UINT32_MAX)));
    pcre2_set_heap_limit(ctx, 64 * 1024);  // KiB: 64 MiB of backtracking state per call at most
  }

  pcre2_code* compile(const sdk::ConfigView& cfg, std::uint32_t flags) const {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), flags, &err,
                                     &err_offset, nullptr);
    if (code == nullptr) {
      cfg.fail("pattern", "invalid regular expression '" + grpo::sdk::clip_utf8(pattern_, kMaxEchoBytes) + "': " +
                              pcre2_message(err) + " at offset " + std::to_string(err_offset));
    }
    return code;
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    nlohmann::ordered_json details;
    sdk::VerifierResult result;
    result.score = 0.0;
    details["mode"] = mode_name_;
    if (!is_default_pattern_) details["pattern"] = grpo::sdk::clip_utf8(pattern_, kMaxEchoBytes);

    // Per call: pcre2_code is shared read-only across threads, match data is not.
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    if (!md) {
      details["matched"] = false;
      details["reason"] = "out of memory creating PCRE2 match data";
      result.details = dump(details);
      return result;
    }
    const std::string_view text = input.completion;
    int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md.get(),
                         ctx_.get());
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      details["invalid_utf8"] = true;  // matched byte-wise
      rc = pcre2_match(bytes_code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md.get(),
                       ctx_.get());
    }
    if (rc >= 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      result.score = 1.0;
      details["matched"] = true;
      details["match_begin"] = static_cast<std::uint64_t>(ov[0]);
      details["match_end"] = static_cast<std::uint64_t>(ov[1]);
      // Bytes after the match: kept by re.match/search semantics (score still 1).
      details["trailing_bytes"] = static_cast<std::uint64_t>(text.size() - ov[1]);
      result.details = dump(details);
      return result;
    }
    details["matched"] = false;
    if (rc == PCRE2_ERROR_NOMATCH) {
      details["reason"] = is_default_pattern_ ? r1_diagnosis(text) : std::string("the completion does not match the pattern");
    } else if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
      details["reason"] = "regex resource limit hit (" + pcre2_message(rc) + "): scored 0";
    } else {
      details["reason"] = "regex match error: " + pcre2_message(rc);
    }
    result.details = dump(details);
    return result;
  }

 private:
  static Mode parse_mode(const std::string& s) {
    if (s == "search") return Mode::kSearch;
    if (s == "fullmatch") return Mode::kFullmatch;
    return Mode::kMatch;
  }

  // Why the default R1 pattern missed, in the order the pattern needs its parts.
  std::string r1_diagnosis(std::string_view text) const {
    const std::size_t think_close = text.find("</think>");
    if (think_close == std::string_view::npos) return "no </think> in the completion";
    if (text.find("<answer>", think_close) == std::string_view::npos)
      return text.find("<answer>") != std::string_view::npos ? "<answer> appears only before </think>"
                                                             : "no <answer> in the completion";
    const std::size_t last = text.rfind("</answer>");
    if (last == std::string_view::npos || last < think_close) return "no </answer> after </think><answer>";
    if (mode_ == Mode::kFullmatch && last + 9 < text.size()) return "text after the final </answer> (mode fullmatch)";
    return "no </think> directly followed (whitespace aside) by <answer>...</answer>";
  }

  std::string pattern_;
  Mode mode_;
  std::string mode_name_;
  bool dotall_;
  bool ignore_case_;
  bool is_default_pattern_;
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
  std::unique_ptr<pcre2_code, CodeDeleter> bytes_code_;
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> ctx_;
};

}  // namespace

GRPO_PLUGIN("format", "1.0.0", "R1 <think>...</think><answer>...</answer> format reward (configurable regex)") {
  registrar.add_verifier<FormatVerifier>(
      "format", "1 if the completion matches the format regex (default: R1 think/answer, re.match + DOTALL), else 0");
}
