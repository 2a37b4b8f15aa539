// grpo/sdk/utf8.h: encodings checked byte by byte against hand-computed values (RFC 3629
// examples), and the decoding policy for ill-formed input (U+FFFD per maximal subpart,
// Unicode chapter 3.9, table 3-8).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "grpo/sdk/utf8.h"

namespace {

using grpo::sdk::append_utf8;
using grpo::sdk::decode_utf8;
using grpo::sdk::decode_utf8_at;
using grpo::sdk::first_invalid_utf8;
using grpo::sdk::kReplacementCharacter;
using grpo::sdk::to_valid_utf8;

std::string encode(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// (code point, length) of every step of a walk over `s`.
struct Step {
  char32_t cp;
  std::size_t len;
  bool operator==(const Step& o) const { return cp == o.cp && len == o.len; }
};
std::vector<Step> walk(std::string_view s) {
  std::vector<Step> out;
  for (std::size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t cp = decode_utf8_at(s, i, &len);
    out.push_back({cp, len});
  }
  return out;
}

constexpr char32_t kFFFD = 0xFFFD;

TEST(Utf8, EncodesKnownCodePoints) {
  EXPECT_EQ(encode(0x24), "\x24");                  // $
  EXPECT_EQ(encode(0xA2), "\xC2\xA2");              // cent sign
  EXPECT_EQ(encode(0x20AC), "\xE2\x82\xAC");        // euro sign
  EXPECT_EQ(encode(0x10348), "\xF0\x90\x8D\x88");   // Gothic letter hwair
  EXPECT_EQ(encode(0xFFFD), "\xEF\xBF\xBD");
  EXPECT_EQ(encode(0x0120), "\xC4\xA0");            // GPT-2's byte-level space
}

TEST(Utf8, EncodesEachLengthBoundary) {
  EXPECT_EQ(encode(0x00), std::string(1, '\0'));
  EXPECT_EQ(encode(0x7F), "\x7F");
  EXPECT_EQ(encode(0x80), "\xC2\x80");
  EXPECT_EQ(encode(0x7FF), "\xDF\xBF");
  EXPECT_EQ(encode(0x800), "\xE0\xA0\x80");
  EXPECT_EQ(encode(0xFFFF), "\xEF\xBF\xBF");
  EXPECT_EQ(encode(0x10000), "\xF0\x90\x80\x80");
  EXPECT_EQ(encode(0x10FFFF), "\xF4\x8F\xBF\xBF");
}

TEST(Utf8, EncodesSurrogatesUncheckedAndDecodingRejectsThem) {
  // append_utf8 does not validate: a surrogate gets its 3-byte pattern...
  EXPECT_EQ(encode(0xD800), "\xED\xA0\x80");
  // ...which is ill-formed: ED then A0 (above 9F) ends the subpart at one byte each time.
  EXPECT_EQ(decode_utf8("\xED\xA0\x80"), std::u32string({kFFFD, kFFFD, kFFFD}));
}

TEST(Utf8, AppendsToExistingText) {
  std::string s = "a";
  append_utf8(s, 0x20AC);
  append_utf8(s, U'b');
  EXPECT_EQ(s, "a\xE2\x82\xAC" "b");
}

TEST(Utf8, DecodesKnownSequencesWithTheirLengths) {
  EXPECT_EQ(walk("\x24"), (std::vector<Step>{{0x24, 1}}));
  EXPECT_EQ(walk("\xC2\xA2"), (std::vector<Step>{{0xA2, 2}}));
  EXPECT_EQ(walk("\xE2\x82\xAC"), (std::vector<Step>{{0x20AC, 3}}));
  EXPECT_EQ(walk("\xF0\x90\x8D\x88"), (std::vector<Step>{{0x10348, 4}}));
  EXPECT_EQ(walk("\xED\x9F\xBF"), (std::vector<Step>{{0xD7FF, 3}}));  // last before the surrogates
  EXPECT_EQ(walk("\xEE\x80\x80"), (std::vector<Step>{{0xE000, 3}}));  // first after them
  EXPECT_EQ(walk("\xF4\x8F\xBF\xBF"), (std::vector<Step>{{0x10FFFF, 4}}));
}

TEST(Utf8, DecodesAtAnOffsetWithoutLength) {
  const std::string s = "x\xE2\x82\xAC";
  EXPECT_EQ(decode_utf8_at(s, 0), U'x');
  EXPECT_EQ(decode_utf8_at(s, 1), U'\u20AC');
  EXPECT_EQ(decode_utf8_at(s, 2), kFFFD);  // a continuation byte alone
}

TEST(Utf8, DecodesAWholeString) {
  EXPECT_EQ(decode_utf8(""), std::u32string());
  EXPECT_EQ(decode_utf8("\x24\xC2\xA2\xE2\x82\xAC\xF0\x90\x8D\x88"), std::u32string(U"\u0024\u00A2\u20AC\U00010348"));
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = encode(cp);
    ASSERT_EQ(s.size(), cp < 0x80 ? 1u : cp < 0x800 ? 2u : cp < 0x10000 ? 3u : 4u) << std::hex << cp;
    std::size_t len = 0;
    ASSERT_EQ(decode_utf8_at(s, 0, &len), cp) << std::hex << cp;
    ASSERT_EQ(len, s.size()) << std::hex << cp;
  }
}

TEST(Utf8, IllFormedBytesBecomeOneReplacementPerMaximalSubpart) {
  EXPECT_EQ(kReplacementCharacter, kFFFD);
  // A lone continuation byte, bytes that never occur.
  EXPECT_EQ(walk("\x80"), (std::vector<Step>{{kFFFD, 1}}));
  EXPECT_EQ(walk("\xBF"), (std::vector<Step>{{kFFFD, 1}}));
  EXPECT_EQ(walk("\xFF"), (std::vector<Step>{{kFFFD, 1}}));
  EXPECT_EQ(walk("\xF5\x80"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}}));
  // Overlong forms: C0/C1 never start a sequence, E0 needs A0..BF, F0 needs 90..BF.
  EXPECT_EQ(walk("\xC0\xAF"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}}));
  EXPECT_EQ(walk("\xC1\xBF"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}}));
  EXPECT_EQ(walk("\xE0\x80\xAF"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}, {kFFFD, 1}}));
  EXPECT_EQ(walk("\xF0\x80\x80\xAF"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}, {kFFFD, 1}, {kFFFD, 1}}));
  // Above U+10FFFF: F4 needs 80..8F.
  EXPECT_EQ(walk("\xF4\x90\x80\x80"), (std::vector<Step>{{kFFFD, 1}, {kFFFD, 1}, {kFFFD, 1}, {kFFFD, 1}}));
  // Truncated sequences: the whole valid prefix is one replacement.
  EXPECT_EQ(walk("\xC2"), (std::vector<Step>{{kFFFD, 1}}));
  EXPECT_EQ(walk("\xE2\x82"), (std::vector<Step>{{kFFFD, 2}}));
  EXPECT_EQ(walk("\xF0\x90\x8D"), (std::vector<Step>{{kFFFD, 3}}));
  // A byte that cannot continue is not swallowed: it starts over.
  EXPECT_EQ(walk("\xC3" "A"), (std::vector<Step>{{kFFFD, 1}, {U'A', 1}}));
  EXPECT_EQ(walk("\xE2\x82" "A"), (std::vector<Step>{{kFFFD, 2}, {U'A', 1}}));
  EXPECT_EQ(walk("\xE2\xC2\xA2"), (std::vector<Step>{{kFFFD, 1}, {0xA2, 2}}));
}

