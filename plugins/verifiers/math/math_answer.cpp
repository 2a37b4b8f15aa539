#include "math_answer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
#include <cstring>
#include <set>

#include "plugins/shared/latex/latex_expr.h"

namespace grpo_math {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// Index just past the brace group opening at s[open] == '{', or npos when unbalanced.
std::size_t match_brace(std::string_view s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

// Replaces every \cmd{X} by X (for \text, \mathrm, ...).
void unwrap_command(std::string& s, std::string_view cmd) {
  const std::string pat = "\\" + std::string(cmd) + "{";
  std::size_t pos = 0;
  while ((pos = s.find(pat, pos)) != std::string::npos) {
    const std::size_t open = pos + pat.size() - 1;
    const std::size_t end = match_brace(s, open);
    if (end == std::string::npos) return;
    s = s.substr(0, pos) + s.substr(open + 1, end - open - 2) + s.substr(end);
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Extraction

bool last_boxed(std::string_view text, std::string* out, std::vector<std::string>* all) {
  bool found = false;
  std::size_t pos = 0;
  std::string last;
  for (;;) {
    const std::size_t b = text.find("\\boxed", pos), f = text.find("\\fbox", pos);
    const std::size_t at = std::min(b, f);
    if (at == std::string_view::npos) break;
    std::size_t i = at + (at == b ? 6 : 5);
    // "\boxedfoo" is another command
    if (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
      pos = i;
      continue;
    }
    while (i < text.size() && text[i] == ' ') ++i;
    std::string content;
    if (i < text.size() && text[i] == '{') {
      const std::size_t end = match_brace(text, i);
      if (end == std::string_view::npos) {
        pos = i + 1;
        continue;
      }
      content = std::string(text.substr(i + 1, end - i - 2));
      pos = end;
    } else {
      // "\boxed 5$": up to the next '$' or line end (Hendrycks: split("$")[0])
      std::size_t end = i;
      while (end < text.size() && text[end] != '$' && text[end] != '\n') ++end;
      content = trim(text.substr(i, end - i));
      pos = end;
      if (content.empty()) continue;
    }
    last = content;
    found = true;
    if (all) all->push_back(content);
  }
  if (found) *out = last;
  return found;
}

std::string last_number(std::string_view text) {
  // Python: re.findall(r"-?[\d,]*\.?\d+", text.replace(",", "")) style, keeping the sign.
  std::string best;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (std::isdigit(c) || (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      std::size_t j = i;
      std::string num;
      bool dot = false;
      while (j < text.size()) {
        const char d = text[j];
        if (std::isdigit(static_cast<unsigned char>(d))) {
          num += d;
        } else if (d == ',' && j + 3 < text.size() + 0 && j + 1 < text.size() &&
                   std::isdigit(static_cast<unsigned char>(text[j + 1])) && !dot) {
          // thousands separator: digits follow
        } else if (d == '.' && !dot && j + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
          dot = true;
          num += d;
        } else {
          break;
        }
        ++j;
      }
      const bool negative = i > 0 && text[i - 1] == '-';
      best = (negative ? "-" : "") + num;
      i = j;
    } else {
      ++i;
    }
  }
  return best;
}

namespace {

// The text after the last "####" up to the line end.
bool after_hashes(std::string_view text, std::string* out) {
  const std::size_t at = text.rfind("####");
  if (at == std::string_view::npos) return false;
  std::size_t end = text.find('\n', at);
  if (end == std::string_view::npos) end = text.size();
  *out = trim(text.substr(at + 4, end - at - 4));
  return !out->empty();
}

bool minerva_answer(std::string_view text, std::string* out) {
  // Case-insensitive search for the last "final answer is".
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::size_t at = lower.rfind("final answer is");
  if (at == std::string::npos) return false;
  std::size_t start = at + std::strlen("final answer is");
  std::size_t end = lower.find("i hope it is correct", start);
  if (end == std::string::npos) end = lower.find('\n', start);
  if (end == std::string::npos) end = text.size();
  std::string a = trim(text.substr(start, end - start));
  if (!a.empty() && a.back() == '.') a.pop_back();
  a = trim(a);
  if (a.size() >= 2 && a.front() == '$' && a.back() == '$') a = trim(a.substr(1, a.size() - 2));
  std::string boxed;
  if (last_boxed(a, &boxed)) a = boxed;
  *out = a;
  return !a.empty();
}

bool between_last_dollars(std::string_view text, std::string* out) {
  const std::size_t last = text.rfind('$');
  if (last == std::string_view::npos || last == 0) return false;
  const std::size_t prev = text.rfind('$', last - 1);
  if (prev == std::string_view::npos) return false;
  *out = trim(text.substr(prev + 1, last - prev - 1));
  return !out->empty();
}

}  // namespace

Extraction extract_math_answer(std::string_view completion, bool last_number_fallback) {
  Extraction x;
  std::string s;
  const std::size_t close = completion.rfind("</answer>");
  if (close != std::string_view::npos) {
    const std::size_t open = completion.rfind("<answer>", close);
    if (open != std::string_view::npos) {
      std::string_view inner = completion.substr(open + 8, close - open - 8);
      if (last_boxed(inner, &s, &x.all_boxed)) {
        x.answer = s;
      } else {
        x.answer = trim(inner);
        if (x.answer.size() >= 2 && x.answer.front() == '$' && x.answer.back() == '$')
          x.answer = trim(std::string_view(x.answer).substr(1, x.answer.size() - 2));
      }
      x.rule = "answer_tag";
      if (!x.answer.empty()) return x;
    }
  }
  x.all_boxed.clear();
  if (last_boxed(completion, &s, &x.all_boxed)) {
    x.answer = s;
    x.rule = "boxed";
    return x;
  }
  if (minerva_answer(completion, &s)) {
    x.answer = s;
    x.rule = "minerva";
    return x;
  }
  if (after_hashes(completion, &s)) {
    x.answer = s;
    x.rule = "hashes";
    return x;
  }
  if (between_last_dollars(completion, &s)) {
    x.answer = s;
    x.rule = "dollars";
    return x;
  }
  if (last_number_fallback) {
    s = last_number(completion);
    if (!s.empty()) {
      x.answer = s;
      x.rule = "last_number";
      return x;
    }
  }
  x.rule = "none";
  return x;
}

Extraction extract_gsm8k_answer(std::string_view completion) {
  Extraction x;
  std::string s;
  if (after_hashes(completion, &s)) {
    x.answer = s;
    x.rule = "hashes";
    return x;
  }
  s = last_number(completion);
  if (!s.empty()) {
    x.answer = s;
    x.rule = "last_number";
  }
  return x;
}

// ------------------------------------------------------------------------------------------
// Normalization

namespace {

// Minerva's REMOVED_EXPRESSIONS words (units and filler), removed when they follow a value.
const std::vector<std::string>& unit_words() {
  static const std::vector<std::string> words = {
      "square", "ways",    "integers", "dollars", "dollar", "mph",     "inches", "inch",   "ft",     "feet",
      "foot",   "hours",   "hour",     "km",      "units",  "unit",    "sue",    "points", "point",  "minutes",
      "minute", "digits",  "digit",    "cents",   "cent",   "degrees", "degree", "cm",     "gm",     "pounds",
      "pound",  "meters",  "meter",    "meals",   "edges",  "students", "childrentickets", "multiples", "seconds",
      "second", "days",    "day",      "years",   "year",   "miles",   "mile",   "grams",  "gram",   "kg",
      "liters", "liter",   "people",   "men",     "women",  "boys",    "girls",  "numbers", "sq",    "m",
      "mm",     "yards",   "yard",     "weeks",   "week",   "months",  "month",  "units^2", "percent", "times",
      "cups",   "cup",     "ounces",   "ounce",   "gallons", "gallon", "marbles", "cookies", "apples", "books",
      "pages",  "hundred", "rad",      "radians", "sides",  "side",    "factors", "solutions", "terms", "triangles",
      "squares", "coins",  "pairs",    "cars",    "balls",  "tiles",   "cubes"};
  return words;
}

bool is_value_end(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '}' || c == ')' || c == '.'; }

// Drops unit words: "\text{ cm}", "\mbox{ inches}", " inches" after a value; and ^2 / ^3 that
// followed a removed unit (cm^2).
void remove_units(std::string& s) {
  // \text{...} / \mbox{...} / \mathrm{...} holding only letters and spaces, right after a value
  for (const char* cmd : {"\\text{", "\\mbox{", "\\mathrm{", "\\textnormal{", "\\textrm{"}) {
    std::size_t pos = 0;
    while ((pos = s.find(cmd, pos)) != std::string::npos) {
      const std::size_t open = pos + std::strlen(cmd) - 1;
      const std::size_t end = match_brace(s, open);
      if (end == std::string::npos) break;
      const std::string inner = trim(std::string_view(s).substr(open + 1, end - open - 2));
      std::size_t before = pos;
      while (before > 0 && s[before - 1] == ' ') --before;
      bool words = !inner.empty() && inner.size() > 1;
      for (char c : inner) words = words && (std::isalpha(static_cast<unsigned char>(c)) || c == ' ' || c == '.');
      if (words && before > 0 && is_value_end(s[before - 1])) {
        std::size_t after = end;
        if (s.compare(after, 2, "^2") == 0 || s.compare(after, 2, "^3") == 0) after += 2;
        s.erase(before, after - before);
        pos = before;
      } else {
        pos = end;
      }
    }
  }
  // plain unit words after a value: "5 inches", "12 cm"
  for (;;) {
    std::size_t end = s.size();
    while (end > 0 && s[end - 1] == ' ') --end;
    std::size_t start = end;
    while (start > 0 && (std::isalpha(static_cast<unsigned char>(s[start - 1])) || s[start - 1] == '^' ||
                         (std::isdigit(static_cast<unsigned char>(s[start - 1])) && start >= 2 && s[start - 2] == '^')))
      --start;
    if (start == end || start == 0 || s[start - 1] != ' ') return;
    std::string word = s.substr(start, end - start);
    const std::size_t caret = word.find('^');
    const std::string base = caret == std::string::npos ? word : word.substr(0, caret);
    std::string lower = base;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool unit = false;
    for (const auto& w : unit_words()) unit = unit || lower == w;
    std::size_t before = start;
    while (before > 0 && s[before - 1] == ' ') --before;
    if (!unit || before == 0 || !is_value_end(s[before - 1])) return;
    s.erase(before);
  }
}

// "1,000,000" -> "1000000" when the whole string is one number with thousands separators.
void strip_thousands(std::string& s) {
    std::size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
    std::size_t digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
    bool ok = digits >= 1 && digits <= 3 && i < s.size() && s[i] == ',';
    bool any = false;
    while (ok && i < s.size() && s[i] == ',') {
      std::size_t j = i + 1, group = 0;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j, ++group;
      ok = group == 3;
      any = true;
      i = j;
    }
    if (ok && i < s.size() && s[i] == '.') {
      std::size_t j = i + 1;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      i = j;
    }
    if (ok && any && i == s.size()) s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  }

}  // namespace

std::string normalize_answer(std::string_view answer) {
  std::string s = trim(answer);
  replace_all(s, "\n", " ");
  replace_all(s, "\r", " ");
  // "\\" (matrix row break) must survive the removal of "\ " below
  replace_all(s, "\\\\", "\x01");
  // Spacing and sizing commands (Hendrycks: \!, Minerva: "\ ", \;)
  for (const char* w : {"\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "\\displaystyle", "\\bigl", "\\bigr",
                        "\\Bigl", "\\Bigr", "\\big", "\\Big", "\\biggl", "\\biggr", "~"})
    replace_all(s, w, " ");
  replace_all(s, "\\ ", " ");
  replace_all(s, "\\left.", "");
  replace_all(s, "\\right.", "");
  replace_all(s, "\\left", "");
  replace_all(s, "\\right", "");
  replace_all(s, "\\dfrac", "\\frac");
  replace_all(s, "\\tfrac", "\\frac");
  replace_all(s, "\\cfrac", "\\frac");
  replace_all(s, "\\dbinom", "\\binom");
  replace_all(s, "\\tbinom", "\\binom");
  replace_all(s, "\\le ", "\\le");
  replace_all(s, "\\leq", "\\le");
  replace_all(s, "\\geq", "\\ge");
  replace_all(s, "\\lbrace", "\\{");
  replace_all(s, "\\rbrace", "\\}");
  replace_all(s, "\\lvert", "|");
  replace_all(s, "\\rvert", "|");
  replace_all(s, "\\vert", "|");
  replace_all(s, "\\mid", "|");
  replace_all(s, "\\infin", "\\infty");
  replace_all(s, "\\emptyset", "\\varnothing");
  // degrees
  for (const char* w : {"^{\\circ}", "^\\circ", "^{\\circ }", "\\circ", "\\degree", "°"}) replace_all(s, w, "");
  // dollars: "\$" and "$" (Hendrycks, Minerva)
  replace_all(s, "\\$", "");
  replace_all(s, "$", "");
  // "\text{(A)}", "\textbf{...}": units first, then unwrap what stays
  remove_units(s);
  for (const char* cmd : {"text", "textbf", "textit", "mbox", "mathrm", "mathbf", "textnormal", "textrm", "mathit",
                          "boxed", "overline", "operatorname"})
    unwrap_command(s, cmd);
  remove_units(s);
  // thousands separators written "{,}" or ",\!" (\! already gone)
  replace_all(s, "{,}", ",");
  // spaces (Hendrycks removes all of them)
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  // trailing punctuation
  while (!s.empty() && (s.back() == '.' || s.back() == ',' || s.back() == ';')) s.pop_back();
  while (!s.empty() && s.front() == ',') s.erase(0, 1);
  // ".5" -> "0.5" (Hendrycks), " .5" / "{.5" handled by the tokenizer
  strip_thousands(s);
  replace_all(s, "\x01", "\\\\");
  return s;
}

// ------------------------------------------------------------------------------------------
// Structure: lists, tuples, intervals, sets, matrices, equations, \pm

namespace {

struct Part {
  enum Kind { kScalar, kSequence, kSet, kList, kUnion, kMatrix } kind = kScalar;
  std::string text;             // kScalar: normalized text
  bool percent = false;         // kScalar: written with %
  char open = 0, close = 0;     // kSequence brackets
  std::vector<Part> items;      // elements / rows
};

// Splits at top-level occurrences of `sep` (outside (), [], {}).
std::vector<std::string> split_top(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      depth += s[i + 1] == '{' ? 1 : -1;
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    else if (c == ')' || c == ']' || c == '}') --depth;
    else if (depth == 0 && s.compare(i, sep.size(), sep) == 0) {
      out.push_back(s.substr(start, i - start));
      start = i + sep.size();
      i += sep.size() - 1;
    }
  }
  out.push_back(s.substr(start));
  return out;
}

// Whether s[0] is an opening bracket whose match is the last character.
bool wrapped(const std::string& s) {
  if (s.size() < 2 || (s[0] != '(' && s[0] != '[')) return false;
  if (s.back() != ')' && s.back() != ']') return false;
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '{' || s[i + 1] == '}')) {
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    else if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0 && i + 1 != s.size()) return false;
    }
  }
  return depth == 0;
}

