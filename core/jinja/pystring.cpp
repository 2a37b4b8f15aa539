#include "core/jinja/pystring.h"

#include <utf8proc.h>

#include <algorithm>

#include "grpo/sdk/utf8.h"

namespace grpo::core::jinja::py {

std::vector<std::uint32_t> code_points(std::string_view s) {
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    out.push_back(::grpo::sdk::decode_utf8_at(s, i, &len));
    i += len;
  }
  return out;
}

std::string from_code_points(const std::vector<std::uint32_t>& cps, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end && i < cps.size(); ++i) ::grpo::sdk::append_utf8(out, cps[i]);
  return out;
}

std::size_t length(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    ::grpo::sdk::decode_utf8_at(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

bool is_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

namespace {

std::string encode(const std::vector<std::uint32_t>& cps) { return from_code_points(cps, 0, cps.size()); }

struct StripSet {
  std::optional<std::vector<std::uint32_t>> chars;
  bool operator()(std::uint32_t cp) const {
    if (!chars) return is_space(cp);
    return std::find(chars->begin(), chars->end(), cp) != chars->end();
  }
};

StripSet strip_set(const std::optional<std::string>& chars) {
  StripSet s;
  if (chars) s.chars = code_points(*chars);
  return s;
}

std::string strip_impl(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = code_points(s);
  const StripSet in = strip_set(chars);
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && in(cps[b])) ++b;
  if (right)
    while (e > b && in(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

std::uint32_t map_case(std::uint32_t cp, int which) {
  if (cp > 0x10FFFF) return cp;
  const auto c = static_cast<utf8proc_int32_t>(cp);
  switch (which) {
    case 0: return static_cast<std::uint32_t>(utf8proc_toupper(c));
    case 1: return static_cast<std::uint32_t>(utf8proc_tolower(c));
    default: return static_cast<std::uint32_t>(utf8proc_totitle(c));
  }
}

bool is_cased(std::uint32_t cp) {
  if (cp > 0x10FFFF) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

template <typename Pred>
bool all_of_nonempty(std::string_view s, Pred pred) {
  const auto cps = code_points(s);
  if (cps.empty()) return false;
  return std::all_of(cps.begin(), cps.end(), pred);
}

utf8proc_category_t category(std::uint32_t cp) {
  return cp > 0x10FFFF ? UTF8PROC_CATEGORY_CN : utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool is_digit(std::uint32_t cp) {
  // Python's isdigit: Numeric_Type Digit or Decimal; Nd covers the decimals, plus the
  // superscripts and circled digits that chat text may hold.
  return category(cp) == UTF8PROC_CATEGORY_ND || (cp >= 0xB2 && cp <= 0xB3) || cp == 0xB9 ||
         (cp >= 0x2070 && cp <= 0x2079 && cp != 0x2071 && cp != 0x2072 && cp != 0x2073) ||
         (cp >= 0x2080 && cp <= 0x2089) || (cp >= 0x2460 && cp <= 0x2468) || (cp >= 0x2474 && cp <= 0x247C) ||
         (cp >= 0x2488 && cp <= 0x2490) || cp == 0x24EA || (cp >= 0x24F5 && cp <= 0x24FD) || cp == 0x24FF ||
         (cp >= 0x2776 && cp <= 0x277E) || (cp >= 0x2780 && cp <= 0x2788) || (cp >= 0x278A && cp <= 0x2792);
}

// Byte offset of the code point index `cp_index` in s (s.size() past the end).
std::size_t byte_offset_to_cp(std::string_view s, std::size_t byte_offset) {
  return length(s.substr(0, byte_offset));
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars) { return strip_impl(s, chars, true, true); }
std::string lstrip(std::string_view s, const std::optional<std::string>& chars) { return strip_impl(s, chars, true, false); }
std::string rstrip(std::string_view s, const std::optional<std::string>& chars) { return strip_impl(s, chars, false, true); }

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<long long>(out.size()) < maxsplit) {
      const std::size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const auto cps = code_points(s);
  std::size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
      // The rest, leading whitespace removed, trailing kept (CPython).
      out.push_back(from_code_points(cps, i, cps.size()));
      return out;
    }
    std::size_t j = i;
    while (j < cps.size() && !is_space(cps[j])) ++j;
    out.push_back(from_code_points(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t end = s.size();
    while (maxsplit < 0 || static_cast<long long>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const std::size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  const auto cps = code_points(s);
  std::size_t j = cps.size();
  while (j > 0) {
    while (j > 0 && is_space(cps[j - 1])) --j;
    if (j == 0) break;
    if (maxsplit >= 0 && static_cast<long long>(out.size()) >= maxsplit) {
      out.push_back(from_code_points(cps, 0, j));
      break;
    }
    std::size_t i = j;
    while (i > 0 && !is_space(cps[i - 1])) --i;
    out.push_back(from_code_points(cps, i, j));
    j = i;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const auto cps = code_points(s);
  std::size_t start = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const std::uint32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    const std::size_t line_end = i;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(from_code_points(cps, start, keepends ? i + 1 : line_end));
    start = i + 1;
  }
  if (start < cps.size()) out.push_back(from_code_points(cps, start, cps.size()));
  return out;
}

namespace {

// SpecialCasing.txt's unconditional one-to-many mappings of the characters chat text meets:
// {code point, upper, title, lower} ("" = the simple mapping).
struct SpecialCase {
  std::uint32_t cp;
  const char* upper;
  const char* title;
  const char* lower;
};
constexpr SpecialCase kSpecialCases[] = {
    {0x00DF, "SS", "Ss", ""},                     // ß
    {0x0130, "", "", "i\xCC\x87"},                // İ
    {0x0149, "\xCA\xBCN", "\xCA\xBCN", ""},       // ŉ
    {0xFB00, "FF", "Ff", ""}, {0xFB01, "FI", "Fi", ""}, {0xFB02, "FL", "Fl", ""},
    {0xFB03, "FFI", "Ffi", ""}, {0xFB04, "FFL", "Ffl", ""}, {0xFB05, "ST", "St", ""}, {0xFB06, "ST", "St", ""},
};

// Appends the mapping of `cp` (0 upper, 1 lower, 2 title).
void append_case(std::string& out, std::uint32_t cp, int which) {
  for (const SpecialCase& sc : kSpecialCases) {
    if (sc.cp != cp) continue;
    const char* m = which == 0 ? sc.upper : which == 1 ? sc.lower : sc.title;
    if (*m) {
      out += m;
      return;
    }
  }
  ::grpo::sdk::append_utf8(out, map_case(cp, which));
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  for (std::uint32_t c : code_points(s)) append_case(out, c, 0);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  for (std::uint32_t c : code_points(s)) append_case(out, c, 1);
  return out;
}

std::string casefold(std::string_view s) {
  std::string out;
  for (std::uint32_t c : code_points(s)) {
    if (c == 0x00DF) out += "ss";
    else if (c == 0x03C2) out += "\xCF\x83";  // final sigma folds to σ
    else append_case(out, c, 1);
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (std::uint32_t c : code_points(s)) {
    const bool cased = is_cased(c);
    append_case(out, c, prev_cased ? 1 : 2);
    prev_cased = cased;
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (std::uint32_t c : code_points(s)) {
    append_case(out, c, first ? 2 : 1);
    first = false;
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, long long count) {
  std::string out;
  if (old.empty()) {
    const auto cps = code_points(s);
    long long n = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += with;
        ++n;
      }
      if (i < cps.size()) ::grpo::sdk::append_utf8(out, cps[i]);
    }
    return out;
  }
  std::size_t pos = 0;
  long long n = 0;
  while (count < 0 || n < count) {
    const std::size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(with);
    pos = hit + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

long long find(std::string_view s, std::string_view sub) {
  const std::size_t hit = s.find(sub);
  return hit == std::string_view::npos ? -1 : static_cast<long long>(byte_offset_to_cp(s, hit));
}

long long rfind(std::string_view s, std::string_view sub) {
  const std::size_t hit = s.rfind(sub);
  return hit == std::string_view::npos ? -1 : static_cast<long long>(byte_offset_to_cp(s, hit));
}

long long count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<long long>(length(s)) + 1;
  long long n = 0;
  for (std::size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

bool is_alpha(std::uint32_t cp) {
  const auto cat = category(cp);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
         cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
}

bool is_digit_str(std::string_view s) { return all_of_nonempty(s, is_digit); }
bool is_alpha_str(std::string_view s) { return all_of_nonempty(s, is_alpha); }
bool is_alnum_str(std::string_view s) {
  return all_of_nonempty(s, [](std::uint32_t c) {
    const auto cat = category(c);
    return is_alpha(c) || is_digit(c) || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
  });
}
bool is_space_str(std::string_view s) { return all_of_nonempty(s, is_space); }

bool is_lower_str(std::string_view s) {
  bool any = false;
  for (std::uint32_t c : code_points(s)) {
    const auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LL) any = true;
  }
  return any;
}

bool is_upper_str(std::string_view s) {
  bool any = false;
  for (std::uint32_t c : code_points(s)) {
    const auto cat = category(c);
    if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LU) any = true;
  }
  return any;
}

}  // namespace grpo::core::jinja::py
