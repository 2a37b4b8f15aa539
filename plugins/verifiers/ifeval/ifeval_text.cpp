#include "ifeval_text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <clocale>
#include <cwctype>
#include <locale.h>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <cld2/public/compact_lang_det.h>

#include "grpo/sdk/utf8.h"

namespace grpo_ifeval {

// ------------------------------------------------------------------------------------------
// Regex

Regex::Regex(const std::string& pattern, int flags) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (flags & kIgnoreCase) options |= PCRE2_CASELESS;
  if (flags & kMultiline) options |= PCRE2_MULTILINE;
  if (flags & kDotAll) options |= PCRE2_DOTALL;
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &offset,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    error_ = std::string(reinterpret_cast<char*>(buf)) + " at offset " + std::to_string(offset);
    return;
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

namespace {

// Calls fn(start, end) for each non-overlapping match (Python finditer semantics: an empty
// match advances one character).
template <class Fn>
void for_each_match(void* code_ptr, std::string_view text, Fn&& fn) {
  if (!code_ptr) return;
  auto* code = static_cast<pcre2_code*>(code_ptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  PCRE2_SIZE start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, 0, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (!fn(ov, rc)) break;
    if (ov[1] == ov[0]) {
      // advance one UTF-8 character
      PCRE2_SIZE next = ov[1] + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
    } else {
      start = ov[1];
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace

bool Regex::search(std::string_view text) const {
  bool found = false;
  for_each_match(code_, text, [&](const PCRE2_SIZE*, int) {
    found = true;
    return false;
  });
  return found;
}

std::size_t Regex::find_all(std::string_view text, std::vector<std::string>* out) const {
  std::size_t n = 0;
  for_each_match(code_, text, [&](const PCRE2_SIZE* ov, int) {
    ++n;
    if (out) out->emplace_back(text.substr(ov[0], ov[1] - ov[0]));
    return true;
  });
  return n;
}

std::vector<std::string> Regex::split(std::string_view text) const {
  std::vector<std::string> parts;
  std::size_t last = 0;
  for_each_match(code_, text, [&](const PCRE2_SIZE* ov, int) {
    parts.emplace_back(text.substr(last, ov[0] - last));
    last = ov[1];
    return true;
  });
  parts.emplace_back(text.substr(last));
  return parts;
}

std::string Regex::sub(std::string_view text, const std::string& replacement) const {
  std::string out;
  std::size_t last = 0;
  for_each_match(code_, text, [&](const PCRE2_SIZE* ov, int groups) {
    out.append(text.substr(last, ov[0] - last));
    for (std::size_t i = 0; i < replacement.size(); ++i) {
      const char c = replacement[i];
      if (c == '\\' && i + 1 < replacement.size() && replacement[i + 1] >= '1' && replacement[i + 1] <= '9') {
        const int g = replacement[i + 1] - '0';
        if (g < groups && ov[2 * g] != PCRE2_UNSET) out.append(text.substr(ov[2 * g], ov[2 * g + 1] - ov[2 * g]));
        ++i;
      } else {
        out += c;
      }
    }
    last = ov[1];
    return true;
  });
  out.append(text.substr(std::min(last, text.size())));
  return out;
}

// ------------------------------------------------------------------------------------------
// Unicode case (C.UTF-8 locale's tables, as Python's str methods for the letters that matter)

namespace {

locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

// Decodes one code point at s[i], advancing i (grpo/sdk/utf8.h: each maximal ill-formed
// subsequence is one U+FFFD, as Python's bytes.decode("utf-8", "replace")).
char32_t next_cp(std::string_view s, std::size_t& i) {
  std::size_t len = 1;
  const char32_t cp = grpo::sdk::decode_utf8_at(s, i, &len);
  i += len;
  return cp;
}

bool cp_upper(char32_t cp) {
  return cp < 0x80 ? (cp >= 'A' && cp <= 'Z') : (utf8_locale() && iswupper_l(static_cast<wint_t>(cp), utf8_locale()));
}
bool cp_lower(char32_t cp) {
  return cp < 0x80 ? (cp >= 'a' && cp <= 'z') : (utf8_locale() && iswlower_l(static_cast<wint_t>(cp), utf8_locale()));
}

}  // namespace

std::string py_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = next_cp(text, i);
    if (cp < 0x80) out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    else grpo::sdk::append_utf8(out, utf8_locale() ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(cp), utf8_locale())) : cp);
  }
  return out;
}

bool py_isupper(std::string_view text) {
  bool cased = false;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = next_cp(text, i);
    if (cp_lower(cp)) return false;
    cased = cased || cp_upper(cp);
  }
  return cased;
}

