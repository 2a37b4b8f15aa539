// length: open-instruct's length rewards, two components in one plugin.
//
//   max_length        score = 1 - |len - desired| / normalizer
//   up_to_max_length  score = 1                              if len < desired
//                             1 - (len - desired) / normalizer otherwise
//
// Reference: open-instruct open_instruct/ground_truth_utils.py, classes MaxLenVerifier
// ("max_length") and UpToMaxLenVerifier ("up_to_max_length"):
//     desired_length = float(label)
//     length_diff = abs(len(tokenized_prediction) - desired_length)      # MaxLen
//     length_diff = len(tokenized_prediction) - desired_length           # UpToMaxLen
//     if length_diff < 0: return VerificationResult(score=1.0)           # UpToMaxLen
//     score = 1 - (length_diff / 8192)
// Differences, all documented in docs/verifiers.md:
//  - open-instruct counts model tokens (len(tokenized_prediction)); a reward plugin is
//    torch- and tokenizer-free and receives only the decoded text, so the length is counted
//    in `unit`: words (default; Python str.split() over ASCII whitespace), chars (Unicode
//    code points, Python len(str)) or bytes (UTF-8 bytes).
//  - 8192 is the option `normalizer` (default 8192).
//  - open-instruct does not clamp (its comment says "make sure to disallow negative rewards"
//    but the code does not); the SDK requires a score in [0, 1], so a negative score becomes
//    0 and the unclamped value is in details.raw_score.
//  - Bad ground truth (not a non-negative finite number) scores 0 with the reason in details;
//    open-instruct's float(label) would raise.
// Depends only on the SDK headers, the C++ standard library and header-only nlohmann-json.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"

namespace {

namespace sdk = ::grpo::sdk;

constexpr std::size_t kMaxPreviewBytes = 80;

constexpr bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

enum class Unit { kWords, kChars, kBytes };

std::uint64_t measure(std::string_view s, Unit unit) {
  switch (unit) {
    case Unit::kBytes: return s.size();
    case Unit::kChars: {
      // Code points: every byte that is not a UTF-8 continuation byte (10xxxxxx). A stray
      // continuation byte of invalid UTF-8 is not counted, like the replacement a decoder
      // would merge into the preceding character.
      std::uint64_t n = 0;
      for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
      return n;
    }
    case Unit::kWords: {
      // len(text.split()) restricted to ASCII whitespace.
      std::uint64_t n = 0;
      bool in_word = false;
      for (char ch : s) {
        const bool space = is_space(static_cast<unsigned char>(ch));
        if (!space && !in_word) ++n;
        in_word = !space;
      }
      return n;
    }
  }
  return 0;
}

// The desired length: a JSON number, or a JSON string holding one (open-instruct's labels are
// strings passed to float()). Returns false with `why` set for anything else.
bool parse_desired(std::string_view text, double* out, std::string* why) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *why = "ground_truth is not valid JSON: " + grpo::sdk::clip_utf8(text, kMaxPreviewBytes);
    return false;
  }
  double v = 0.0;
  if (j.is_number()) {
    v = j.get<double>();
  } else if (j.is_string()) {
    const std::string s = j.get<std::string>();
    std::size_t b = 0, e = s.size();
    while (b < e && is_space(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && is_space(static_cast<unsigned char>(s[e - 1]))) --e;
    const std::string t = s.substr(b, e - b);
    std::size_t used = 0;
    bool ok = !t.empty();
    if (ok) {
      try {
        v = std::stod(t, &used);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || used != t.size()) {
      *why = "ground_truth string is not a number: " + grpo::sdk::clip_utf8(s, kMaxPreviewBytes);
      return false;
    }
  } else {
    *why = std::string("ground_truth must be a number (or a string holding one), got ") + j.type_name();
    return false;
  }
  if (!std::isfinite(v)) {
    *why = "ground_truth length is not finite";
    return false;
  }
  if (v < 0) {
    *why = "ground_truth length is negative: " + grpo::sdk::clip_utf8(text, kMaxPreviewBytes);
    return false;
  }
  *out = v;
  return true;
}

class LengthVerifier : public sdk::Verifier {
 public:
  LengthVerifier(const sdk::ConfigView& cfg, bool up_to)
      : up_to_(up_to),
        unit_name_(cfg.get_choice("unit", "words", {"words", "chars", "bytes"})),
        normalizer_(cfg.get_positive_double("normalizer", 8192.0)) {
    unit_ = unit_name_ == "chars" ? Unit::kChars : unit_name_ == "bytes" ? Unit::kBytes : Unit::kWords;
  }

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    nlohmann::ordered_json details;
    sdk::VerifierResult result;
    result.score = 0.0;
    details["unit"] = unit_name_;
    const std::uint64_t len = measure(input.completion, unit_);
    details["length"] = len;

    double desired = 0.0;
    std::string why;
    if (!parse_desired(input.ground_truth, &desired, &why)) {
      details["reason"] = why;
      result.details = dump(details);
      return result;
    }
    details["desired"] = desired;
    details["normalizer"] = normalizer_;

    const double diff = static_cast<double>(len) - desired;
    double raw = 0.0;
    if (up_to_) {
      raw = diff < 0 ? 1.0 : 1.0 - diff / normalizer_;
    } else {
      raw = 1.0 - std::fabs(diff) / normalizer_;
    }
    details["raw_score"] = raw;
    result.score = raw < 0.0 ? 0.0 : raw;
    if (raw < 0.0) details["reason"] = "length differs from the desired length by more than the normalizer: clamped to 0";
    result.details = dump(details);
    return result;
  }

 private:
  bool up_to_;
  std::string unit_name_;
  Unit unit_ = Unit::kWords;
  double normalizer_;
};

class MaxLengthVerifier final : public LengthVerifier {
 public:
  explicit MaxLengthVerifier(const sdk::ConfigView& cfg) : LengthVerifier(cfg, false) {}
};

class UpToMaxLengthVerifier final : public LengthVerifier {
 public:
  explicit UpToMaxLengthVerifier(const sdk::ConfigView& cfg) : LengthVerifier(cfg, true) {}
};

}  // namespace

GRPO_PLUGIN("length", "1.0.0", "open-instruct length rewards: max_length and up_to_max_length") {
  registrar.add_verifier<MaxLengthVerifier>(
      "max_length", "1 - |length - desired| / normalizer (open-instruct MaxLenVerifier), clamped to [0, 1]");
  registrar.add_verifier<UpToMaxLengthVerifier>(
      "up_to_max_length",
      "1 if length < desired, else 1 - (length - desired) / normalizer (open-instruct UpToMaxLenVerifier), clamped");
}