bool is_simple_lhs(const std::string& lhs) {
  // x, y_1, f(x), \theta, k, a+b? no: a name with optional subscript / argument list
  if (lhs.empty() || lhs.size() > 12) return false;
  std::size_t i = 0;
  if (lhs[0] == '\\') {
    ++i;
    while (i < lhs.size() && std::isalpha(static_cast<unsigned char>(lhs[i]))) ++i;
  } else if (std::isalpha(static_cast<unsigned char>(lhs[0]))) {
    ++i;
  } else {
    return false;
  }
  if (i < lhs.size() && lhs[i] == '_') {
    ++i;
    if (i < lhs.size() && lhs[i] == '{') {
      const std::size_t e = lhs.find('}', i);
      if (e == std::string::npos) return false;
      i = e + 1;
    } else if (i < lhs.size()) {
      ++i;
    }
  }
  if (i < lhs.size() && lhs[i] == '(' && lhs.back() == ')') return true;  // f(x)
  return i == lhs.size();
}

Part parse_part(std::string s, int depth);

Part scalar(std::string s) {
  Part p;
  // percent: "10\%", "10%"
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, "\\%") == 0) {
    s.erase(s.size() - 2);
    p.percent = true;
  } else if (!s.empty() && s.back() == '%') {
    s.pop_back();
    p.percent = true;
  }
  replace_all(s, "\\%", "");
  p.text = s;
  return p;
}

