// GPT-2 byte-level helpers used by the tokenizer, and the UTF-8 codec it uses (the SDK's,
// grpo/sdk/utf8.h: torch-free, header-only).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "grpo/sdk/utf8.h"

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

// UTF-8 (grpo/sdk/utf8.h): well-formed per Unicode table 3-7, each maximal ill-formed
// subsequence read as U+FFFD (what Rust's String::from_utf8_lossy and Hugging Face's decode do).
using ::grpo::sdk::append_utf8;
using ::grpo::sdk::first_invalid_utf8;
using ::grpo::sdk::to_valid_utf8;

// The code point at `pos` (U+FFFD on malformed input); its length in bytes goes to *len.
inline std::uint32_t decode_at(std::string_view s, std::size_t pos, std::size_t* len = nullptr) {
  return ::grpo::sdk::decode_utf8_at(s, pos, len);
}

}  // namespace grpo::core::unicode
