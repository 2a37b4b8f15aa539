// The schema table: defaults match their documented types, docs/config.md covers every key
// and is current.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "core/config/schema.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"

namespace {

using grpo::sdk::ConfigValue;
using namespace grpo::core;

const ConfigValue* find_path(const ConfigValue& root, const std::string& dotted) {
  const ConfigValue* cur = &root;
  std::size_t start = 0;
  while (cur) {
    std::size_t dot = dotted.find('.', start);
    cur = cur->find(dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

TEST(Schema, EveryDefaultHasTheDocumentedType) {
  const ConfigValue defaults = default_config();
  for (const auto& spec : config_schema()) {
    SCOPED_TRACE(spec.path);
    const ConfigValue* v = find_path(defaults, spec.path);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->location().to_string(), "<default>");
    switch (spec.type) {
      case ConfigType::kBool: {
        bool b = false;
        EXPECT_TRUE(v->is_scalar() && grpo::sdk::detail::parse_bool(v->scalar(), &b));
        break;
      }
      case ConfigType::kInt: {
        std::int64_t i = 0;
        // An optional integer (model.lora.r) defaults to null: unset.
        const bool optional = std::string(spec.default_yaml) == "null" && v->is_null();
        EXPECT_TRUE(optional || (v->is_scalar() && grpo::sdk::detail::parse_int(v->scalar(), &i)));
        break;
      }
      case ConfigType::kNumber: {
        double d = 0;
        EXPECT_TRUE(v->is_scalar() && grpo::sdk::detail::parse_double(v->scalar(), &d));
        break;
      }
      case ConfigType::kString:
        EXPECT_TRUE(v->is_scalar());
        EXPECT_TRUE(v->quoted()) << "string defaults are written quoted so they stay strings";
        break;
      case ConfigType::kEnum: {
        ASSERT_TRUE(v->is_scalar());
        bool listed = false;
        for (const auto& c : spec.choices) listed = listed || c == v->scalar();
        EXPECT_TRUE(listed) << v->scalar();
        break;
      }
      case ConfigType::kStringList:
      case ConfigType::kComponentList:
        EXPECT_TRUE(v->is_sequence());
        break;
      case ConfigType::kComponent:
        EXPECT_TRUE(v->is_null() || v->is_map());
        break;
    }
    if (spec.type == ConfigType::kEnum) {
      EXPECT_FALSE(spec.choices.empty());
    } else {
      EXPECT_TRUE(spec.choices.empty());
    }
    EXPECT_NE(std::string(spec.doc), "");
  }
  validate_config(defaults);
}

TEST(Schema, DefaultValuesAsDocumented) {
  // Written by hand from the issue; a change here is a user-visible change.
  const std::map<std::string, std::string> scalars = {
      {"run.output_dir", "runs/grpo"}, {"run.seed", "1"}, {"log.level", "info"}, {"log.file", "run.log"}};
  const ConfigValue defaults = default_config();
  for (const auto& [path, text] : scalars) {
    const ConfigValue* v = find_path(defaults, path);
    ASSERT_NE(v, nullptr) << path;
    EXPECT_EQ(v->scalar(), text) << path;
  }
  for (const char* path : {"plugins.paths", "plugins.load", "verifiers"}) {
    const ConfigValue* v = find_path(defaults, path);
    ASSERT_NE(v, nullptr) << path;
    EXPECT_TRUE(v->is_sequence() && v->items().empty()) << path;
  }
  for (const char* path :
       {"algorithm.advantage", "algorithm.policy_loss", "algorithm.kl_estimator", "rollout.backend"}) {
    const ConfigValue* v = find_path(defaults, path);
    ASSERT_NE(v, nullptr) << path;
    EXPECT_TRUE(v->is_null()) << path;
  }
  EXPECT_EQ(kDefaultVerifierWeight, 1.0);
}

TEST(Schema, TableIsConsistent) {
  const auto& schema = config_schema();
  for (std::size_t i = 0; i < schema.size(); ++i) {
    for (std::size_t j = 0; j < schema.size(); ++j) {
      if (i == j) continue;
      const std::string a = schema[i].path;
      const std::string b = schema[j].path;
      EXPECT_NE(a, b) << "duplicate key";
      EXPECT_NE(b.rfind(a + ".", 0), 0u) << a << " is both a key and a section of " << b;
    }
  }
}

TEST(Schema, NodeKinds) {
  EXPECT_EQ(config_node_kind(""), ConfigNodeKind::kSection);
  EXPECT_EQ(config_node_kind("run"), ConfigNodeKind::kSection);
  EXPECT_EQ(config_node_kind("algorithm"), ConfigNodeKind::kSection);
  EXPECT_EQ(config_node_kind("run.seed"), ConfigNodeKind::kValue);
  EXPECT_EQ(config_node_kind("verifiers"), ConfigNodeKind::kValue);
  EXPECT_EQ(config_node_kind("algorithm.policy_loss"), ConfigNodeKind::kComponent);
  EXPECT_EQ(config_node_kind("verifiers[12]"), ConfigNodeKind::kComponent);
  EXPECT_EQ(config_node_kind("plugins.paths[0]"), ConfigNodeKind::kUnknown);
  EXPECT_EQ(config_node_kind("verifiers[]"), ConfigNodeKind::kUnknown);
  EXPECT_EQ(config_node_kind("algorithm.policy_loss.clip_high"), ConfigNodeKind::kUnknown);
  EXPECT_EQ(config_node_kind("ru"), ConfigNodeKind::kUnknown);
  ASSERT_NE(find_config_key("log.level"), nullptr);
  EXPECT_EQ(find_config_key("log.level")->type, ConfigType::kEnum);
  EXPECT_EQ(find_config_key("log"), nullptr);
}

TEST(Schema, NormalizeRewritesShortSpellings) {
  ConfigValue root = ConfigValue::make_map();
  ConfigValue algorithm = ConfigValue::make_map();
  algorithm.set("policy_loss", ConfigValue::make_scalar("cispo", {"f.yaml", 3, 16}));
  root.set("algorithm", algorithm);
  ConfigValue plugins = ConfigValue::make_map();
  plugins.set("load", ConfigValue::make_scalar("mine"));
  plugins.set("paths", ConfigValue::make_null());
  root.set("plugins", plugins);
  ConfigValue verifiers = ConfigValue::make_sequence();
  verifiers.items().push_back(ConfigValue::make_scalar("math"));
  root.set("verifiers", verifiers);

  normalize_config(root);
  const ConfigValue* loss = find_path(root, "algorithm.policy_loss");
  ASSERT_TRUE(loss && loss->is_map());
  EXPECT_EQ(loss->find("name")->scalar(), "cispo");
  EXPECT_EQ(loss->location().to_string(), "f.yaml:3:16");
  const ConfigValue* load = find_path(root, "plugins.load");
  ASSERT_TRUE(load && load->is_sequence());
  ASSERT_EQ(load->items().size(), 1u);
  EXPECT_EQ(load->items()[0].scalar(), "mine");
  EXPECT_TRUE(find_path(root, "plugins.paths")->is_sequence());
  const ConfigValue* v = find_path(root, "verifiers");
  ASSERT_TRUE(v->items()[0].is_map());
  EXPECT_EQ(v->items()[0].find("name")->scalar(), "math");
}

TEST(ConfigReference, MentionsEveryKeyAndThePrecedence) {
  const std::string md = config_reference_markdown();
  EXPECT_EQ(md.rfind("# ", 0), 0u) << "starts with a title";
  for (const auto& spec : config_schema()) {
    EXPECT_NE(md.find("`" + std::string(spec.path) + "`"), std::string::npos) << spec.path;
    EXPECT_NE(md.find(spec.doc), std::string::npos) << spec.path;
  }
  for (const char* text : {"--config", "--set", "defaults", "later file wins", "`name`", "weight", "trace", "error"})
    EXPECT_NE(md.find(text), std::string::npos) << text;
}

TEST(ConfigReference, DocsFileIsCurrent) {
  const std::string path = GRPO_SOURCE_DIR "/docs/config.md";
  const std::string expected = config_reference_markdown();
  const char* update = std::getenv("GRPO_UPDATE_DOCS");
  if (update && std::string(update) == "1") {
    atomic_write_file(path, expected);
    SUCCEED() << "wrote " << path;
    return;
  }
  std::string actual;
  try {
    actual = read_file(path);
  } catch (const std::exception& e) {
    FAIL() << e.what() << "\nCreate it with: GRPO_UPDATE_DOCS=1 grpo_tests --gtest_filter=ConfigReference.DocsFileIsCurrent";
  }
  EXPECT_TRUE(actual == expected)
      << path << " is out of date with the schema table in core/config/schema.cpp.\n"
      << "Regenerate it with: GRPO_UPDATE_DOCS=1 grpo_tests --gtest_filter=ConfigReference.DocsFileIsCurrent\n"
      << "(or: grpo-run --config-reference > docs/config.md) and commit the result.";
}

}  // namespace
