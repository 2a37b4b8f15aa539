// ifeval: Google's IFEval instruction-following checks (Zhou et al. 2023; reference:
// google-research instruction_following_eval/instructions.py) and the 29 further ids of
// open-instruct's IFEvalG (open_instruct/IFEvalG/instructions.py), one checker per instruction id
// with the reference's `build_description(**kwargs)` + `check_following(response)` semantics,
// in strict mode or the reference's loose mode. Score = fraction of the row's instructions
// followed (open-instruct's IFEval reward).
//
// Ground truth: {"instruction_id_list": [...], "kwargs": [{...}, ...]} (IFEval) or
// {"instruction_id": [...], "kwargs": [...]} (open-instruct), or a JSON string holding either,
// or a list of them (their instructions are concatenated). null-valued kwargs are dropped.
// Where the reference draws a random value for a missing kwarg, this verifier reports the
// instruction as not followed with the reason (a reward must be deterministic).
// Depends on the SDK, nlohmann-json, PCRE2 and CLD2: no LibTorch.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/plugin.h"
#include "grpo/sdk/text.h"
#include "grpo/sdk/verifier.h"
#include "ifeval_text.h"

namespace {

namespace sdk = ::grpo::sdk;
using grpo_ifeval::Regex;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

struct KwargsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- kwargs ----------------------------------------------------------------------------------

long long int_arg(const json& kw, const char* key) {
  if (!kw.contains(key)) throw KwargsError(std::string("missing kwarg '") + key + "'");
  const json& v = kw.at(key);
  if (v.is_number_integer()) return v.get<long long>();
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())))
    return static_cast<long long>(v.get<double>());
  if (v.is_string()) {
    try {
      std::size_t used = 0;
      const long long n = std::stoll(v.get<std::string>(), &used);
      if (used == v.get<std::string>().size()) return n;
    } catch (const std::exception&) {
    }
  }
  throw KwargsError(std::string("kwarg '") + key + "' must be an integer, got " + v.dump());
}

std::string str_arg(const json& kw, const char* key) {
  if (!kw.contains(key) || !kw.at(key).is_string() || kw.at(key).get<std::string>().empty())
    throw KwargsError(std::string("missing kwarg '") + key + "' (a non-empty string)");
  return kw.at(key).get<std::string>();
}

