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

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return tables().byte_to_str[b]; }

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

}  // namespace grpo::core::unicode