Part parse_part(std::string s, int depth) {
  Part p;
  if (depth > 8) return scalar(s);
  // matrices / vectors
  for (const char* env : {"pmatrix", "bmatrix", "matrix", "vmatrix"}) {
    const std::string begin = std::string("\\begin{") + env + "}", end = std::string("\\end{") + env + "}";
    if (starts_with(s, begin) && s.size() > begin.size() + end.size() &&
        s.compare(s.size() - end.size(), end.size(), end) == 0) {
      p.kind = Part::kMatrix;
      const std::string body = s.substr(begin.size(), s.size() - begin.size() - end.size());
      for (const std::string& row : split_top(body, "\\\\")) {
        if (row.empty()) continue;
        Part r;
        r.kind = Part::kList;
        for (const std::string& cell : split_top(row, "&")) r.items.push_back(parse_part(cell, depth + 1));
        p.items.push_back(r);
      }
      return p;
    }
  }
  // unions of intervals
  std::vector<std::string> unions = split_top(s, "\\cup");
  if (unions.size() > 1) {
    p.kind = Part::kUnion;
    for (const auto& u : unions) p.items.push_back(parse_part(u, depth + 1));
    return p;
  }
  // sets \{...\}
  if (starts_with(s, "\\{") && s.size() >= 4 && s.compare(s.size() - 2, 2, "\\}") == 0) {
    p.kind = Part::kSet;
    for (const auto& e : split_top(s.substr(2, s.size() - 4), ",")) p.items.push_back(parse_part(e, depth + 1));
    return p;
  }
  // tuples and intervals: (a,b), [a,b), (-\infty,3]
  if (wrapped(s)) {
    std::vector<std::string> elems = split_top(s.substr(1, s.size() - 2), ",");
    if (elems.size() > 1) {
      p.kind = Part::kSequence;
      p.open = s.front();
      p.close = s.back();
      for (const auto& e : elems) p.items.push_back(parse_part(e, depth + 1));
      return p;
    }
  }
  // one equation with a name on the left: "x = 10,080" -> "10080", "x = 1, 2" -> "1, 2"
  {
    std::vector<std::string> sides = split_top(s, "=");
    const std::size_t in = s.find("\\in");  // x \in [2, 5] (not \infty)
    if (sides.size() == 1 && in != std::string::npos && in + 3 < s.size() && !std::isalpha(static_cast<unsigned char>(s[in + 3])))
      sides = split_top(s, "\\in");
    if (sides.size() == 2 && is_simple_lhs(sides[0]) && !sides[1].empty()) {
      strip_thousands(sides[1]);
      return parse_part(sides[1], depth + 1);
    }
  }
  // bare lists: "1,2" (also "x=1,y=2")
  std::vector<std::string> elems = split_top(s, ",");
  if (elems.size() > 1) {
    p.kind = Part::kList;
    for (const auto& e : elems) p.items.push_back(parse_part(e, depth + 1));
    return p;
  }
  // "and" / "or" between answers
  for (const char* sep : {"\\text{and}", "and", "or", "\\text{or}"}) {
    std::vector<std::string> parts = split_top(s, sep);
    if (parts.size() > 1 && std::all_of(parts.begin(), parts.end(), [](const std::string& x) { return !x.empty(); })) {
      bool numbers = true;
      for (const auto& x : parts) numbers = numbers && !x.empty() && !std::isalpha(static_cast<unsigned char>(x.back()));
      if (numbers) {
        p.kind = Part::kList;
        for (const auto& e : parts) p.items.push_back(parse_part(e, depth + 1));
        return p;
      }
    }
  }
  // equations: "x=3" -> "3" (the last side, as Minerva), when the left is a name
  std::vector<std::string> sides = split_top(s, "=");
  if (sides.size() >= 2 && is_simple_lhs(sides.front()) && !sides.back().empty()) {
    std::string rhs = sides.back();
    strip_thousands(rhs);
    return parse_part(rhs, depth + 1);
  }
  // a \pm b -> {a + b, a - b}
  if (s.find("\\pm") != std::string::npos && s.find("\\pm") == s.rfind("\\pm")) {
    std::string plus = s, minus = s;
    replace_all(plus, "\\pm", "+");
    replace_all(minus, "\\pm", "-");
    if (!plus.empty() && plus[0] == '+') plus.erase(0, 1);
    p.kind = Part::kList;
    p.items.push_back(scalar(plus));
    p.items.push_back(scalar(minus));
    return p;
  }
  return scalar(s);
}