std::vector<std::string> list_arg(const json& kw, const char* key) {
  if (!kw.contains(key) || !kw.at(key).is_array() || kw.at(key).empty())
    throw KwargsError(std::string("missing kwarg '") + key + "' (a non-empty list of strings)");
  std::vector<std::string> out;
  for (const auto& v : kw.at(key)) {
    if (!v.is_string()) throw KwargsError(std::string("kwarg '") + key + "' must hold strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// relation: "less than" -> count < n; "at least" -> count >= n
bool compare(const json& kw, const char* key, long long count, long long n, std::string* why, const char* what) {
  const std::string rel = str_arg(kw, key);
  bool ok;
  if (rel == "less than") ok = count < n;
  else if (rel == "at least") ok = count >= n;
  else throw KwargsError(std::string("kwarg '") + key + "' must be 'less than' or 'at least', got '" + rel + "'");
  if (!ok) *why = "found " + std::to_string(count) + " " + what + ", need " + rel + " " + std::to_string(n);
  return ok;
}

// A regex built from a kwarg, cached (patterns repeat across rows; Regex is thread-safe).
std::shared_ptr<const Regex> regex(const std::string& pattern, int flags) {
  static std::mutex m;
  static std::map<std::pair<std::string, int>, std::shared_ptr<const Regex>> cache;
  std::lock_guard<std::mutex> lock(m);
  auto& slot = cache[{pattern, flags}];
  if (!slot) {
    slot = std::make_shared<const Regex>(pattern, flags);
    if (cache.size() > 20000) cache.clear();
  }
  if (!slot->ok()) throw KwargsError("kwarg is not a valid regular expression: " + pattern + " (" + slot->error() + ")");
  return slot;
}

std::string lower(std::string_view s) { return grpo_ifeval::py_lower(s); }
std::string strip(std::string_view s, std::string_view chars = {}) { return grpo_ifeval::py_strip(s, chars); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Python str.split(sep) for a literal separator.
std::vector<std::string> split_on(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + sep.size();
  }
}

// The reference's paragraph count: parts split by `separator`, an empty first or last part
// not counted; -1 when an empty part sits between two others (the reference returns False).
long long count_paragraphs(const std::vector<std::string>& parts) {
  long long n = static_cast<long long>(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (strip(parts[i]).empty()) {
      if (i == 0 || i + 1 == parts.size()) --n;
      else return -1;
    }
  return n;
}

// ---- the 25 checkers (reference: instructions.py, class named in each comment) ----------------

using Check = std::function<bool(const std::string& value, const json& kw, std::string* why)>;

// KeywordChecker
bool keywords_existence(const std::string& v, const json& kw, std::string* why) {
  for (const auto& k : list_arg(kw, "keywords"))
    if (!regex(k, Regex::kIgnoreCase)->search(v)) {
      *why = "missing keyword '" + k + "'";
      return false;
    }
  return true;
}

// KeywordFrequencyChecker
bool keywords_frequency(const std::string& v, const json& kw, std::string* why) {
  const std::string k = strip(str_arg(kw, "keyword"));
  const long long n = int_arg(kw, "frequency");
  const long long count = static_cast<long long>(regex(k, Regex::kIgnoreCase)->find_all(v));
  return compare(kw, "relation", count, n, why, ("occurrences of '" + k + "'").c_str());
}

// ForbiddenWords
bool keywords_forbidden(const std::string& v, const json& kw, std::string* why) {
  for (const auto& w : list_arg(kw, "forbidden_words"))
    if (regex("\\b" + w + "\\b", Regex::kIgnoreCase)->search(v)) {
      *why = "uses forbidden word '" + w + "'";
      return false;
    }
  return true;
}

// LetterFrequencyChecker
bool keywords_letter_frequency(const std::string& v, const json& kw, std::string* why) {
  const std::string letter = str_arg(kw, "letter");
  // The reference replaces a letter outside a-z by a random one; a reward must be
  // deterministic, so the character asked for is counted as given.
  if (letter.size() != 1) throw KwargsError("kwarg 'letter' must be one character, got '" + letter + "'");
  const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(letter[0])));
  const std::string low = lower(v);
  const long long count = static_cast<long long>(std::count(low.begin(), low.end(), l));
  return compare(kw, "let_relation", count, int_arg(kw, "let_frequency"), why, ("letters '" + letter + "'").c_str());
}

// ResponseLanguageChecker
bool language_response(const std::string& v, const json& kw, std::string* why) {
  const std::string want = str_arg(kw, "language");
  const std::string got = grpo_ifeval::detect_language(v);
  if (got.empty()) return true;  // langdetect raises: the reference counts it as followed
  if (got != want) *why = "detected language '" + got + "', need '" + want + "'";
  return got == want;
}

// NumberOfSentences
bool number_sentences(const std::string& v, const json& kw, std::string* why) {
  return compare(kw, "relation", static_cast<long long>(grpo_ifeval::count_sentences(v)), int_arg(kw, "num_sentences"),
                 why, "sentences");
}

// ParagraphChecker
bool number_paragraphs(const std::string& v, const json& kw, std::string* why) {
  const long long want = int_arg(kw, "num_paragraphs");
  const long long n = count_paragraphs(regex(R"(\s?\*\*\*\s?)", 0)->split(v));
  if (n < 0) {
    *why = "an empty paragraph between *** separators";
    return false;
  }
  if (n != want) *why = "found " + std::to_string(n) + " paragraphs, need " + std::to_string(want);
  return n == want;
}

// NumberOfWords
bool number_words(const std::string& v, const json& kw, std::string* why) {
  return compare(kw, "relation", static_cast<long long>(grpo_ifeval::count_words(v)), int_arg(kw, "num_words"), why,
                 "words");
}

// Python str.split() (whitespace runs)
std::vector<std::string> py_split(const std::string& s) {
  static const Regex ws(R"(\S+)");
  std::vector<std::string> out;
  ws.find_all(s, &out);
  return out;
}

// ParagraphFirstWordCheck
bool nth_paragraph_first_word(const std::string& v, const json& kw, std::string* why) {
  const long long num = int_arg(kw, "num_paragraphs");
  const long long nth = int_arg(kw, "nth_paragraph");
  const std::string first_word = lower(str_arg(kw, "first_word"));
  if (nth <= 0 || nth > num) throw KwargsError("kwarg 'nth_paragraph' must be in [1, num_paragraphs]");
  const std::vector<std::string> paragraphs = regex(R"(\n\n)", 0)->split(v);
  long long n = static_cast<long long>(paragraphs.size());
  for (const auto& p : paragraphs)
    if (strip(p).empty()) --n;
  if (nth > n) {
    *why = "only " + std::to_string(n) + " paragraphs";
    return false;
  }
  const std::string paragraph = strip(paragraphs[static_cast<std::size_t>(nth - 1)]);
  if (paragraph.empty()) {
    *why = "paragraph " + std::to_string(nth) + " is empty";
    return false;
  }
  std::string word = strip(py_split(paragraph)[0]);
  while (!word.empty() && word[0] == '\'') word.erase(0, 1);
  while (!word.empty() && word[0] == '"') word.erase(0, 1);
  std::string got;
  for (char c : word) {
    if (c == '.' || c == ',' || c == '?' || c == '!' || c == '\'' || c == '"') break;
    got += c;
  }
  got = lower(got);
  const bool ok = n == num && got == first_word;
  if (!ok) *why = "found " + std::to_string(n) + " paragraphs, paragraph " + std::to_string(nth) + " starts with '" + got + "'";
  return ok;
}

// PlaceholderChecker
bool placeholders(const std::string& v, const json& kw, std::string* why) {
  const long long n = static_cast<long long>(regex(R"(\[.*?\])", 0)->find_all(v));
  const long long want = int_arg(kw, "num_placeholders");
  if (n < want) *why = "found " + std::to_string(n) + " placeholders, need at least " + std::to_string(want);
  return n >= want;
}

// PostscriptChecker
bool postscript(const std::string& v, const json& kw, std::string* why) {
  const std::string marker = strip(str_arg(kw, "postscript_marker"));
  std::string pattern;
  if (marker == "P.P.S") pattern = R"(\s*p\.\s?p\.\s?s.*$)";
  else if (marker == "P.S.") pattern = R"(\s*p\.\s?s\..*$)";
  else pattern = R"(\s*)" + lower(marker) + ".*$";
  const bool ok = regex(pattern, Regex::kMultiline)->search(lower(v));
  if (!ok) *why = "no postscript starting with " + marker;
  return ok;
}

// BulletListChecker
bool bullet_lists(const std::string& v, const json& kw, std::string* why) {
  const long long n = static_cast<long long>(regex(R"(^\s*\*[^\*].*$)", Regex::kMultiline)->find_all(v) +
                                             regex(R"(^\s*-.*$)", Regex::kMultiline)->find_all(v));
  const long long want = int_arg(kw, "num_bullets");
  if (n != want) *why = "found " + std::to_string(n) + " bullet points, need exactly " + std::to_string(want);
  return n == want;
}

// ConstrainedResponseChecker
bool constrained_response(const std::string& v, const json&, std::string* why) {
  const std::string s = strip(v);
  for (const char* option : {"My answer is yes.", "My answer is no.", "My answer is maybe."})
    if (s.find(option) != std::string::npos) return true;
  *why = "none of 'My answer is yes./no./maybe.'";
  return false;
}

// HighlightSectionChecker
bool highlighted_sections(const std::string& v, const json& kw, std::string* why) {
  long long n = 0;
  std::vector<std::string> single, dbl;
  regex(R"(\*[^\n\*]*\*)", 0)->find_all(v, &single);
  regex(R"(\*\*[^\n\*]*\*\*)", 0)->find_all(v, &dbl);
  for (const auto& h : single)
    if (!strip(strip(h, "*")).empty()) ++n;
  for (const auto& h : dbl)
    if (!strip(h.substr(2, h.size() - 4)).empty()) ++n;
  const long long want = int_arg(kw, "num_highlights");
  if (n < want) *why = "found " + std::to_string(n) + " highlighted sections, need at least " + std::to_string(want);
  return n >= want;
}

// SectionChecker
bool multiple_sections(const std::string& v, const json& kw, std::string* why) {
  const std::string splitter = strip(str_arg(kw, "section_spliter"));
  const long long n = static_cast<long long>(regex(R"(\s?)" + splitter + R"(\s?\d+\s?)", 0)->split(v).size()) - 1;
  const long long want = int_arg(kw, "num_sections");
  if (n < want) *why = "found " + std::to_string(n) + " sections, need at least " + std::to_string(want);
  return n >= want;
}

// JsonFormat
bool json_format(const std::string& v, const json&, std::string* why) {
  std::string s = strip(v);
  for (const char* p : {"```json", "```Json", "```JSON", "```"})
    if (starts_with(s, p)) {
      s = s.substr(std::string(p).size());
      break;
    }
  if (ends_with(s, "```")) s = s.substr(0, s.size() - 3);
  s = strip(s);
  const bool ok = json::accept(s);
  if (!ok) *why = "not valid JSON";
  return ok;
}

// TitleChecker
bool title(const std::string& v, const json&, std::string* why) {
  std::vector<std::string> titles;
  regex(R"(<<[^\n]+>>)", 0)->find_all(v, &titles);
  for (const auto& t : titles) {
    std::size_t b = t.find_first_not_of('<'), e = t.find_last_not_of('>');
    if (b != std::string::npos && e != std::string::npos && e >= b && !strip(t.substr(b, e - b + 1)).empty()) return true;
  }
  *why = "no <<title>>";
  return false;
}

// TwoResponsesChecker
bool two_responses(const std::string& v, const json&, std::string* why) {
  const std::vector<std::string> parts = split_on(v, "******");
  std::vector<std::string> valid;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (strip(parts[i]).empty()) {
      if (i != 0 && i + 1 != parts.size()) {
        *why = "an empty response between ******";
        return false;
      }
    } else {
      valid.push_back(parts[i]);
    }
  }
  const bool ok = valid.size() == 2 && strip(valid[0]) != strip(valid[1]);
  if (!ok) *why = "found " + std::to_string(valid.size()) + " distinct responses separated by ******, need 2";
  return ok;
}

// RepeatPromptThenAnswer
bool repeat_prompt(const std::string& v, const json& kw, std::string* why) {
  const std::string prompt = lower(strip(str_arg(kw, "prompt_to_repeat")));
  const bool ok = starts_with(lower(strip(v)), prompt);
  if (!ok) *why = "does not start with the prompt";
  return ok;
}

// EndChecker
bool end_checker(const std::string& v, const json& kw, std::string* why) {
  const std::string end = lower(strip(str_arg(kw, "end_phrase")));
  const bool ok = ends_with(lower(strip(strip(v), "\"")), end);
  if (!ok) *why = "does not end with '" + end + "'";
  return ok;
}

// CapitalWordFrequencyChecker
bool capital_word_frequency(const std::string& v, const json& kw, std::string* why) {
  long long n = 0;
  for (const auto& w : grpo_ifeval::word_tokens(v)) n += grpo_ifeval::py_isupper(w);
  return compare(kw, "capital_relation", n, int_arg(kw, "capital_frequency"), why, "all-capital words");
}

// CapitalLettersEnglishChecker / LowercaseLettersEnglishChecker
bool english_case(const std::string& v, bool upper, std::string* why) {
  if (!(upper ? grpo_ifeval::py_isupper(v) : grpo_ifeval::py_islower(v))) {
    *why = upper ? "not all capital letters" : "not all lowercase letters";
    return false;
  }
  const std::string lang = grpo_ifeval::detect_language(v);
  if (lang.empty()) return true;  // langdetect raises: followed
  if (lang != "en") *why = "detected language '" + lang + "', need 'en'";
  return lang == "en";
}
bool english_capital(const std::string& v, const json&, std::string* why) { return english_case(v, true, why); }
bool english_lowercase(const std::string& v, const json&, std::string* why) { return english_case(v, false, why); }

// CommaChecker
bool no_comma(const std::string& v, const json&, std::string* why) {
  const bool ok = v.find(',') == std::string::npos;
  if (!ok) *why = "contains a comma";
  return ok;
}

// QuotationChecker
bool quotation(const std::string& v, const json&, std::string* why) {
  const std::string s = strip(v);
  const bool ok = s.size() > 1 && s.front() == '"' && s.back() == '"';
  if (!ok) *why = "not wrapped in double quotes";
  return ok;
}

// ---- open-instruct's IFEvalG additions (open_instruct/IFEvalG/instructions.py) -------------

std::string strip_kw(const json& kw, const char* key) { return strip(str_arg(kw, key)); }

// RepeatPhraseChecker
bool repeat_phrase(const std::string& v, const json& kw, std::string* why) {
  const std::string phrase = strip_kw(kw, "phrase");
  const long long n = int_arg(kw, "small_n");
  const std::vector<std::string> ref = py_split(phrase);
  if (ref.empty()) throw KwargsError("kwarg 'phrase' is empty");
  std::vector<std::string> found;
  regex(ref.front() + " .*? " + ref.back(), 0)->find_all(v, &found);
  if (static_cast<long long>(found.size()) != n) {
    *why = "found " + std::to_string(found.size()) + " variants of the phrase, need " + std::to_string(n);
    return false;
  }
  long long satisfied = 0;
  for (const auto& f : found) {
    const std::vector<std::string> words = py_split(f);
    if (words.size() != ref.size()) return false;
    int differences = 0;
    for (std::size_t i = 0; i < words.size(); ++i)
      if (words[i] != ref[i] && ++differences > 1) return false;
    satisfied += differences == 1;
  }
  if (satisfied != n) *why = "each repetition must change exactly one word";
  return satisfied == n;
}

// CopyChecker / CopyingSimpleChecker
bool copy_prompt(const std::string& v, const json& kw, std::string* why) {
  const bool ok = lower(strip(v)) == lower(strip(str_arg(kw, "prompt_to_repeat")));
  if (!ok) *why = "not an exact copy of the request";
  return ok;
}

// Python slice [start:end] by code point, with Python's clamping for non-negative bounds.
std::string py_slice(const std::string& s, long long start, long long end) {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  const long long n = static_cast<long long>(offsets.size());
  auto clamp = [&](long long x) { return x < 0 ? std::max(0LL, n + x) : std::min(x, n); };
  const long long a = clamp(start), b = clamp(end);
  if (a >= b) return "";
  const std::size_t from = offsets[static_cast<std::size_t>(a)];
  const std::size_t to = b == n ? s.size() : offsets[static_cast<std::size_t>(b)];
  return s.substr(from, to - from);
}

// CopySpanIdxChecker
bool copy_span_idx(const std::string& v, const json& kw, std::string* why) {
  const std::string prompt = str_arg(kw, "prompt_to_repeat");
  const std::string span = py_slice(prompt, int_arg(kw, "n_start"), int_arg(kw, "n_end"));
  const bool ok = lower(strip(v)) == lower(strip(span));
  if (!ok) *why = "not the requested span of the request";
  return ok;
}

// SentenceHyphenChecker
bool sentence_hyphens(const std::string& v, const json&, std::string* why) {
  std::string no_hyphens = v;
  std::replace(no_hyphens.begin(), no_hyphens.end(), '-', ' ');
  const std::vector<std::string> gold = grpo_ifeval::split_into_sentences(no_hyphens);
  const std::vector<std::string> parts = split_on(v, "-");
  for (std::size_t i = 0; i < std::min(parts.size(), gold.size()); ++i)
    if (strip(parts[i]) != parts[i] || parts[i] != gold[i]) {
      *why = "sentences must be joined by hyphens without spaces";
      return false;
    }
  return true;
}

std::string first_char_lower(const std::string& w) {
  std::size_t i = 0;
  while (i + 1 < w.size() && (static_cast<unsigned char>(w[i + 1]) & 0xC0) == 0x80) ++i;
  return lower(w.substr(0, i + 1));
}

// AdjacentLetterChecker
bool no_adjacent_consecutive(const std::string& v, const json&, std::string* why) {
  const std::vector<std::string> words = py_split(v);
  for (std::size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string a = first_char_lower(words[i]), b = first_char_lower(words[i + 1]);
    if (a.size() == 1 && b.size() == 1 && b[0] - a[0] == 1) {
      *why = "'" + words[i] + "' and '" + words[i + 1] + "' start with consecutive letters";
      return false;
    }
  }
  return true;
}

// SquareBracketChecker
bool square_brackets(const std::string& v, const json&, std::string* why) {
  for (const auto& w : py_split(v))
    if (!(starts_with(w, "[") && ends_with(w, "]"))) {
      *why = "'" + w + "' is not wrapped in square brackets";
      return false;
    }
  return true;
}

// KeywordFrequencyOnceChecker
bool word_once(const std::string& v, const json& kw, std::string* why) {
  const std::string k = strip_kw(kw, "keyword");
  const std::size_t n = regex(k, Regex::kIgnoreCase)->find_all(v);
  if (n != 1) *why = "'" + k + "' appears " + std::to_string(n) + " times, need once";
  return n == 1;
}

// KeywordFrequencyCheckerDifferent
bool word_count_different_numbers(const std::string& v, const json& kw, std::string* why) {
  const std::string k = strip_kw(kw, "keyword");
  const long long count = static_cast<long long>(regex(k, Regex::kIgnoreCase)->find_all(v));
  return compare(kw, "relation", count, int_arg(kw, "frequency"), why, ("occurrences of '" + k + "'").c_str());
}

// ExcludeWordHarderChecker
bool exclude_word_harder(const std::string& v, const json& kw, std::string* why) {
  const std::string k = strip_kw(kw, "keyword");
  const bool ok = v.find(" " + k + " ") == std::string::npos;
  if (!ok) *why = "uses '" + k + "'";
  return ok;
}

// ParagraphBasicChecker / ParagraphBasicChecker2: exactly two paragraphs
bool two_paragraphs(const std::string& v, const char* separator, std::string* why) {
  const long long n = count_paragraphs(regex(separator, 0)->split(v));
  if (n < 0) {
    *why = "an empty paragraph";
    return false;
  }
  if (n != 2) *why = "found " + std::to_string(n) + " paragraphs, need 2";
  return n == 2;
}
bool paragraphs_stars(const std::string& v, const json&, std::string* why) { return two_paragraphs(v, R"(\s?\*\*\*\s?)", why); }
bool paragraphs_blank(const std::string& v, const json&, std::string* why) { return two_paragraphs(v, R"(\n\n)", why); }

std::string word_arg(const json& kw, const char* key) {
  if (kw.contains(key) && kw.at(key).is_array() && !kw.at(key).empty() && kw.at(key)[0].is_string())
    return strip(kw.at(key)[0].get<std::string>());
  return strip_kw(kw, key);
}

// FirstWordSentChecker
bool first_word_sent(const std::string& v, const json& kw, std::string* why) {
  const std::string want = lower(word_arg(kw, "first_word"));
  for (const auto& s : grpo_ifeval::split_into_sentences(v)) {
    const std::vector<std::string> words = py_split(s);
    if (words.empty() || lower(strip(words.front())) != want) {
      *why = "a sentence does not start with '" + want + "'";
      return false;
    }
  }
  return true;
}

// FirstWordAnswerChecker
bool first_word_answer(const std::string& v, const json& kw, std::string* why) {
  const std::string want = lower(strip_kw(kw, "first_word"));
  const std::vector<std::string> words = py_split(v);
  const bool ok = !words.empty() && lower(strip(words.front())) == want;
  if (!ok) *why = "does not start with '" + want + "'";
  return ok;
}

std::string without_punctuation(const std::string& w) {  // re.sub(r"[^\w\s]", "", w)
  return regex(R"([^\w\s])", 0)->sub(w, "");
}

// LastWordSentChecker
bool last_word_sent(const std::string& v, const json& kw, std::string* why) {
  const std::string want = lower(word_arg(kw, "last_word"));
  for (const auto& s : grpo_ifeval::split_into_sentences(v)) {
    const std::vector<std::string> words = py_split(s);
    if (words.empty() || lower(without_punctuation(strip(words.back()))) != want) {
      *why = "a sentence does not end with '" + want + "'";
      return false;
    }
  }
  return true;
}

// LastWordAnswerChecker
bool last_word_answer(const std::string& v, const json& kw, std::string* why) {
  const std::string want = lower(strip_kw(kw, "last_word"));
  const std::vector<std::string> words = py_split(v);
  const bool ok = !words.empty() && lower(without_punctuation(strip(words.back()))) == want;
  if (!ok) *why = "does not end with '" + want + "'";
  return ok;
}

// BiGramWrappingChecker
bool bigram_wrapping(const std::string& v, const json&, std::string* why) {
  const std::vector<std::string> words = py_split(v);
  for (std::size_t i = 0; i + 1 < words.size(); i += 2)
    if (!(starts_with(words[i], "<<") && ends_with(words[i + 1], ">>"))) {
      *why = "words " + std::to_string(i + 1) + " and " + std::to_string(i + 2) + " are not wrapped in << >>";
      return false;
    }
  return true;
}

// CopyingMultipleChecker
bool copying_multiple(const std::string& v, const json& kw, std::string* why) {
  const std::string prompt = lower(strip(str_arg(kw, "prompt_to_repeat")));
  const long long n = int_arg(kw, "N");
  const std::vector<std::string> parts = split_on(v, "******");
  if (static_cast<long long>(parts.size()) != n) {
    *why = "found " + std::to_string(parts.size()) + " copies, need " + std::to_string(n);
    return false;
  }
  for (const auto& p : parts)
    if (lower(strip(p)) != prompt) {
      *why = "a copy differs from the request";
      return false;
    }
  return true;
}

// PunctuationDotChecker / PunctuationExclamationChecker
bool no_dot(const std::string& v, const json&, std::string* why) {
  const bool ok = v.find('.') == std::string::npos;
  if (!ok) *why = "contains a period";
  return ok;
}
bool no_exclamation(const std::string& v, const json&, std::string* why) {
  const bool ok = v.find('!') == std::string::npos;
  if (!ok) *why = "contains an exclamation mark";
  return ok;
}

// LowercaseCountingChecker
bool lowercase_counting(const std::string& v, const json& kw, std::string* why) {
  const long long n = static_cast<long long>(regex(R"(\b[a-z]+\b)", 0)->find_all(v));
  const long long most = int_arg(kw, "N");
  if (n > most) *why = "found " + std::to_string(n) + " lowercase words, at most " + std::to_string(most);
  return n <= most;
}

// LetterCountingChecker
bool letter_counting(const std::string& v, const json& kw, std::string* why) {
  const long long n = static_cast<long long>(regex(R"([a-zA-Z])", 0)->find_all(v));
  return compare(kw, "relation", n, int_arg(kw, "N"), why, "letters");
}

// CountingCompositionChecker
bool counting_composition(const std::string& v, const json& kw, std::string* why) {
  const long long n_sent = int_arg(kw, "n_sent"), n_words = int_arg(kw, "n_words");
  const std::vector<std::string> parts = regex(R"(\s?\*\*\*\s?)", 0)->split(v);
  const long long n = count_paragraphs(parts);
  if (n < 0) return false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::vector<std::string> sentences = grpo_ifeval::split_into_sentences(parts[i]);
    if (static_cast<long long>(sentences.size()) != n_sent) {
      *why = "paragraph " + std::to_string(i + 1) + " has " + std::to_string(sentences.size()) + " sentences";
      return false;
    }
    for (const auto& s : sentences)
      if (static_cast<long long>(grpo_ifeval::word_tokens(s).size()) != n_words) {
        *why = "a sentence does not have " + std::to_string(n_words) + " words";
        return false;
      }
  }
  if (n != 3) *why = "found " + std::to_string(n) + " paragraphs, need 3";
  return n == 3;
}

