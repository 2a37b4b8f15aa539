#include "core/metrics/crc32c.h"

#include <array>

namespace grpo::core {

namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78u;
constexpr std::uint32_t kMaskDelta = 0xa282ead8u;

// One byte-at-a-time table; event records are a few hundred bytes per step, so slicing-by-8
// would buy nothing measurable.
constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<std::uint32_t, 256> kTable = make_table();

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return ~c;
}

std::uint32_t mask_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

std::uint32_t masked_crc32c(const void* data, std::size_t n) { return mask_crc32c(crc32c(data, n)); }

}  // namespace grpo::core
