// ConfigView's range-checked getters (grpo/sdk/config_view.h): boundaries accepted or
// rejected as the interval says, and errors that name file:line:col, the full key path, the
// range and the value as written. Torch-free: the tree is built by hand, as the host's YAML
// loader would build it.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "grpo/sdk/config_view.h"
#include "tests/support/error_of.h"

namespace {

using grpo::sdk::ConfigValue;
using grpo::sdk::ConfigView;
using grpo::sdk::Interval;
using grpo::testing::error_of;

constexpr double kInf = std::numeric_limits<double>::infinity();

// As loaded from cfg.yaml: the section's map starts at 3:5, then one "    <key>: <value>" a
// line from line 3 on, every value at column 15.
class RangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = ConfigValue::make_map({"cfg.yaml", 3, 5});
    int line = 3;
    for (const auto& [key, text] : std::initializer_list<std::pair<const char*, const char*>>{
             {"zero", "0"},          // 3
             {"one", "1"},           // 4
             {"half", "0.5"},        // 5
             {"tiny", "1e-9"},       // 6
             {"neg", "-1.5"},        // 7
             {"big", "1.5"},         // 8
             {"inf", ".inf"},        // 9
             {"nan", ".nan"},        // 10
             {"word", "abc"},        // 11
             {"i4096", "4096"},      // 12
             {"i4097", "4097"},      // 13
             {"uid", "4000000000"},  // 14
             {"frac", "2.5"},        // 15
         }) {
      node_.set(key, ConfigValue::make_scalar(text, {"cfg.yaml", line, 15}), {"cfg.yaml", line, 5});
      ++line;
    }
    node_.set("nothing", ConfigValue::make_null({"cfg.yaml", 16, 15}));
    node_.set("quoted", ConfigValue::make_scalar("-2", {"cfg.yaml", 17, 15}, /*quoted=*/true));
  }
  ConfigView view() const { return ConfigView(&node_, "algorithm.advantage"); }
  ConfigValue node_;
};