// CountUniqueChecker
bool count_unique(const std::string& v, const json&, std::string* why) {
  const std::vector<std::string> words = grpo_ifeval::word_tokens(v);
  std::set<std::string> unique(words.begin(), words.end());
  if (unique.size() != words.size()) *why = "a word repeats";
  return unique.size() == words.size();
}

// CountIncrementWordChecker
bool count_increment_word(const std::string& v, const json& kw, std::string* why) {
  const std::string k1 = strip_kw(kw, "keyword1"), k2 = strip_kw(kw, "keyword2");
  const std::size_t n1 = regex(k1, Regex::kIgnoreCase)->find_all(v), n2 = regex(k2, Regex::kIgnoreCase)->find_all(v);
  const bool ok = n1 == 1 && n2 == 2;
  if (!ok) *why = "'" + k1 + "' " + std::to_string(n1) + " times (need 1), '" + k2 + "' " + std::to_string(n2) + " times (need 2)";
  return ok;
}

// PalindromeBasicChecker
bool palindrome(const std::string& v, const json&, std::string* why) {
  for (const auto& w : py_split(v))
    if (w == grpo_ifeval::py_reverse(w)) return true;
  *why = "no palindrome";
  return false;
}

// KeywordSpecificPositionChecker
bool keyword_specific_position(const std::string& v, const json& kw, std::string* why) {
  const std::string k = word_arg(kw, "keyword");
  const long long n = int_arg(kw, "n"), m = int_arg(kw, "m");
  if (n < 1 || m < 1) throw KwargsError("kwargs 'n' and 'm' must be >= 1");
  const std::vector<std::string> sentences = grpo_ifeval::split_into_sentences(v);
  if (static_cast<long long>(sentences.size()) < n) {
    *why = "fewer than " + std::to_string(n) + " sentences";
    return false;
  }
  const std::vector<std::string> words = grpo_ifeval::word_tokens(sentences[static_cast<std::size_t>(n - 1)]);
  const bool ok = static_cast<long long>(words.size()) >= m && words[static_cast<std::size_t>(m - 1)] == k;
  if (!ok) *why = "word " + std::to_string(m) + " of sentence " + std::to_string(n) + " is not '" + k + "'";
  return ok;
}