TEST(Utf8, UnicodeTable3_8Example) {
  // The Unicode Standard, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  EXPECT_EQ(decode_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            std::u32string({0x61, kFFFD, kFFFD, kFFFD, 0x62, kFFFD, 0x63, kFFFD, kFFFD, 0x64}));
}

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(first_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("plain ASCII, longer than eight bytes"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("\x24\xC2\xA2\xE2\x82\xAC\xF0\x90\x8D\x88"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);
  // Past the 8-byte ASCII fast path, after a valid 2-byte sequence.
  EXPECT_EQ(first_invalid_utf8("abcdefgh\xC3\xA9ij\x80xyz"), 12u);
  // A truncated sequence at the end: its first byte.
  EXPECT_EQ(first_invalid_utf8("abc\xE2\x82"), 3u);
  EXPECT_EQ(first_invalid_utf8("abc\xED\xA0\x80"), 3u);  // a surrogate
}

TEST(Utf8, ToValidReplacesEachMaximalSubpart) {
  EXPECT_EQ(to_valid_utf8("caf\xC3\xA9"), "caf\xC3\xA9");  // well-formed: unchanged
  EXPECT_EQ(to_valid_utf8("a\xE2\x82" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xE2\x82\xAC\xF0\x90\x8D"), "\xE2\x82\xAC\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d");
}

}  // namespace