TEST_F(RangeTest, PositiveDouble) {
  EXPECT_DOUBLE_EQ(view().get_positive_double("tiny", 7.0), 1e-9);
  EXPECT_DOUBLE_EQ(view().get_positive_double("one", 7.0), 1.0);
  EXPECT_DOUBLE_EQ(view().get_positive_double("absent", 7.0), 7.0);
  EXPECT_DOUBLE_EQ(view().get_positive_double("nothing", 7.0), 7.0);  // null = absent
  EXPECT_EQ(error_of([&] { view().get_positive_double("zero", 1.0); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be a finite number > 0, got 0");
  EXPECT_EQ(error_of([&] { view().get_positive_double("neg", 1.0); }),
            "cfg.yaml:7:15: algorithm.advantage.neg: must be a finite number > 0, got -1.5");
  EXPECT_EQ(error_of([&] { view().get_positive_double("inf", 1.0); }),
            "cfg.yaml:9:15: algorithm.advantage.inf: must be a finite number > 0, got .inf");
  EXPECT_EQ(error_of([&] { view().get_positive_double("nan", 1.0); }),
            "cfg.yaml:10:15: algorithm.advantage.nan: must be a finite number > 0, got .nan");
}

TEST_F(RangeTest, PositiveDoubleNoteAndTypeErrors) {
  EXPECT_EQ(error_of([&] { view().get_positive_double("zero", 1.0, "(milliseconds)"); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be a finite number > 0 (milliseconds), got 0");
  // Not a number at all: the usual type error, not a range error.
  EXPECT_EQ(error_of([&] { view().get_positive_double("word", 1.0); }),
            "cfg.yaml:11:15: algorithm.advantage.word: expected a number, got \"abc\"");
  // A quoted numeral reads as the number; the message shows it without quotes.
  EXPECT_EQ(error_of([&] { view().get_positive_double("quoted", 1.0); }),
            "cfg.yaml:17:15: algorithm.advantage.quoted: must be a finite number > 0, got -2");
}

TEST_F(RangeTest, NonNegativeDouble) {
  EXPECT_DOUBLE_EQ(view().get_non_negative_double("zero", 7.0), 0.0);
  EXPECT_DOUBLE_EQ(view().get_non_negative_double("big", 7.0), 1.5);
  EXPECT_DOUBLE_EQ(view().get_non_negative_double("absent", 7.0), 7.0);
  EXPECT_EQ(error_of([&] { view().get_non_negative_double("neg", 1.0); }),
            "cfg.yaml:7:15: algorithm.advantage.neg: must be a finite number >= 0, got -1.5");
  EXPECT_EQ(error_of([&] { view().get_non_negative_double("inf", 1.0); }),
            "cfg.yaml:9:15: algorithm.advantage.inf: must be a finite number >= 0, got .inf");
}

TEST_F(RangeTest, ClosedInterval) {
  EXPECT_DOUBLE_EQ(view().get_double_in_range("zero", 0.5, 0.0, 1.0), 0.0);  // both ends belong
  EXPECT_DOUBLE_EQ(view().get_double_in_range("one", 0.5, 0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(view().get_double_in_range("half", 0.1, 0.0, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(view().get_double_in_range("absent", 0.25, 0.0, 1.0), 0.25);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("big", 0.5, 0.0, 1.0); }),
            "cfg.yaml:8:15: algorithm.advantage.big: must be in [0, 1], got 1.5");
  EXPECT_EQ(error_of([&] { view().get_double_in_range("neg", 0.5, 0.0, 1.0); }),
            "cfg.yaml:7:15: algorithm.advantage.neg: must be in [0, 1], got -1.5");
  EXPECT_EQ(error_of([&] { view().get_double_in_range("nan", 0.5, 0.0, 1.0); }),
            "cfg.yaml:10:15: algorithm.advantage.nan: must be in [0, 1], got .nan");
  EXPECT_EQ(error_of([&] {
              view().get_double_in_range("big", 0.2, 0.0, 1.0, Interval::kClosed, "(the lower bound is 1 - clip_low)");
            }),
            "cfg.yaml:8:15: algorithm.advantage.big: must be in [0, 1] (the lower bound is 1 - clip_low), got 1.5");
  // Bounds are written the shortest way that reads back.
  EXPECT_EQ(error_of([&] { view().get_double_in_range("zero", 0.1, 1e-9, 0.25); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be in [1e-9, 0.25], got 0");
}

TEST_F(RangeTest, OpenEnds) {
  // (0, 3600]
  EXPECT_DOUBLE_EQ(view().get_double_in_range("one", 5.0, 0.0, 1.0, Interval::kLeftOpen), 1.0);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("zero", 5.0, 0.0, 3600.0, Interval::kLeftOpen, "seconds"); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be in (0, 3600] seconds, got 0");
  // [0, 1)
  EXPECT_DOUBLE_EQ(view().get_double_in_range("zero", 0.5, 0.0, 1.0, Interval::kRightOpen), 0.0);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("one", 0.5, 0.0, 1.0, Interval::kRightOpen); }),
            "cfg.yaml:4:15: algorithm.advantage.one: must be in [0, 1), got 1");
  // (0, 1)
  EXPECT_DOUBLE_EQ(view().get_double_in_range("half", 0.1, 0.0, 1.0, Interval::kOpen), 0.5);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("zero", 0.5, 0.0, 1.0, Interval::kOpen); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be in (0, 1), got 0");
  EXPECT_EQ(error_of([&] { view().get_double_in_range("one", 0.5, 0.0, 1.0, Interval::kOpen); }),
            "cfg.yaml:4:15: algorithm.advantage.one: must be in (0, 1), got 1");
}

TEST_F(RangeTest, InfiniteBounds) {
  // (0, +inf]: .inf accepted (a clamp that .inf turns off).
  EXPECT_EQ(view().get_double_in_range("inf", 1.0, 0.0, kInf, Interval::kLeftOpen), kInf);
  EXPECT_EQ(error_of([&] {
              view().get_double_in_range("zero", 1.0, 0.0, kInf, Interval::kLeftOpen, "(.inf disables the clamp)");
            }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be > 0 (.inf disables the clamp), got 0");
  // [-inf, 1) and (-inf, 1].
  EXPECT_DOUBLE_EQ(view().get_double_in_range("neg", 0.0, -kInf, 1.0, Interval::kRightOpen), -1.5);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("one", 0.0, -kInf, 1.0, Interval::kRightOpen); }),
            "cfg.yaml:4:15: algorithm.advantage.one: must be < 1, got 1");
  EXPECT_EQ(error_of([&] { view().get_double_in_range("big", 0.0, -kInf, 1.0, Interval::kLeftOpen); }),
            "cfg.yaml:8:15: algorithm.advantage.big: must be a finite number <= 1, got 1.5");
  // Any number but NaN.
  EXPECT_EQ(view().get_double_in_range("inf", 0.0, -kInf, kInf), kInf);
  EXPECT_EQ(error_of([&] { view().get_double_in_range("nan", 0.0, -kInf, kInf); }),
            "cfg.yaml:10:15: algorithm.advantage.nan: must be a number, got .nan");
  EXPECT_EQ(error_of([&] { view().get_double_in_range("inf", 0.0, -kInf, kInf, Interval::kOpen); }),
            "cfg.yaml:9:15: algorithm.advantage.inf: must be a finite number, got .inf");
}

TEST_F(RangeTest, IntInRange) {
  EXPECT_EQ(view().get_int_in_range("zero", 7, 0, 4096), 0);  // both ends belong
  EXPECT_EQ(view().get_int_in_range("i4096", 7, 0, 4096), 4096);
  EXPECT_EQ(view().get_int_in_range("absent", 7, 0, 4096), 7);
  EXPECT_EQ(view().get_int_in_range("uid", 60000, 1000, 4000000000LL), 4000000000LL);
  EXPECT_EQ(error_of([&] { view().get_int_in_range("i4097", 0, 0, 4096, "(0 = the number of cores)"); }),
            "cfg.yaml:13:15: algorithm.advantage.i4097: must be in [0, 4096] (0 = the number of cores), got 4097");
  EXPECT_EQ(error_of([&] { view().get_int_in_range("quoted", 0, 0, 4096); }),
            "cfg.yaml:17:15: algorithm.advantage.quoted: must be in [0, 4096], got -2");
  EXPECT_EQ(error_of([&] { view().get_int_in_range("i4096", 0, std::numeric_limits<std::int64_t>::min(), 100); }),
            "cfg.yaml:12:15: algorithm.advantage.i4096: must be <= 100, got 4096");
  // Not an integer: the usual type error.
  EXPECT_EQ(error_of([&] { view().get_int_in_range("frac", 0, 0, 4096); }),
            "cfg.yaml:15:15: algorithm.advantage.frac: expected an integer, got \"2.5\"");
}

TEST_F(RangeTest, IntAtLeast) {
  EXPECT_EQ(view().get_int_at_least("one", 7, 1), 1);  // the bound belongs
  EXPECT_EQ(view().get_int_at_least("i4097", 7, 16), 4097);
  EXPECT_EQ(view().get_int_at_least("absent", 2000, 16), 2000);
  EXPECT_EQ(error_of([&] { view().get_int_at_least("zero", 7, 1); }),
            "cfg.yaml:3:15: algorithm.advantage.zero: must be >= 1, got 0");
  EXPECT_EQ(error_of([&] { view().get_int_at_least("quoted", 7, 0, "(-1 is not a size)"); }),
            "cfg.yaml:17:15: algorithm.advantage.quoted: must be >= 0 (-1 is not a size), got -2");
}

TEST_F(RangeTest, DefaultOutsideTheRangeIsNamedAtTheSection) {
  // A component's own default can be wrong too: the error points at the section.
  EXPECT_EQ(error_of([&] { view().get_positive_double("absent", -1.0); }),
            "cfg.yaml:3:5: algorithm.advantage.absent: must be a finite number > 0, got -1");
  EXPECT_EQ(error_of([&] { view().get_int_at_least("absent", 0, 1); }),
            "cfg.yaml:3:5: algorithm.advantage.absent: must be >= 1, got 0");
}

TEST_F(RangeTest, ReadingMarksUsed) {
  view().get_positive_double("half", 1.0);
  view().get_int_at_least("i4096", 1, 1);
  EXPECT_TRUE(node_.find("half")->used());
  EXPECT_TRUE(node_.find("i4096")->used());
  EXPECT_FALSE(node_.find("one")->used());
}

TEST(RangeNoNode, EmptyViewUsesTheDefaultAndNamesTheKeyPath) {
  const ConfigView view(nullptr, "verifiers[0]");
  EXPECT_DOUBLE_EQ(view.get_double_in_range("weight", 0.5, 0.0, 1.0), 0.5);
  EXPECT_EQ(error_of([&] { view.get_int_at_least("max_tests", 0, 1); }), "verifiers[0].max_tests: must be >= 1, got 0");
}

}  // namespace