// StartEndChecker
bool start_end(const std::string& v, const json&, std::string* why) {
  const std::vector<std::string> words = grpo_ifeval::word_tokens(v);
  const bool ok = words.size() >= 2 && lower(words.front()) == lower(words.back());
  if (!ok) *why = "does not start and end with the same word";
  return ok;
}

const std::map<std::string, Check>& ifevalg_checkers() {
  static const std::map<std::string, Check> m = {
      {"copy:repeat_phrase", repeat_phrase},
      {"copy:copy", copy_prompt},
      {"new:copy_span_idx", copy_span_idx},
      {"detectable_format:sentence_hyphens", sentence_hyphens},
      {"keywords:no_adjacent_consecutive", no_adjacent_consecutive},
      {"detectable_format:square_brackets", square_brackets},
      {"keywords:word_once", word_once},
      {"keywords:word_count_different_numbers", word_count_different_numbers},
      {"keywords:exclude_word_harder", exclude_word_harder},
      {"paragraphs:paragraphs", paragraphs_stars},
      {"paragraphs:paragraphs2", paragraphs_blank},
      {"first_word:first_word_sent", first_word_sent},
      {"first_word:first_word_answer", first_word_answer},
      {"last_word:last_word_sent", last_word_sent},
      {"last_word:last_word_answer", last_word_answer},
      {"detectable_format:bigram_wrapping", bigram_wrapping},
      {"copy:copying_simple", copy_prompt},
      {"copy:copying_multiple", copying_multiple},
      {"punctuation:punctuation_dot", no_dot},
      {"punctuation:punctuation_exclamation", no_exclamation},
      {"count:lowercase_counting", lowercase_counting},
      {"letters:letter_counting", letter_counting},
      {"letters:letter_counting2", keywords_letter_frequency},
      {"count:counting_composition", counting_composition},
      {"count:count_unique", count_unique},
      {"count:count_increment_word", count_increment_word},
      {"keywords:palindrome", palindrome},
      {"keywords:keyword_specific_position", keyword_specific_position},
      {"keywords:start_end", start_end},
  };
  return m;
}

