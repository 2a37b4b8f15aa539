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

}  // namespace