// ---- scalar comparison ----

using C = std::complex<double>;

bool close_enough(C a, C b, double rtol) {
  const double scale = std::max({std::abs(a), std::abs(b), 1e-12});
  return std::abs(a - b) <= rtol * scale || std::abs(a - b) <= 1e-12;
}

bool looks_like_text(const std::string& s) {
  // a run of 3+ letters not part of a \command: words ("Evelyn", "odd"), not expressions
  std::size_t run = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
      while (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) ++i;
      --i;
      run = 0;
      continue;
    }
    run = std::isalpha(static_cast<unsigned char>(s[i])) ? run + 1 : 0;
    if (run >= 3) return true;
  }
  return false;
}

std::string text_key(std::string s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c)) && c != '{' && c != '}' && c != '(' && c != ')' && c != '.')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct ScalarCompare {
  const CompareOptions& opt;
  bool timed_out = false;
  std::string rule;

  bool over_budget() {
    if (std::chrono::steady_clock::now() > opt.deadline) timed_out = true;
    return timed_out;
  }

  // a and b: normalized scalars. percent handled by the caller.
  bool equal(const std::string& a, const std::string& b, double scale_a = 1.0) {
    if (scale_a == 1.0 && a == b) {
      rule = "exact";
      return true;
    }
    if (over_budget()) return false;
    if (looks_like_text(a) || looks_like_text(b)) {
      if (scale_a == 1.0 && text_key(a) == text_key(b)) {
        rule = "text";
        return true;
      }
      if (looks_like_text(a) && looks_like_text(b)) return false;
    }
    ParseLimits limits;
    limits.max_chars = opt.max_chars;
    std::string why;
    NodePtr x = parse_latex(a, limits, &why);
    NodePtr y = parse_latex(b, limits, &why);
    if (!x || !y) return false;
    const bool vars = has_variables(*x) || has_variables(*y);
    if (!vars) {
      Rational rx = exact_value(*x), ry = exact_value(*y);
      if (scale_a != 1.0 && rx.ok) rx = exact_scaled(rx, scale_a);
      if (rx.ok && ry.ok) {
        rule = "numeric";
        return rational_equal(rx, ry);
      }
      const C vx = numeric_value(*x, {}, {}) * scale_a, vy = numeric_value(*y, {}, {});
      if (std::isnan(vx.real()) || std::isnan(vy.real())) return false;
      rule = "numeric";
      return close_enough(vx, vy, opt.relative_tolerance);
    }
    if (scale_a != 1.0) return false;
    // Expressions with variables: GiNaC first, then a numeric identity test at random points.
    if (opt.use_ginac) {
      bool attempted = false;
      if (ginac_equal(*x, *y, 200, &attempted)) {
        rule = "symbolic";
        return true;
      }
    }
    if (over_budget()) return false;
    std::vector<std::string> names;
    collect_variables(*x, names);
    std::vector<std::string> names_y;
    collect_variables(*y, names_y);
    for (const auto& n : names_y)
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    static const double kPoints[4][3] = {{0.6180339, 1.4142135, 0.7320508},
                                         {1.2718281, 0.5772156, 1.6487212},
                                         {0.8414709, 1.1892071, 0.3678794},
                                         {1.9129311, 0.4342944, 1.3862943}};
    int agreeing = 0, valid = 0;
    for (int k = 0; k < 4; ++k) {
      std::vector<C> point;
      for (std::size_t v = 0; v < names.size(); ++v)
        point.push_back(C(kPoints[k][v % 3] + 0.11 * static_cast<double>(v / 3), 0.0));
      const C vx = numeric_value(*x, names, point), vy = numeric_value(*y, names, point);
      if (std::isnan(vx.real()) || std::isnan(vy.real())) continue;
      // Points where both sides vanish or underflow (x^{10^6} at x < 1) tell nothing.
      if (std::abs(vx) < 1e-9 && std::abs(vy) < 1e-9) continue;
      ++valid;
      if (close_enough(vx, vy, std::max(opt.relative_tolerance, 1e-9))) ++agreeing;
    }
    if (valid >= 2 && agreeing == valid) {
      rule = "numeric_identity";
      return true;
    }
    return false;
  }

  static Rational exact_scaled(const Rational& r, double scale) {
    // scale is 1/100 (percent) only
    if (scale == 0.01) return make_rational(r.num, r.den * 100);
    return Rational{0, 1, false};
  }
};

