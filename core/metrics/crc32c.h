// CRC-32C (Castagnoli): the checksum of TFRecord framing in TensorBoard event files and of
// checkpoint files (trainer_state.json records one per file). SSE4.2 hardware where the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace grpo::core {

// CRC-32C of `n` bytes (reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF), so
// crc32c("123456789", 9) == 0xE3069283. `crc` is the value of the bytes before these, which
// lets a buffer be checksummed in pieces: crc32c(b, nb, crc32c(a, na)) == crc32c(a + b).
std::uint32_t crc32c(const void* data, std::size_t n, std::uint32_t crc = 0);

// TensorFlow's crc32c::Mask, ((crc >> 15) | (crc << 17)) + 0xa282ead8: TFRecords store masked CRCs so
// that the CRC of data which itself holds CRCs stays well distributed.
std::uint32_t mask_crc32c(std::uint32_t crc);

// mask_crc32c(crc32c(data, n)): the checksum a TFRecord stores.
std::uint32_t masked_crc32c(const void* data, std::size_t n);

}  // namespace grpo::core
