#include "core/tokenizer/unicode.h"

#include <array>
#include <vector>

namespace grpo::core::unicode {

namespace {

struct ByteTables {
  std::array<std::string, 256> byte_to_str;
  std::array<int, 512> cp_to_byte;  // code points used are < 0x144
  ByteTables() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      std::uint32_t cp = is_gpt2_printable(b) ? static_cast<std::uint32_t>(b) : 256u + static_cast<std::uint32_t>(n++);
      append_utf8(byte_to_str[static_cast<std::size_t>(b)], cp);
      cp_to_byte[cp] = b;
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7), 0 when ill-formed;
// *maximal gets the length of the maximal ill-formed prefix (at least 1) when ill-formed.
std::size_t sequence_length(std::string_view s, std::size_t i, std::size_t* maximal) {
  auto at = [&](std::size_t k) -> int { return k < s.size() ? static_cast<unsigned char>(s[k]) : -1; };
  int b0 = at(i);
  std::size_t need;
  int lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *maximal = 1;
    return 0;
  }
  for (std::size_t k = 1; k < need; ++k) {
    int b = at(i + k);
    int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *maximal = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

void append_utf8(std::string& out, std::uint32_t cp) {
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

const std::string& byte_to_unicode(unsigned char b) { return tables().byte_to_str[b]; }

std::uint32_t decode_at(std::string_view s, std::size_t pos, std::size_t* len) {
  std::size_t maximal = 1;
  std::size_t n = sequence_length(s, pos, &maximal);
  if (n == 0) {
    if (len) *len = maximal;
    return 0xFFFD;
  }
  if (len) *len = n;
  auto b = [&](std::size_t k) { return static_cast<std::uint32_t>(static_cast<unsigned char>(s[pos + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const ByteTables& t = tables();
  out.clear();
  for (std::size_t i = 0; i < token.size();) {
    std::size_t len = 1;
    std::uint32_t cp = decode_at(token, i, &len);
    if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return false;
    out += static_cast<char>(t.cp_to_byte[cp]);
    i += len;
  }
  return true;
}

std::size_t first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, 8 bytes at a time
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t maximal = 1;
    std::size_t n = sequence_length(s, i, &maximal);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  if (first_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t maximal = 1;
    std::size_t n = sequence_length(s, i, &maximal);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace grpo::core::unicode