const std::map<std::string, Check>& checkers() {
  static const std::map<std::string, Check> m = {
      {"keywords:existence", keywords_existence},
      {"keywords:frequency", keywords_frequency},
      {"keywords:forbidden_words", keywords_forbidden},
      {"keywords:letter_frequency", keywords_letter_frequency},
      {"language:response_language", language_response},
      {"length_constraints:number_sentences", number_sentences},
      {"length_constraints:number_paragraphs", number_paragraphs},
      {"length_constraints:number_words", number_words},
      {"length_constraints:nth_paragraph_first_word", nth_paragraph_first_word},
      {"detectable_content:number_placeholders", placeholders},
      {"detectable_content:postscript", postscript},
      {"detectable_format:number_bullet_lists", bullet_lists},
      {"detectable_format:constrained_response", constrained_response},
      {"detectable_format:number_highlighted_sections", highlighted_sections},
      {"detectable_format:multiple_sections", multiple_sections},
      {"detectable_format:json_format", json_format},
      {"detectable_format:title", title},
      {"combination:two_responses", two_responses},
      {"combination:repeat_prompt", repeat_prompt},
      {"startend:end_checker", end_checker},
      {"change_case:capital_word_frequency", capital_word_frequency},
      {"change_case:english_capital", english_capital},
      {"change_case:english_lowercase", english_lowercase},
      {"punctuation:no_comma", no_comma},
      {"startend:quotation", quotation},
  };
  return m;
}

