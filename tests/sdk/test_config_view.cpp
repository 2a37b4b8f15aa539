// The SDK's ConfigView: typed getters, their error messages (location + key path), and
// access tracking used to reject options a component never read.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "core/config/yaml_loader.h"
#include "grpo/sdk/config_view.h"

namespace {

using grpo::core::parse_yaml;
using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using grpo::sdk::ConfigView;

using grpo::testing::error_of;

// Columns are easy to count: every value starts at column 17 (4 spaces, a 12-wide key column).
const char* const kYaml =
    "algorithm:\n"             // 1
    "  policy_loss:\n"         // 2
    "    clip_high:  abc\n"    // 3
    "    clip_low:   0.2\n"    // 4
    "    steps:      12\n"     // 5
    "    frac:       1.5\n"    // 6
    "    dual:       yes\n"    // 7
    "    flag:       maybe\n"  // 8
    "    mode:       sideways\n"  // 9
    "    tags:       [a, b]\n"    // 10
    "    one_tag:    solo\n"      // 11
    "    bad_tags:   [a, {x: 1}]\n"  // 12
    "    weights:    [0.5, 2, 1e-3]\n"  // 13
    "    bad_w:      [1, x]\n"   // 14
    "    nested:     {inner: 3}\n"  // 15
    "    nothing:    ~\n"        // 16
    "    name:       ppo_clip\n"  // 17
    "    infinite:   .inf\n"     // 18
    "    not_a_num:  nan\n";     // 19

class ConfigViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = parse_yaml(kYaml, "cfg.yaml");
    node_ = root_.find("algorithm")->find("policy_loss");
  }
  ConfigView view() const { return ConfigView(node_, "algorithm.policy_loss"); }
  ConfigValue root_;
  const ConfigValue* node_ = nullptr;
};

TEST_F(ConfigViewTest, Double) {
  EXPECT_DOUBLE_EQ(view().get_double("clip_low", 9.0), 0.2);
  EXPECT_DOUBLE_EQ(view().get_double("steps", 9.0), 12.0);
  EXPECT_DOUBLE_EQ(view().get_double("absent", 9.0), 9.0);
  EXPECT_DOUBLE_EQ(view().get_double("nothing", 9.0), 9.0);  // null = absent
  EXPECT_TRUE(std::isinf(view().get_double("infinite", 0)));
  EXPECT_DOUBLE_EQ(view().require_double("clip_low"), 0.2);
  EXPECT_EQ(error_of([&] { view().get_double("clip_high", 0.28); }),
            "cfg.yaml:3:17: algorithm.policy_loss.clip_high: expected a number, got \"abc\"");
  EXPECT_EQ(error_of([&] { view().get_double("not_a_num", 0); }),
            "cfg.yaml:19:17: algorithm.policy_loss.not_a_num: expected a number, got \"nan\"");
  EXPECT_EQ(error_of([&] { view().get_double("nested", 0); }),
            "cfg.yaml:15:17: algorithm.policy_loss.nested: expected a number, got a map");
}

TEST_F(ConfigViewTest, Int) {
  EXPECT_EQ(view().get_int("steps", 0), 12);
  EXPECT_EQ(view().get_int("absent", -4), -4);
  EXPECT_EQ(view().require_int("steps"), 12);
  EXPECT_EQ(error_of([&] { view().get_int("frac", 0); }),
            "cfg.yaml:6:17: algorithm.policy_loss.frac: expected an integer, got \"1.5\"");
}

TEST_F(ConfigViewTest, Bool) {
  EXPECT_TRUE(view().get_bool("dual", false));
  EXPECT_FALSE(view().get_bool("absent", false));
  EXPECT_TRUE(view().require_bool("dual"));
  EXPECT_EQ(error_of([&] { view().get_bool("flag", false); }),
            "cfg.yaml:8:17: algorithm.policy_loss.flag: expected true or false, got \"maybe\"");
}

TEST_F(ConfigViewTest, String) {
  EXPECT_EQ(view().get_string("name", "x"), "ppo_clip");
  EXPECT_EQ(view().get_string("steps", "x"), "12");  // any scalar is a string
  EXPECT_EQ(view().get_string("absent", "dflt"), "dflt");
  EXPECT_EQ(view().require_string("name"), "ppo_clip");
  EXPECT_EQ(error_of([&] { view().get_string("tags", ""); }),
            "cfg.yaml:10:17: algorithm.policy_loss.tags: expected a string, got a list");
}

TEST_F(ConfigViewTest, ChoiceListsTheChoices) {
  EXPECT_EQ(view().get_choice("name", "token", {"ppo_clip", "cispo"}), "ppo_clip");
  EXPECT_EQ(view().get_choice("absent", "token", {"token", "sequence"}), "token");
  EXPECT_EQ(error_of([&] { view().get_choice("mode", "token", {"token", "sequence"}); }),
            "cfg.yaml:9:17: algorithm.policy_loss.mode: expected one of token, sequence, got \"sideways\"");
}