bool py_islower(std::string_view text) {
  bool cased = false;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = next_cp(text, i);
    if (cp_upper(cp)) return false;
    cased = cased || cp_lower(cp);
  }
  return cased;
}

std::string py_strip(std::string_view text, std::string_view chars) {
  auto strip_it = [&](unsigned char c) {
    return chars.empty() ? (c == ' ' || (c >= '\t' && c <= '\r') || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x1f)
                         : chars.find(static_cast<char>(c)) != std::string_view::npos;
  };
  std::size_t b = 0, e = text.size();
  while (b < e && strip_it(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && strip_it(static_cast<unsigned char>(text[e - 1]))) --e;
  return std::string(text.substr(b, e - b));
}

// ------------------------------------------------------------------------------------------
// Words

std::size_t count_words(std::string_view text) {
  static const Regex word(R"(\w+)");
  return word.find_all(text);
}

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
}
}  // namespace

std::vector<std::string> split_into_sentences(std::string_view input) {
  static const std::string alphabets = "([A-Za-z])", prefixes = "(Mr|St|Mrs|Ms|Dr)[.]",
                           suffixes = "(Inc|Ltd|Jr|Sr|Co)",
                           starters = R"((Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s|But\s|However\s|That\s|This\s|Wherever))",
                           acronyms = "([A-Z][.][A-Z][.](?:[A-Z][.])?)", websites = "[.](com|net|org|io|gov|edu|me)",
                           digits = "([0-9])";
  static const Regex r_prefixes(prefixes), r_websites(websites), r_digits(digits + "[.]" + digits),
      r_dots(R"(\.{2,})"), r_single(R"(\s)" + alphabets + "[.] "), r_acronym_start(acronyms + " " + starters),
      r_abc(alphabets + "[.]" + alphabets + "[.]" + alphabets + "[.]"), r_ab(alphabets + "[.]" + alphabets + "[.]"),
      r_suffix_start(" " + suffixes + "[.] " + starters), r_suffix(" " + suffixes + "[.]"), r_alpha(" " + alphabets + "[.]");
  std::string text = " " + std::string(input) + "  ";
  replace_all(text, "\n", " ");
  text = r_prefixes.sub(text, "\\1<prd>");
  text = r_websites.sub(text, "<prd>\\1");
  text = r_digits.sub(text, "\\1<prd>\\2");
  {  // each run of dots: "<prd>" per dot, then "<stop>"
    std::vector<std::string> runs;
    std::string out;
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == '.' && i + 1 < text.size() && text[i + 1] == '.') {
        std::size_t j = i;
        while (j < text.size() && text[j] == '.') ++j;
        for (std::size_t k = i; k < j; ++k) out += "<prd>";
        out += "<stop>";
        i = j;
      } else {
        out += text[i++];
      }
    }
    text = out;
  }
  if (text.find("Ph.D") != std::string::npos) replace_all(text, "Ph.D.", "Ph<prd>D<prd>");
  text = r_single.sub(text, " \\1<prd> ");
  text = r_acronym_start.sub(text, "\\1<stop> \\2");
  text = r_abc.sub(text, "\\1<prd>\\2<prd>\\3<prd>");
  text = r_ab.sub(text, "\\1<prd>\\2<prd>");
  text = r_suffix_start.sub(text, " \\1<stop> \\2");
  text = r_suffix.sub(text, " \\1<prd>");
  text = r_alpha.sub(text, " \\1<prd>");
  replace_all(text, ".\u201d", "\u201d.");
  replace_all(text, ".\"", "\".");
  replace_all(text, "!\"", "\"!");
  replace_all(text, "?\"", "\"?");
  replace_all(text, ".", ".<stop>");
  replace_all(text, "?", "?<stop>");
  replace_all(text, "!", "!<stop>");
  replace_all(text, "<prd>", ".");
  std::vector<std::string> sentences;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find("<stop>", start);
    sentences.push_back(py_strip(std::string_view(text).substr(start, at == std::string::npos ? std::string::npos : at - start)));
    if (at == std::string::npos) break;
    start = at + 6;
  }
  if (!sentences.empty() && sentences.back().empty()) sentences.pop_back();
  return sentences;
}