// The reference's loose mode: the response, without its first line, last line or both, each
// also with every '*' removed; an instruction is followed when any non-empty variant follows it.
std::vector<std::string> loose_variants(const std::string& response) {
  const std::vector<std::string> lines = split_on(response, "\n");
  auto join = [&](std::size_t from, std::size_t to) {
    std::string s;
    for (std::size_t i = from; i < to; ++i) s += (i > from ? "\n" : "") + lines[i];
    return strip(s);
  };
  auto no_stars = [](std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '*'), s.end());
    return s;
  };
  const std::size_t n = lines.size();
  const std::string first = join(std::min<std::size_t>(1, n), n), last = join(0, n ? n - 1 : 0),
                    both = n >= 2 ? join(1, n - 1) : std::string();
  return {response, no_stars(response), first, last, both, no_stars(first), no_stars(last), no_stars(both)};
}

struct Instruction {
  std::string id;
  json kwargs;
};

// The row's instructions, or empty with `why`.
std::vector<Instruction> parse_ground_truth(json gt, std::string* why) {
  if (gt.is_string()) {
    json inner = json::parse(gt.get<std::string>(), nullptr, false);
    if (inner.is_discarded()) {
      *why = "ground_truth string is not JSON";
      return {};
    }
    gt = inner;
  }
  std::vector<json> rows;
  if (gt.is_array()) rows.assign(gt.begin(), gt.end());
  else rows.push_back(gt);
  std::vector<Instruction> out;
  for (json row : rows) {
    if (row.is_string()) row = json::parse(row.get<std::string>(), nullptr, false);
    if (!row.is_object()) {
      *why = "ground_truth must be an object with instruction_id_list (or instruction_id) and kwargs";
      return {};
    }
    const char* ids_key = row.contains("instruction_id_list") ? "instruction_id_list" : "instruction_id";
    if (!row.contains(ids_key)) {
      *why = "ground_truth has no instruction_id_list / instruction_id";
      return {};
    }
    json ids = row[ids_key];
    if (ids.is_string()) ids = json::array({ids});
    json kwargs = row.value("kwargs", json::array());
    if (kwargs.is_object()) kwargs = json::array({kwargs});
    if (!ids.is_array() || !kwargs.is_array()) {
      *why = "instruction ids and kwargs must be lists";
      return {};
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_string()) {
        *why = "instruction ids must be strings";
        return {};
      }
      json kw = i < kwargs.size() && kwargs[i].is_object() ? kwargs[i] : json::object();
      json clean = json::object();
      for (auto& [k, v] : kw.items())
        if (!v.is_null()) clean[k] = v;
      out.push_back({ids[i].get<std::string>(), clean});
    }
  }
  if (out.empty()) *why = "ground_truth lists no instructions";
  return out;
}

