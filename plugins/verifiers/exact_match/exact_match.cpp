// exact_match: normalized string equality between (a part of) the completion and the
// ground truth. See README.md in this folder for the options and the details format.
//
// Depends only on the SDK headers, the C++ standard library and header-only nlohmann-json:
// a reward plugin never links LibTorch.
//
// All text processing is byte-wise and ASCII-only on purpose: it is locale-independent
// (std::tolower/std::isspace would follow the process locale), allocation-light, and safe
// for UTF-8, because only ASCII bytes are ever changed or removed, so multi-byte sequences
// pass through intact.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"

namespace {

namespace sdk = ::grpo::sdk;

// ---------------------------------------------------------------------------------------
// Character classes (ASCII, locale-independent)
// ---------------------------------------------------------------------------------------

// Python's str.split() whitespace restricted to ASCII: space, \t, \n, \v, \f, \r.
constexpr bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Python's string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
constexpr bool is_punct(unsigned char c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

// A "word" character for the article boundaries, approximating Python's Unicode \w: ASCII
// letters, digits and '_', plus every non-ASCII byte (so "éa" is one word, never "é" + "a").
constexpr bool is_word(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

constexpr unsigned char ascii_lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c - 'A' + 'a') : c;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(static_cast<unsigned char>(a[i])) != ascii_lower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && is_space(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && is_space(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// ---------------------------------------------------------------------------------------
// Ground truth parsing
// ---------------------------------------------------------------------------------------

// Accepts exactly: a string, a number, or a flat non-empty list of strings/numbers. A SAX
// handler (rather than a DOM parse) keeps each floating-point number's text as written in
// the dataset ("0.50" stays "0.50", 1e30 stays "1e30"), so the comparison text is what the
// user sees in the file, never a re-formatted double. Integers print as written except for
// redundant signs ("-0" -> "0").
class GroundTruthSax {
 public:
  using json = nlohmann::json;

  explicit GroundTruthSax(std::vector<std::string>* out) : out_(out) {}

  const std::string& rejection() const { return rejection_; }
  bool is_list() const { return is_list_; }

  bool null() { return reject("null"); }
  bool boolean(bool value) { return reject(value ? "a boolean (true)" : "a boolean (false)"); }
  bool number_integer(json::number_integer_t v) { return add(std::to_string(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return add(std::to_string(v)); }
  bool number_float(json::number_float_t, const std::string& raw) { return add(raw); }
  bool string(std::string& s) { return add(std::move(s)); }
  bool binary(json::binary_t&) { return reject("binary data"); }
  bool start_object(std::size_t) { return reject("an object"); }
  bool key(std::string&) { return reject("an object"); }  // unreachable: objects stop at start_object
  bool end_object() { return reject("an object"); }
  bool start_array(std::size_t) {
    if (depth_ > 0) return reject("a nested list");
    ++depth_;
    is_list_ = true;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const std::exception& ex) {
    rejection_ = std::string("invalid JSON (") + strip_nlohmann_prefix(ex.what()) + ")";
    return false;
  }

 private:
  bool add(std::string text) {
    out_->push_back(std::move(text));
    return true;
  }
  bool reject(const char* what) {
    rejection_ = depth_ > 0 ? std::string("a list containing ") + what : std::string(what);
    return false;
  }
  // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
  static std::string strip_nlohmann_prefix(const char* what) {
    std::string_view s(what);
    if (!s.empty() && s.front() == '[') {
      std::size_t close = s.find("] ");
      if (close != std::string_view::npos) s.remove_prefix(close + 2);
    }
    return std::string(s);
  }

  std::vector<std::string>* out_;
  std::string rejection_;
  int depth_ = 0;
  bool is_list_ = false;
};

// At most this many bytes of user text are echoed into messages and details.
constexpr std::size_t kMaxEchoBytes = 1024;
constexpr std::size_t kMaxPreviewBytes = 80;

std::vector<std::string> parse_ground_truth(std::string_view text) {
  std::vector<std::string> truths;
  GroundTruthSax sax(&truths);
  if (trim(text).empty()) {
    throw std::invalid_argument(
        "exact_match: ground_truth is empty; expected JSON text: a string, a number, or a list of strings/numbers");
  }
  if (!nlohmann::json::sax_parse(text.begin(), text.end(), &sax)) {
    std::string got = sax.rejection().empty() ? std::string("an unsupported value") : sax.rejection();
    std::string msg = "exact_match: ground_truth must be a JSON string, number, or list of strings/numbers; got " +
                      got + ": " + sdk::clip_utf8(text, kMaxPreviewBytes);
    // The usual mistake: a raw answer where JSON text is expected. Quoting also fixes a
    // number nlohmann cannot hold (1e400), which is then compared as text.
    const bool invalid_json = got.rfind("invalid JSON", 0) == 0;
    if (invalid_json && std::string_view("\"[{").find(trim(text).front()) == std::string_view::npos)
      msg += " (ground_truth is JSON text: quote a plain-text answer, e.g. \"Paris\")";
    throw std::invalid_argument(msg);
  }
  if (sax.is_list() && truths.empty()) {
    throw std::invalid_argument(
        "exact_match: ground_truth must be a JSON string, number, or list of strings/numbers; got an empty list");
  }
  return truths;
}

// ---------------------------------------------------------------------------------------
// The verifier
// ---------------------------------------------------------------------------------------

enum class Whitespace { kCollapse, kTrim, kExact };
enum class Extract { kFull, kAnswerTag, kLastLine };

struct Extraction {
  bool found = false;
  std::string_view text;  // into the completion
  const char* reason = "";
};

class ExactMatchVerifier final : public sdk::Verifier {
 public:
  // Every option is read here: the host rejects any key the constructor did not read.
  explicit ExactMatchVerifier(const sdk::ConfigView& cfg)
      : case_sensitive_(cfg.get_bool("case_sensitive", false)),
        ignore_punctuation_(cfg.get_bool("ignore_punctuation", false)),
        ignore_articles_(cfg.get_bool("ignore_articles", false)),
        whitespace_(parse_whitespace(cfg.get_choice("whitespace", "collapse", {"collapse", "trim", "exact"}))),
        extract_(parse_extract(cfg.get_choice("extract", "full", {"full", "answer_tag", "last_line"}))) {}

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    // Parsed first so that bad data is reported even when the completion has no answer.
    const std::vector<std::string> truths = parse_ground_truth(input.ground_truth);

    nlohmann::ordered_json details;
    sdk::VerifierResult result;
    result.score = 0.0;

    const Extraction ex = extract(input.completion);
    if (!ex.found) {
      details["extracted"] = nullptr;
      details["matched"] = nullptr;
      details["reason"] = ex.reason;
      result.details = dump(details);
      return result;
    }

    const std::string prediction = normalize(ex.text);
    details["extracted"] = sdk::clip_utf8(prediction, kMaxEchoBytes);

    std::vector<std::string> expected;
    expected.reserve(truths.size());
    for (const std::string& truth : truths) {
      std::string normalized = normalize(truth);
      if (normalized == prediction) {
        result.score = 1.0;
        details["matched"] = sdk::clip_utf8(truth, kMaxEchoBytes);
        result.details = dump(details);
        return result;
      }
      expected.push_back(sdk::clip_utf8(normalized, kMaxEchoBytes));
    }

    details["matched"] = nullptr;
    details["reason"] = truths.size() == 1 ? std::string("prediction does not match the ground truth")
                                           : "prediction matches none of the " + std::to_string(truths.size()) +
                                                 " ground truths";
    details["expected"] = std::move(expected);  // normalized, as compared
    result.details = dump(details);
    return result;
  }

 private:
  static Whitespace parse_whitespace(const std::string& s) {
    if (s == "trim") return Whitespace::kTrim;
    if (s == "exact") return Whitespace::kExact;
    return Whitespace::kCollapse;
  }
  static Extract parse_extract(const std::string& s) {
    if (s == "answer_tag") return Extract::kAnswerTag;
    if (s == "last_line") return Extract::kLastLine;
    return Extract::kFull;
  }

  // Completions may hold invalid UTF-8 (a generation cut mid-character): replace it rather
  // than let dump() throw.
  static std::string dump(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }

  Extraction extract(std::string_view completion) const {
    Extraction ex;
    switch (extract_) {
      case Extract::kFull:
        ex.found = true;
        ex.text = completion;
        return ex;
      case Extract::kAnswerTag: {
        // The last complete pair: the last </answer>, and the last <answer> before it. A
        // model that restates or corrects itself is judged on its final answer.
        static constexpr std::string_view kOpen = "<answer>";
        static constexpr std::string_view kClose = "</answer>";
        const std::size_t close = completion.rfind(kClose);
        const std::size_t open =
            close == std::string_view::npos ? std::string_view::npos : completion.rfind(kOpen, close);
        if (open == std::string_view::npos) {
          ex.reason = completion.find(kOpen) != std::string_view::npos
                          ? "no <answer> tag closed by </answer> in the completion"
                          : "no <answer> tag in the completion";
          return ex;
        }
        ex.found = true;
        ex.text = completion.substr(open + kOpen.size(), close - open - kOpen.size());
        return ex;
      }
      case Extract::kLastLine: {
        // Lines end at '\n' ("\r\n" included: the '\r' is whitespace); whitespace-only lines
        // count as empty, so trailing blank lines are skipped.
        std::size_t end = completion.size();
        while (true) {
          const std::size_t nl = end == 0 ? std::string_view::npos : completion.rfind('\n', end - 1);
          const std::size_t begin = nl == std::string_view::npos ? 0 : nl + 1;
          const std::string_view line = completion.substr(begin, end - begin);
          if (!trim(line).empty()) {
            ex.found = true;
            ex.text = line;
            return ex;
          }
          if (nl == std::string_view::npos) break;
          end = nl;
        }
        ex.reason = "no non-empty line in the completion";
        return ex;
      }
    }
    return ex;
  }

  // SQuAD's normalize_answer order: lower -> remove punctuation -> remove articles ->
  // whitespace. Each step is skipped when its option is off.
  std::string normalize(std::string_view text) const {
    std::string s;
    s.reserve(text.size());
    for (char ch : text) {
      const auto c = static_cast<unsigned char>(ch);
      if (ignore_punctuation_ && is_punct(c)) continue;
      s.push_back(static_cast<char>(case_sensitive_ ? c : ascii_lower(c)));
    }
    if (ignore_articles_) s = remove_articles(s);
    switch (whitespace_) {
      case Whitespace::kCollapse: return collapse_whitespace(s);
      case Whitespace::kTrim: return std::string(trim(s));
      case Whitespace::kExact: return s;
    }
    return s;
  }

  // re.sub(r'\b(a|an|the)\b', ' ', text): each whole-word article becomes one space (so it
  // still separates its neighbours). Matched case-insensitively, so "The" is an article
  // even with case_sensitive: true.
  static std::string remove_articles(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
      if (!is_word(static_cast<unsigned char>(s[i]))) {
        out.push_back(s[i++]);
        continue;
      }
      std::size_t j = i;
      while (j < s.size() && is_word(static_cast<unsigned char>(s[j]))) ++j;
      const std::string_view word(s.data() + i, j - i);
      if (iequals_ascii(word, "a") || iequals_ascii(word, "an") || iequals_ascii(word, "the")) {
        out.push_back(' ');
      } else {
        out.append(word.data(), word.size());
      }
      i = j;
    }
    return out;
  }

  // ' '.join(text.split()) for ASCII whitespace.
  static std::string collapse_whitespace(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool pending_space = false;
    for (char ch : s) {
      if (is_space(static_cast<unsigned char>(ch))) {
        pending_space = !out.empty();
        continue;
      }
      if (pending_space) out.push_back(' ');
      pending_space = false;
      out.push_back(ch);
    }
    return out;
  }

  bool case_sensitive_;
  bool ignore_punctuation_;
  bool ignore_articles_;
  Whitespace whitespace_;
  Extract extract_;
};

}  // namespace

GRPO_PLUGIN("exact_match", "1.0.0", "Normalized exact string match against the ground truth") {
  registrar.add_verifier<ExactMatchVerifier>(
      "exact_match", "1 if the (extracted, normalized) completion equals the ground truth or one of a list, else 0");
}