std::string py_reverse(std::string_view text) {
  std::vector<std::string> cps;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t start = i;
    next_cp(text, i);
    cps.emplace_back(text.substr(start, i - start));
  }
  std::string out;
  for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
  return out;
}

std::vector<std::string> word_tokens(std::string_view text) {
  // Treebank-like: words (keeping inner apostrophes, hyphens and periods: "DON'T", "U.S."),
  // numbers, and each punctuation mark on its own.
  static const Regex token(R"(\w+(?:['’.\-]\w+)*\.?|[^\w\s])");
  std::vector<std::string> out;
  token.find_all(text, &out);
  return out;
}

// ------------------------------------------------------------------------------------------
// Punkt (a port of nltk/tokenize/punkt.py, NLTK 3.8, PunktSentenceTokenizer.tokenize with the
// trained English parameters)

namespace {

#include "punkt_english.inc"

constexpr int kOrthoBegUc = 1 << 1, kOrthoMidUc = 1 << 2, kOrthoUnkUc = 1 << 3, kOrthoBegLc = 1 << 4,
              kOrthoMidLc = 1 << 5, kOrthoUnkLc = 1 << 6;
constexpr int kOrthoUc = kOrthoBegUc | kOrthoMidUc | kOrthoUnkUc;
constexpr int kOrthoLc = kOrthoBegLc | kOrthoMidLc | kOrthoUnkLc;

struct PunktParams {
  std::unordered_set<std::string> abbrev, starters, collocations;
  std::unordered_map<std::string, int> ortho;
};

std::vector<std::string> lines_of(const char* text) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

const PunktParams& punkt() {
  static const PunktParams p = [] {
    PunktParams q;
    for (auto& l : lines_of(kPunktAbbrevTypes)) q.abbrev.insert(l);
    for (auto& l : lines_of(kPunktSentStarters)) q.starters.insert(l);
    for (auto& l : lines_of(kPunktCollocations)) q.collocations.insert(l);
    for (const char* chunk : kPunktOrthoContext)
      for (auto& l : lines_of(chunk)) {
        const std::size_t tab = l.rfind('\t');
        if (tab != std::string::npos) q.ortho[l.substr(0, tab)] = std::stoi(l.substr(tab + 1));
      }
    return q;
  }();
  return p;
}

constexpr const char* kNonWord = R"((?:[)\";}\]\*:@\'\({\[!?]))";
constexpr const char* kMultiChar = R"((?:\-{2,}|\.{2,}|(?:\.\s){2,}\.))";

const Regex& word_tokenizer() {
  // PunktLanguageVars._word_tokenize_fmt
  static const Regex r(std::string("(") + kMultiChar + R"(|(?=[^\(\"\`{\[:;&\#\*@\)}\]\-,])\S+?(?=\s|$|)" + kNonWord +
                       "|" + kMultiChar + "|,(?=$|\\s|" + kNonWord + "|" + kMultiChar + "))|\\S)");
  return r;
}

struct AugTok {
  std::string tok, type;
  bool period_final = false, sentbreak = false, abbr = false, ellipsis = false;
  bool first_upper = false, first_lower = false;
  std::string type_no_period() const {
    return type.size() > 1 && type.back() == '.' ? type.substr(0, type.size() - 1) : type;
  }
  std::string type_no_sentperiod() const { return sentbreak ? type_no_period() : type; }
  bool is_initial() const {  // [^\W\d]\.$  : one letter then a period
    static const Regex r(R"(^[^\W\d]\.$)");
    return r.search(tok);
  }
};

std::string punkt_type(const std::string& tok) {
  static const Regex number(R"(^-?[\.,]?\d[\d,\.-]*\.?$)");
  const std::string lower = py_lower(tok);
  return number.search(lower) ? "##number##" : lower;
}

AugTok make_tok(const std::string& tok) {
  AugTok a;
  a.tok = tok;
  a.type = punkt_type(tok);
  a.period_final = !tok.empty() && tok.back() == '.';
  std::size_t i = 0;
  const char32_t first = tok.empty() ? 0 : next_cp(tok, i);
  a.first_upper = cp_upper(first);
  a.first_lower = cp_lower(first);
  return a;
}

void first_pass(AugTok& t, const PunktParams& p) {
  const std::string& tok = t.tok;
  static const Regex ellipsis(R"(^\.\.+$)");
  if (tok == "." || tok == "?" || tok == "!") {
    t.sentbreak = true;
  } else if (ellipsis.search(tok)) {
    t.ellipsis = true;
  } else if (t.period_final && !(tok.size() >= 2 && tok.compare(tok.size() - 2, 2, "..") == 0)) {
    const std::string stem = py_lower(tok.substr(0, tok.size() - 1));
    const std::size_t dash = stem.rfind('-');
    const std::string last = dash == std::string::npos ? stem : stem.substr(dash + 1);
    if (p.abbrev.count(stem) || p.abbrev.count(last)) t.abbr = true;
    else t.sentbreak = true;
  }
}

// 1 = true, 0 = false, -1 = unknown
int ortho_heuristic(const AugTok& t, const PunktParams& p) {
  if (t.tok == ";" || t.tok == ":" || t.tok == "," || t.tok == "." || t.tok == "!" || t.tok == "?") return 0;
  const auto it = p.ortho.find(t.type_no_sentperiod());
  const int ortho = it == p.ortho.end() ? 0 : it->second;
  if (t.first_upper && (ortho & kOrthoLc) && !(ortho & kOrthoMidUc)) return 1;
  if (t.first_lower && ((ortho & kOrthoUc) || !(ortho & kOrthoBegLc))) return 0;
  return -1;
}

void second_pass(AugTok& t1, const AugTok& t2, const PunktParams& p) {
  if (!t1.period_final) return;
  const std::string typ = t1.type_no_period();
  const std::string next_typ = t2.type_no_sentperiod();
  const bool initial = t1.is_initial();
  if (p.collocations.count(typ + " " + next_typ)) {
    t1.sentbreak = false;
    t1.abbr = true;
    return;
  }
  if ((t1.abbr || t1.ellipsis) && !initial) {
    const int starter = ortho_heuristic(t2, p);
    if (starter == 1) {
      t1.sentbreak = true;
      return;
    }
    if (t2.first_upper && p.starters.count(next_typ)) {
      t1.sentbreak = true;
      return;
    }
  }
  if (initial || typ == "##number##") {
    const int starter = ortho_heuristic(t2, p);
    if (starter == 0) {
      t1.sentbreak = false;
      t1.abbr = true;
      return;
    }
    const auto it = p.ortho.find(next_typ);
    const int ortho = it == p.ortho.end() ? 0 : it->second;
    if (starter == -1 && initial && t2.first_upper && !(ortho & kOrthoLc)) {
      t1.sentbreak = false;
      t1.abbr = true;
    }
  }
}

bool text_contains_sentbreak(const std::string& context) {
  const PunktParams& p = punkt();
  std::vector<AugTok> toks;
  std::size_t start = 0;
  while (start <= context.size()) {  // word_tokenize per line
    std::size_t end = context.find('\n', start);
    if (end == std::string::npos) end = context.size();
    std::vector<std::string> words;
    word_tokenizer().find_all(std::string_view(context).substr(start, end - start), &words);
    for (auto& w : words) toks.push_back(make_tok(w));
    start = end + 1;
  }
  for (auto& t : toks) first_pass(t, p);
  for (std::size_t i = 0; i + 1 < toks.size(); ++i) second_pass(toks[i], toks[i + 1], p);
  bool found = false;
  for (const auto& t : toks) {
    if (found) return true;
    if (t.sentbreak) found = true;
  }
  return false;
}

}  // namespace

