// grpo-generate's `generate:` block is part of the configuration schema (core/config/schema.cpp):
// its defaults are grpo-generate's, and the block is validated by the schema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "apps/grpo-generate/grpo_generate.h"
#include "core/config/schema.h"
#include "core/config/yaml_loader.h"
#include "grpo/sdk/config_view.h"
#include "tests/support/error_of.h"

namespace {

using grpo::sdk::ConfigValue;
using grpo::sdk::ConfigView;
using grpo::testing::error_of;
using ::testing::HasSubstr;

TEST(GenerateSchema, DefaultsAreGrpoGeneratesDefaults) {
  const ConfigValue defaults = grpo::core::default_config();
  const ConfigView view(defaults.find("generate"), "generate");
  const grpo::cli::GenerateSettings settings;
  EXPECT_EQ(view.get_int("n", -9), settings.n);
  EXPECT_EQ(view.get_double("temperature", -9), settings.sampling.temperature);
  EXPECT_EQ(view.get_double("top_p", -9), settings.sampling.top_p);
  EXPECT_EQ(view.get_int("top_k", -9), settings.sampling.top_k);
  EXPECT_EQ(view.get_double("min_p", -9), settings.sampling.min_p);
  EXPECT_EQ(view.get_int("max_new_tokens", -9), settings.sampling.max_new_tokens);
  EXPECT_EQ(view.get_int("seed", -9), settings.seed);
  EXPECT_EQ(view.get_string_list("stop", {"x"}), settings.sampling.stop_strings);
  EXPECT_TRUE(defaults.find("generate")->find("stop_token_ids")->items().empty());
  EXPECT_TRUE(settings.sampling.stop_token_ids.empty());
  EXPECT_EQ(view.get_string("chat_template", "x"), settings.chat_template);
  EXPECT_TRUE(defaults.find("generate")->find("backend")->is_null());  // null: native
}

TEST(GenerateSchema, ChatTemplateIsANameOrAFile) {
  grpo::cli::GenerateSettings s;
  for (const char* ok : {"auto", "chatml", "llama3", "none"}) {
    s.chat_template = ok;
    EXPECT_TRUE(grpo::cli::generate_settings_problems(s).empty()) << ok;
  }
  s.chat_template = "chatm";
  auto problems = grpo::cli::generate_settings_problems(s);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].first, "chat_template");
  EXPECT_THAT(problems[0].second, HasSubstr("unknown chat template 'chatm' (did you mean 'chatml'?)"));
  s.chat_template = "/no/such/template.jinja";
  problems = grpo::cli::generate_settings_problems(s);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0].second, HasSubstr("chat template file '/no/such/template.jinja' does not exist"));
}

TEST(GenerateSchema, BlockIsValidatedByTheSchema) {
  auto validate = [](const std::string& yaml) {
    grpo::core::validate_config_section(grpo::core::parse_yaml(yaml, "gen.yaml"), "generate");
  };
  validate("n: 2\nstop: </s>\nstop_token_ids: 7\nchat_template: none\nbackend: {name: native, max_num_seqs: 4}\n");
  validate("stop_token_ids: [1, 2]\nbackend: native\n");
  EXPECT_THAT(error_of([&] { validate("n: 2\ntemprature: 0\n"); }),
              HasSubstr("gen.yaml:2:1: unknown key 'generate.temprature' (did you mean 'generate.temperature'?)"));
  EXPECT_THAT(error_of([&] { validate("stop_token_ids: [1, x]\n"); }),
              HasSubstr("generate.stop_token_ids[1]: expected an integer, got \"x\""));
  EXPECT_THAT(error_of([&] { validate("top_k: many\n"); }), HasSubstr("generate.top_k: expected an integer"));
  EXPECT_THAT(error_of([&] { validate("backend: {max_num_seqs: 4}\n"); }),
              HasSubstr("generate.backend: component map has no 'name'"));
}

}  // namespace
