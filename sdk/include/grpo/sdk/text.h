// Small text helpers for verifiers (torch-free, header-only).
#pragma once

#include <string>
#include <string_view>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

// `s` cut to at most `limit` bytes on a UTF-8 character boundary, the cut marked as
// "...[N more bytes]": for echoing completions into a result's details without bloating logs.
inline std::string clip_utf8(std::string_view s, std::size_t limit) {
  if (s.size() <= limit) return std::string(s);
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...[" + std::to_string(s.size() - cut) + " more bytes]";
}

GRPO_SDK_NAMESPACE_END
