// Python str semantics on UTF-8 strings, as chat templates use them through Jinja2: indexing
// and slicing by code point, str.isspace(), strip/split/splitlines, case mapping (utf8proc's
// simple per-character mappings; Python's full mappings differ only for a few characters such
// as 'ß'.upper() == 'SS').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::core::jinja::py {

// Case mapping is Python's: utf8proc's per-character mappings plus the unconditional
// one-to-many ones of SpecialCasing.txt that text meets (ß -> SS, ligatures, İ -> i̇).

// Code points of well-formed UTF-8 (malformed bytes read as U+FFFD).
std::vector<std::uint32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<std::uint32_t>& cps, std::size_t begin, std::size_t end);
std::size_t length(std::string_view s);  // len(s): code points

// str.isspace() of one character.
bool is_space(std::uint32_t cp);

// str.strip / lstrip / rstrip; `chars` unset: whitespace (is_space).
std::string strip(std::string_view s, const std::optional<std::string>& chars = std::nullopt);
std::string lstrip(std::string_view s, const std::optional<std::string>& chars = std::nullopt);
std::string rstrip(std::string_view s, const std::optional<std::string>& chars = std::nullopt);

// str.split(sep, maxsplit) and str.rsplit; sep unset: runs of whitespace, empties dropped.
// maxsplit < 0: no limit. An empty sep fails (ValueError in Python), as the caller reports.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, long long maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, long long maxsplit);
// str.splitlines(keepends) (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029).
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
std::string casefold(std::string_view s);
// str.replace(old, new, count); count < 0: all. An empty `old` inserts between characters.
std::string replace(std::string_view s, std::string_view old, std::string_view with, long long count = -1);
// str.find / rfind / count on code point positions; -1 when absent.
long long find(std::string_view s, std::string_view sub);
long long rfind(std::string_view s, std::string_view sub);
long long count(std::string_view s, std::string_view sub);

bool is_alpha(std::uint32_t cp);
bool is_digit_str(std::string_view s);  // str.isdigit()
bool is_alpha_str(std::string_view s);
bool is_alnum_str(std::string_view s);
bool is_space_str(std::string_view s);
bool is_lower_str(std::string_view s);
bool is_upper_str(std::string_view s);

}  // namespace grpo::core::jinja::py