std::size_t count_sentences(std::string_view text_view) {
  const std::string text(text_view);
  // _match_potential_end_contexts: every sentence-end character followed by punctuation
  // (after_tok) or by whitespace and a token (next_tok), as PunktLanguageVars.period_context_re.
  struct Match {
    std::size_t start, end, next_tok_start;  // next_tok_start = npos when after_tok is punctuation
    std::string after;
  };
  std::vector<Match> matches;
  const auto is_space = [](unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  const std::string non_word = ")\";}]*:@'({[!?";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c != '.' && c != '?' && c != '!') continue;
    const std::size_t after = i + 1;
    if (after < text.size() && non_word.find(text[after]) != std::string::npos) {
      matches.push_back({i, after, std::string::npos, std::string(1, text[after])});
      continue;
    }
    std::size_t j = after;
    while (j < text.size() && is_space(static_cast<unsigned char>(text[j]))) ++j;
    if (j == after || j >= text.size()) continue;
    std::size_t k = j;
    while (k < text.size() && !is_space(static_cast<unsigned char>(text[k]))) ++k;
    matches.push_back({i, after, j, text.substr(after, k - after)});
  }
  auto last_whitespace_index = [&](std::size_t from, std::size_t to) -> std::size_t {
    for (std::size_t i = to; i-- > from;)
      if (is_space(static_cast<unsigned char>(text[i]))) return i - from;
    return 0;
  };
  std::vector<std::pair<std::size_t, std::size_t>> slices;  // [start, end)
  std::size_t last_break = 0;
  auto consider = [&](const Match& m, std::size_t word_start) {
    const std::string context = text.substr(word_start, m.start - word_start) + text.substr(m.start, 1) + m.after;
    if (text_contains_sentbreak(context)) {
      slices.push_back({last_break, m.end});
      last_break = m.next_tok_start != std::string::npos ? m.next_tok_start : m.end;
    }
  };
  std::size_t prev_start = 0, prev_stop = 0;
  const Match* prev = nullptr;
  for (const Match& m : matches) {
    std::size_t idx = last_whitespace_index(prev_stop, m.start);
    std::size_t word_start;
    if (idx) word_start = idx + prev_stop + 1;
    else word_start = prev_start;
    if (prev && prev_stop <= word_start) consider(*prev, prev_start);
    prev = &m;
    prev_start = word_start;
    prev_stop = m.start;
  }
  if (prev) consider(*prev, prev_start);
  std::size_t end = text.size();
  while (end > 0 && is_space(static_cast<unsigned char>(text[end - 1]))) --end;
  slices.push_back({last_break, end});
  // _realign_boundaries: count the non-empty sentences
  static const Regex realign(R"(^["\')\]}]+?(?:\s+|(?=--)|$))");
  std::size_t count = 0;
  std::size_t shift = 0;
  for (std::size_t s = 0; s < slices.size(); ++s) {
    const std::size_t a = slices[s].first + shift, b = slices[s].second;
    if (s + 1 == slices.size()) {
      if (b > a) ++count;
      continue;
    }
    const auto& next = slices[s + 1];
    std::vector<std::string> m;
    const std::string next_text = next.second > next.first ? text.substr(next.first, next.second - next.first) : "";
    if (!next_text.empty() && realign.find_all(next_text.substr(0, std::min<std::size_t>(next_text.size(), 64)), &m) &&
        next_text.compare(0, m[0].size(), m[0]) == 0) {
      ++count;  // sentence1 extended over the closing punctuation
      std::size_t consumed = m[0].size();
      shift = consumed;
    } else {
      shift = 0;
      if (b > a) ++count;
    }
  }
  return count;
}

// ------------------------------------------------------------------------------------------
// Language

std::string detect_language(std::string_view text) {
  // langdetect raises (the reference then counts the instruction as followed) when the text
  // has no letters.
  bool letters = false;
  for (std::size_t i = 0; i < text.size() && !letters;) {
    const char32_t cp = next_cp(text, i);
    letters = cp_upper(cp) || cp_lower(cp) || (cp >= 0x0600 && cp != 0xFFFD);
  }
  if (!letters) return "";
  bool reliable = false;
  const CLD2::Language lang = CLD2::DetectLanguage(text.data(), static_cast<int>(text.size()), true, &reliable);
  std::string code = CLD2::LanguageCode(lang);
  if (code == "un") return "unknown";
  // CLD2's codes where langdetect's differ
  if (code == "iw") return "he";
  if (code == "zh") return "zh-cn";
  if (code == "zh-Hant") return "zh-tw";
  if (code == "nb") return "no";
  return code;
}

}  // namespace grpo_ifeval
