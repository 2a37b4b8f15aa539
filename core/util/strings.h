// Small string helpers shared by the runtime (suggestions in error messages, joining).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::core {

// Levenshtein distance (insert, delete, substitute all cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is close enough to be a plausible typo
// (distance at most max(2, |word|/3)). Used for "did you mean ...?".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "" — appended to "unknown ..." messages.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, std::string_view separator);

// A tensor shape as "[2, 3]" ("[]" for a scalar), for error messages.
std::string shape_text(const std::vector<int64_t>& shape);

std::string_view trim(std::string_view s);

// `s` with every byte that is not part of well-formed UTF-8 written as "\xNN" (lowercase hex), so
// that untrusted text cannot make a log undecodable; well-formed text, multi-byte characters
// included, is copied as is. Each maximal ill-formed subsequence (grpo/sdk/utf8.h) is escaped byte
// by byte: "a\xC3(" -> "a\xc3(".
std::string escape_invalid_utf8(std::string_view s);

bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

}  // namespace grpo::core