TEST_F(ConfigViewTest, Lists) {
  EXPECT_EQ(view().get_string_list("tags", {}), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(view().get_string_list("one_tag", {}), (std::vector<std::string>{"solo"}));
  EXPECT_EQ(view().get_string_list("absent", {"d"}), (std::vector<std::string>{"d"}));
  EXPECT_EQ(error_of([&] { view().get_string_list("bad_tags", {}); }),
            "cfg.yaml:12:21: algorithm.policy_loss.bad_tags[1]: expected a string, got a map");
  EXPECT_EQ(error_of([&] { view().get_string_list("nested", {}); }),
            "cfg.yaml:15:17: algorithm.policy_loss.nested: expected a list of strings, got a map");

  EXPECT_EQ(view().get_double_list("weights", {}), (std::vector<double>{0.5, 2.0, 1e-3}));
  EXPECT_EQ(view().get_double_list("absent", {1.0}), (std::vector<double>{1.0}));
  EXPECT_EQ(error_of([&] { view().get_double_list("bad_w", {}); }),
            "cfg.yaml:14:21: algorithm.policy_loss.bad_w[1]: expected a number, got \"x\"");
  EXPECT_EQ(error_of([&] { view().get_double_list("name", {}); }),
            "cfg.yaml:17:17: algorithm.policy_loss.name: expected a list of numbers, got a scalar");
}

TEST_F(ConfigViewTest, ChildMaps) {
  ConfigView nested = view().child("nested");
  EXPECT_EQ(nested.path(), "algorithm.policy_loss.nested");
  EXPECT_EQ(nested.get_int("inner", 0), 3);
  EXPECT_EQ(nested.keys(), (std::vector<std::string>{"inner"}));
  EXPECT_EQ(error_of([&] { nested.get_bool("inner", false); }),
            "cfg.yaml:15:25: algorithm.policy_loss.nested.inner: expected true or false, got \"3\"");

  ConfigView missing = view().child("absent");  // absent: an empty view, all defaults
  EXPECT_EQ(missing.node(), nullptr);
  EXPECT_EQ(missing.get_int("x", 5), 5);
  EXPECT_FALSE(missing.has("x"));
  EXPECT_EQ(view().child("nothing").node(), nullptr);  // null: same

  EXPECT_EQ(error_of([&] { view().child("tags"); }),
            "cfg.yaml:10:17: algorithm.policy_loss.tags: expected a map, got a list");
}

TEST_F(ConfigViewTest, RequireOnMissingKeyNamesTheParent) {
  EXPECT_EQ(error_of([&] { view().require_double("eps"); }),
            "cfg.yaml:3:5: algorithm.policy_loss.eps: required option is missing (expected a number)");
  EXPECT_EQ(error_of([&] { view().require_int("nothing"); }),
            "cfg.yaml:16:17: algorithm.policy_loss.nothing: required option is missing (expected an integer)");
  EXPECT_EQ(error_of([&] { view().require_bool("b"); }),
            "cfg.yaml:3:5: algorithm.policy_loss.b: required option is missing (expected true or false)");
  EXPECT_EQ(error_of([&] { view().require_string("s"); }),
            "cfg.yaml:3:5: algorithm.policy_loss.s: required option is missing (expected a string)");
  // A view with no node (component configured by shorthand) still names the key.
  EXPECT_EQ(error_of([] { ConfigView(nullptr, "verifiers[0]").require_string("name"); }),
            "verifiers[0].name: required option is missing (expected a string)");
}

TEST_F(ConfigViewTest, FailNamesTheValue) {
  EXPECT_EQ(error_of([&] { view().fail("clip_low", "must be at least 0.5"); }),
            "cfg.yaml:4:17: algorithm.policy_loss.clip_low: must be at least 0.5");
  EXPECT_EQ(error_of([&] { view().fail("absent", "is needed when dual is set"); }),
            "cfg.yaml:3:5: algorithm.policy_loss.absent: is needed when dual is set");
}

TEST_F(ConfigViewTest, HasAndKeys) {
  EXPECT_TRUE(view().has("steps"));
  EXPECT_FALSE(view().has("nothing"));
  EXPECT_FALSE(view().has("absent"));
  std::vector<std::string> keys = view().keys();
  ASSERT_EQ(keys.size(), 17u);
  EXPECT_EQ(keys.front(), "clip_high");
  EXPECT_EQ(keys.back(), "not_a_num");
  EXPECT_EQ(ConfigView(nullptr, "").key_path("x"), "x");
  EXPECT_EQ(view().key_path("x"), "algorithm.policy_loss.x");
}

TEST_F(ConfigViewTest, MarksUsedAndRecordsQueriedKeys) {
  EXPECT_FALSE(node_->used());
  ConfigView v = view();
  EXPECT_TRUE(node_->used());  // constructing a view marks its node
  v.get_double("clip_low", 0);
  v.get_int("steps", 0);
  v.get_bool("typo_key", false);
  v.get_string_list("tags", {});
  EXPECT_TRUE(node_->find("clip_low")->used());
  EXPECT_TRUE(node_->find("steps")->used());
  EXPECT_TRUE(node_->find("tags")->used());
  EXPECT_TRUE(node_->find("tags")->items()[1].used());
  EXPECT_FALSE(node_->find("clip_high")->used());
  EXPECT_FALSE(node_->find("name")->used());
  EXPECT_EQ(node_->queried_keys(), (std::vector<std::string>{"clip_low", "steps", "typo_key", "tags"}));
  v.get_double("clip_low", 0);  // asked twice, recorded once
  EXPECT_EQ(node_->queried_keys().size(), 4u);

  // The unused options are what the host reports as unknown.
  std::vector<std::string> unused;
  for (const auto& e : node_->entries())
    if (!e.value.used()) unused.push_back(e.key);
  EXPECT_EQ(unused.size(), 14u);
  EXPECT_EQ(unused.front(), "clip_high");

  node_->reset_usage();
  EXPECT_FALSE(node_->used());
  EXPECT_FALSE(node_->find("clip_low")->used());
  EXPECT_FALSE(node_->find("tags")->items()[1].used());
  EXPECT_TRUE(node_->queried_keys().empty());
}

}  // namespace