bool parts_equal(const Part& a, const Part& b, ScalarCompare& cmp);

bool unordered_equal(const std::vector<Part>& a, const std::vector<Part>& b, ScalarCompare& cmp) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const Part& x : a) {
    bool found = false;
    for (std::size_t j = 0; j < b.size() && !found; ++j)
      if (!used[j] && parts_equal(x, b[j], cmp)) used[j] = found = true;
    if (!found) return false;
  }
  return true;
}

bool ordered_equal(const std::vector<Part>& a, const std::vector<Part>& b, ScalarCompare& cmp) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!parts_equal(a[i], b[i], cmp)) return false;
  return true;
}

bool parts_equal(const Part& a, const Part& b, ScalarCompare& cmp) {
  if (cmp.timed_out) return false;
  if (a.kind == Part::kScalar && b.kind == Part::kScalar) {
    if (cmp.equal(a.text, b.text)) return true;
    // 10\% vs 10 (the same written number) and 10\% vs 0.1 (its value)
    if (a.percent && !b.percent) return cmp.equal(a.text, b.text, 0.01);
    if (b.percent && !a.percent) return cmp.equal(b.text, a.text, 0.01);
    return false;
  }
  // one-element containers vs a scalar: {3} vs 3
  if (a.kind == Part::kScalar && b.items.size() == 1 && b.kind != Part::kSequence) return parts_equal(a, b.items[0], cmp);
  if (b.kind == Part::kScalar && a.items.size() == 1 && a.kind != Part::kSequence) return parts_equal(a.items[0], b, cmp);
  if (a.kind == Part::kSequence && b.kind == Part::kSequence)
    return a.open == b.open && a.close == b.close && ordered_equal(a.items, b.items, cmp);
  if (a.kind == Part::kMatrix && b.kind == Part::kMatrix) return ordered_equal(a.items, b.items, cmp);
  if (a.kind == Part::kUnion && b.kind == Part::kUnion) return unordered_equal(a.items, b.items, cmp);
  // a column vector written as a matrix vs a tuple
  if ((a.kind == Part::kMatrix && b.kind == Part::kSequence) || (a.kind == Part::kSequence && b.kind == Part::kMatrix)) {
    const Part& m = a.kind == Part::kMatrix ? a : b;
    const Part& t = a.kind == Part::kMatrix ? b : a;
    std::vector<Part> cells;
    for (const Part& row : m.items)
      for (const Part& c : row.items) cells.push_back(c);
    return ordered_equal(cells, t.items, cmp);
  }
  // lists and sets: unordered (MATH: "enter all solutions, separated by commas")
  const bool a_multi = a.kind == Part::kList || a.kind == Part::kSet;
  const bool b_multi = b.kind == Part::kList || b.kind == Part::kSet;
  if (a_multi && b_multi) return unordered_equal(a.items, b.items, cmp);
  // a bare list vs a tuple: ordered ("1, 2" vs "(1, 2)")
  if ((a.kind == Part::kList && b.kind == Part::kSequence && b.open == '(') ||
      (b.kind == Part::kList && a.kind == Part::kSequence && a.open == '('))
    return ordered_equal(a.items, b.items, cmp);
  return false;
}

}  // namespace

Verdict answers_equal(std::string_view given, std::string_view truth, const CompareOptions& options) {
  Verdict v;
  const std::string a = normalize_answer(given), b = normalize_answer(truth);
  if (a.empty() || b.empty()) {
    v.reason = a.empty() ? "empty answer" : "empty ground truth";
    return v;
  }
  if (a == b) {
    v.equal = true;
    v.rule = "exact";
    return v;
  }
  if (a.size() > options.max_chars || b.size() > options.max_chars) {
    v.reason = "answer longer than " + std::to_string(options.max_chars) + " characters: compared as text only";
    return v;
  }
  ScalarCompare cmp{options};
  const Part pa = parse_part(a, 0), pb = parse_part(b, 0);
  v.equal = parts_equal(pa, pb, cmp);
  v.timed_out = cmp.timed_out;
  if (v.timed_out) {
    v.equal = false;
    v.reason = "time budget exceeded";
    return v;
  }
  v.rule = v.equal ? (cmp.rule.empty() ? "exact" : cmp.rule) : "none";
  if (!v.equal) v.reason = "not equivalent";
  return v;
}

}  // namespace grpo_math
