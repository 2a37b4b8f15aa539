// String helpers behind "did you mean" suggestions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/util/strings.h"

namespace {

using namespace grpo::core;

TEST(Strings, EditDistanceHandComputed) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);  // k->s, e->i, +g
  EXPECT_EQ(edit_distance("sitting", "kitten"), 3u);  // symmetric
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);       // -f, +n
  EXPECT_EQ(edit_distance("saturday", "sunday"), 3u);
  EXPECT_EQ(edit_distance("intention", "execution"), 5u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
  EXPECT_EQ(edit_distance("ouput_dir", "output_dir"), 1u);
  EXPECT_EQ(edit_distance("ab", "ba"), 2u);  // no transposition operation
}

TEST(Strings, ClosestMatchThresholds) {
  const std::vector<std::string> keys = {"output_dir", "seed"};
  EXPECT_EQ(closest_match("ouput_dir", keys), "output_dir");
  EXPECT_EQ(closest_match("sed", keys), "seed");
  EXPECT_EQ(closest_match("xyz", keys), "");
  EXPECT_EQ(closest_match("anything", {}), "");
  // Short words allow 2 edits: "abcdef" (6 letters, 6/3 = 2).
  EXPECT_EQ(closest_match("abcdef", {"abcdxy"}), "abcdxy");  // 2 edits
  EXPECT_EQ(closest_match("abcdef", {"abcxyz"}), "");        // 3 edits
  EXPECT_EQ(closest_match("ab", {"xy"}), "xy");              // 2 edits: still within max(2, 0)
  // Longer words allow |word|/3: 12 letters -> 4 edits.
  EXPECT_EQ(closest_match("abcdefghijkl", {"abcdefghwxyz"}), "abcdefghwxyz");  // 4 edits
  EXPECT_EQ(closest_match("abcdefghijkl", {"abcdefgvwxyz"}), "");              // 5 edits
  // The nearest wins; on a tie the first candidate.
  EXPECT_EQ(closest_match("seet", {"sheet", "seed", "set"}), "sheet");
  EXPECT_EQ(closest_match("seex", {"sheet", "seed"}), "seed");
}

TEST(Strings, DidYouMean) {
  EXPECT_EQ(did_you_mean("verifier", {"run", "verifiers"}), " (did you mean 'verifiers'?)");
  EXPECT_EQ(did_you_mean("completely_unrelated", {"run", "verifiers"}), "");
}

TEST(Strings, JoinTrimAffixes) {
  EXPECT_EQ(join({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(join({"only"}, ", "), "only");
  EXPECT_EQ(join({}, ", "), "");
  EXPECT_EQ(trim("  \t x y \r\n"), "x y");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(trim(""), "");
  EXPECT_TRUE(starts_with("run.seed", "run."));
  EXPECT_FALSE(starts_with("ru", "run."));
  EXPECT_TRUE(ends_with("libgrpo_math.so", ".so"));
  EXPECT_FALSE(ends_with("so", ".so"));
}

// Each expectation is written out by hand from Unicode's table 3-7 (which byte sequences are
// well-formed): ill-formed bytes become \xNN, one escape per byte; everything else is kept.
TEST(Strings, EscapeInvalidUtf8EscapesOnlyIllFormedBytes) {
  // Well-formed text, 1- to 4-byte characters and a literal U+FFFD, comes back unchanged.
  const std::string valid = "plain caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xEF\xBF\xBD";
  EXPECT_EQ(escape_invalid_utf8(valid), valid);
  EXPECT_EQ(escape_invalid_utf8(""), "");
  EXPECT_EQ(escape_invalid_utf8("a\xC3("), "a\\xc3(");                     // a lead byte without its continuation
  EXPECT_EQ(escape_invalid_utf8("x\xE2\x82"), "x\\xe2\\x82");              // truncated at the end
  EXPECT_EQ(escape_invalid_utf8("\xFF\xFE"), "\\xff\\xfe");                // never valid
  EXPECT_EQ(escape_invalid_utf8("\xC0\xAF"), "\\xc0\\xaf");                // overlong '/'
  EXPECT_EQ(escape_invalid_utf8("\xED\xA0\x80"), "\\xed\\xa0\\x80");       // a surrogate
  EXPECT_EQ(escape_invalid_utf8("\x80\xC3\xA9"), "\\x80\xC3\xA9");          // a stray continuation, then a valid \u00e9
}

}  // namespace
