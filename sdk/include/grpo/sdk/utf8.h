// UTF-8 encoding and decoding for plugins (torch-free, header-only).
//
// Decoding accepts exactly the well-formed sequences of the Unicode Standard (chapter 3,
// table 3-7): overlong forms, surrogates (U+D800..U+DFFF) and values above U+10FFFF are
// ill-formed. Each maximal ill-formed subsequence (the longest prefix of a sequence that
// table 3-7 could still complete, at least one byte) decodes as one U+FFFD: the "substitution
// of maximal subparts" of Unicode chapter 3.9, as Python's bytes.decode("utf-8", "replace"),
// Rust's String::from_utf8_lossy and Hugging Face's decoders do. Decoding never throws:
//   "\x24"             -> U+0024              "\xC2\xA2"     -> U+00A2
//   "\xE2\x82\xAC"     -> U+20AC              "\xF0\x90\x8D\x88" -> U+10348
//   "\xE2\x82"         -> U+FFFD (truncated: one replacement for both bytes)
//   "\xC3" "A"         -> U+FFFD 'A' (a byte that cannot continue starts over)
//   "\xC0\xAF"         -> U+FFFD U+FFFD (C0 and C1 only start overlong forms)
//   "\xED\xA0\x80"     -> U+FFFD U+FFFD U+FFFD (a surrogate)
//   "\xF4\x90\x80\x80" -> four U+FFFD (above U+10FFFF)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

// What ill-formed input decodes to.
inline constexpr char32_t kReplacementCharacter = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (1 to 4 bytes). `cp` is not checked: pass a Unicode
// scalar value (U+0000..U+10FFFF, no surrogates) to get well-formed UTF-8; a surrogate gets
// its 3-byte pattern and U+110000..U+1FFFFF a 4-byte one, which decoding rejects.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace detail {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7), 0 when ill-formed;
// then *maximal gets the length of the maximal ill-formed subsequence (at least 1).
// Requires i < s.size().
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i, std::size_t* maximal) {
  auto at = [&](std::size_t k) -> int { return k < s.size() ? static_cast<unsigned char>(s[k]) : -1; };
  const int b0 = at(i);
  std::size_t need;
  int lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *maximal = 1;
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    const int b = at(i + k);
    const int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *maximal = k;
      return 0;
    }
  }
  return need;
}

}  // namespace detail

// The code point that starts at byte `pos` of `s` (pos < s.size()); its length in bytes
// (1 to 4) goes to *len when given. An ill-formed sequence gives U+FFFD and *len = the length
// of its maximal ill-formed subsequence, so that `pos += *len` walks any input.
inline char32_t decode_utf8_at(std::string_view s, std::size_t pos, std::size_t* len = nullptr) {
  std::size_t maximal = 1;
  const std::size_t n = detail::utf8_sequence_length(s, pos, &maximal);
  if (n == 0) {
    if (len) *len = maximal;
    return kReplacementCharacter;
  }
  if (len) *len = n;
  auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

// Every code point of `s`, each maximal ill-formed subsequence as one U+FFFD.
inline std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0, len = 1; i < s.size(); i += len) out += decode_utf8_at(s, i, &len);
  return out;
}

// Offset of the first byte of `s` that is not part of well-formed UTF-8, or npos.
inline std::size_t first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t maximal = 1;
    const std::size_t n = detail::utf8_sequence_length(s, i, &maximal);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

// `s` with every maximal ill-formed subsequence replaced by U+FFFD ("\xEF\xBF\xBD"); `s`
// itself when it is well-formed.
inline std::string to_valid_utf8(std::string_view s) {
  if (first_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t maximal = 1;
    const std::size_t n = detail::utf8_sequence_length(s, i, &maximal);
    if (n == 0) {
      append_utf8(out, kReplacementCharacter);
      i += maximal;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

GRPO_SDK_NAMESPACE_END