class IfevalVerifier final : public sdk::Verifier {
 public:
  explicit IfevalVerifier(const sdk::ConfigView& cfg)
      : loose_(cfg.get_choice("mode", "strict", {"strict", "loose"}) == "loose"),
        strip_thinking_(cfg.get_bool("strip_thinking", true)),
        google_only_(cfg.get_choice("instruction_set", "all", {"all", "google"}) == "google") {}

  sdk::VerifierResult verify(const sdk::VerifierInput& input) const override {
    sdk::VerifierResult result;
    ojson details;
    details["mode"] = loose_ ? "loose" : "strict";
    std::string why;
    json gt = json::parse(input.ground_truth.begin(), input.ground_truth.end(), nullptr, false);
    const std::vector<Instruction> instructions =
        gt.is_discarded() ? std::vector<Instruction>{} : parse_ground_truth(gt, &why);
    if (instructions.empty()) {
      details["reason"] = gt.is_discarded() ? "ground_truth is not valid JSON" : why;
      result.details = details.dump(-1, ' ', false, ojson::error_handler_t::replace);
      return result;
    }
    std::string response(input.completion);
    if (strip_thinking_) {
      const std::size_t think = response.rfind("</think>");
      if (think != std::string::npos) response = response.substr(think + 8);
    }
    const std::vector<std::string> variants = loose_ ? loose_variants(response) : std::vector<std::string>{response};
    std::size_t followed = 0;
    ojson verdicts = ojson::array();
    for (const Instruction& ins : instructions) {
      ojson v;
      v["id"] = ins.id;
      auto it = checkers().find(ins.id);
      if (it == checkers().end() && !google_only_) {
        it = ifevalg_checkers().find(ins.id);
        if (it == ifevalg_checkers().end()) it = checkers().end();
      }
      bool ok = false;
      std::string reason;
      if (it == checkers().end()) {
        reason = google_only_ && ifevalg_checkers().count(ins.id) ? "an IFEvalG id, and instruction_set is google"
                                                                  : "unknown instruction id";
      } else {
        try {
          for (const std::string& r : variants) {
            if (strip(r).empty()) continue;
            std::string r_why;
            if (it->second(r, ins.kwargs, &r_why)) {
              ok = true;
              break;
            }
            if (reason.empty()) reason = r_why;
          }
        } catch (const KwargsError& e) {
          ok = false;
          reason = std::string("bad kwargs: ") + e.what();
        }
      }
      v["followed"] = ok;
      if (!ok && !reason.empty()) v["reason"] = sdk::clip_utf8(reason, 200);
      verdicts.push_back(v);
      followed += ok;
    }
    details["followed"] = followed;
    details["instructions"] = instructions.size();
    details["verdicts"] = verdicts;
    result.score = static_cast<double>(followed) / static_cast<double>(instructions.size());
    result.details = details.dump(-1, ' ', false, ojson::error_handler_t::replace);
    return result;
  }

 private:
  bool loose_;
  bool strip_thinking_;
  bool google_only_;
};

}  // namespace

GRPO_PLUGIN("ifeval", "1.0.0", "IFEval instruction-following checks (Google's 25 ids and open-instruct's IFEvalG ids)") {
  registrar.add_verifier<IfevalVerifier>("ifeval", "fraction of the row's IFEval instructions the response follows");
}
