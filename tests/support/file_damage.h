// Damage a file the way a failing disk or a stray write does: same size, one byte changed, so
// that only a checksum can tell; or a weight file the way a diverged run does (NaN values).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/model/safetensors.h"

namespace grpo::testing {

inline void flip_middle_byte(const std::filesystem::path& path) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  ASSERT_GT(bytes.size(), 100u) << path;
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every value of the F32 tensor `tensor` in a safetensors file becomes a quiet NaN (0x7FC00000),
// in place: what a diverged run saves. The header, and so every shape check, stays valid.
inline void fill_tensor_with_nan(const std::filesystem::path& path, const std::string& tensor) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  const auto header = core::parse_safetensors(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), path.string());
  for (const auto& info : header.tensors) {
    if (info.name != tensor) continue;
    ASSERT_EQ(info.dtype, core::StDType::F32) << tensor;
    const std::uint32_t nan = 0x7FC00000U;
    for (std::uint64_t i = 0; i < info.numel(); ++i)
      std::memcpy(&bytes[header.data_offset + info.begin + 4 * i], &nan, sizeof nan);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return;
  }
  FAIL() << path << " has no tensor " << tensor;
}

}  // namespace grpo::testing
