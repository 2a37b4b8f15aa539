// UTF-8 and GPT-2 byte-level helpers used by the tokenizer (no dependencies).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace grpo::core::unicode {

// Whether GPT-2's bytes_to_unicode() maps byte `b` to itself ('!'..'~', '¡'..'¬', '®'..'ÿ');
// the other bytes map to U+0100 + n in byte order. Also the id order of byte-level vocabularies.
constexpr bool is_gpt2_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

// The UTF-8 text of the character GPT-2's bytes_to_unicode() maps byte `b` to
// (printable bytes map to themselves, the others to U+0100 + n, e.g. ' ' -> "Ġ").
const std::string& byte_to_unicode(unsigned char b);

// Maps every character of a byte-level token back to its byte. Returns false (and leaves
// `out` unspecified) when a character is not in the byte-level alphabet.
bool byte_level_decode(std::string_view token, std::string& out);

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
std::size_t first_invalid_utf8(std::string_view s);

// `s` with every maximal ill-formed subsequence replaced by U+FFFD (what Rust's
// String::from_utf8_lossy and Hugging Face's decode do).
std::string to_valid_utf8(std::string_view s);

// Decodes the code point at `pos` of well-formed UTF-8 (U+FFFD on malformed input); its length
// in bytes goes to *len when given.
std::uint32_t decode_at(std::string_view s, std::size_t pos, std::size_t* len = nullptr);

// Appends the UTF-8 encoding of `cp`.
void append_utf8(std::string& out, std::uint32_t cp);

}  // namespace grpo::core::unicode
