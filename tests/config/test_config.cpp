// Configuration loading: YAML -> ConfigValue with locations, layering (defaults -> files ->
// --set), validation errors (file, line, key path, suggestion), and YAML output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/error_of.h"
#include "core/config/config_access.h"
#include "core/config/config_loader.h"
#include "core/config/schema.h"
#include "core/config/yaml_loader.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using grpo::sdk::ConfigError;
using grpo::sdk::ConfigValue;
using namespace grpo::core;

// A fresh directory per test.
std::string test_dir() { return grpo::testing::fresh_test_dir("config"); }

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

using grpo::testing::error_of;

const ConfigValue& at(const ConfigValue& root, std::initializer_list<const char*> keys) {
  const ConfigValue* v = &root;
  for (const char* k : keys) {
    v = v->find(k);
    if (!v) throw std::runtime_error(std::string("no key ") + k);
  }
  return *v;
}

// Structure, scalar text and quoted-ness (locations are not compared).
::testing::AssertionResult same_tree(const ConfigValue& a, const ConfigValue& b, const std::string& path = "(root)") {
  if (a.type() != b.type())
    return ::testing::AssertionFailure() << path << ": " << a.type_description() << " vs " << b.type_description();
  if (a.is_scalar() && (a.scalar() != b.scalar() || a.quoted() != b.quoted()))
    return ::testing::AssertionFailure() << path << ": \"" << a.scalar() << "\"(quoted=" << a.quoted() << ") vs \""
                                         << b.scalar() << "\"(quoted=" << b.quoted() << ")";
  if (a.items().size() != b.items().size()) return ::testing::AssertionFailure() << path << ": list sizes differ";
  for (std::size_t i = 0; i < a.items().size(); ++i) {
    auto r = same_tree(a.items()[i], b.items()[i], path + "[" + std::to_string(i) + "]");
    if (!r) return r;
  }
  if (a.entries().size() != b.entries().size()) return ::testing::AssertionFailure() << path << ": map sizes differ";
  for (std::size_t i = 0; i < a.entries().size(); ++i) {
    if (a.entries()[i].key != b.entries()[i].key)
      return ::testing::AssertionFailure() << path << ": key '" << a.entries()[i].key << "' vs '" << b.entries()[i].key << "'";
    auto r = same_tree(a.entries()[i].value, b.entries()[i].value, path + "." + a.entries()[i].key);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

// ---- YAML parsing ----

TEST(YamlLoader, KeepsLocationsAndQuotedness) {
  ConfigValue v = parse_yaml("run:\n  seed: 7\n  output_dir: \"007\"\nlist: [a, 'b']\n", "cfg.yaml");
  const ConfigValue& seed = at(v, {"run", "seed"});
  EXPECT_EQ(seed.scalar(), "7");
  EXPECT_FALSE(seed.quoted());
  EXPECT_EQ(seed.location().to_string(), "cfg.yaml:2:9");
  EXPECT_EQ(at(v, {"run"}).find_entry("seed")->key_location.to_string(), "cfg.yaml:2:3");
  EXPECT_TRUE(at(v, {"run", "output_dir"}).quoted());
  const ConfigValue& list = at(v, {"list"});
  ASSERT_EQ(list.items().size(), 2u);
  EXPECT_FALSE(list.items()[0].quoted());
  EXPECT_TRUE(list.items()[1].quoted());
  EXPECT_EQ(list.items()[1].location().to_string(), "cfg.yaml:4:11");
}

TEST(YamlLoader, NullSpellingsAndEmptyValues) {
  ConfigValue v = parse_yaml("a:\nb: ~\nc: null\nd: 'null'\n", "n.yaml");
  EXPECT_TRUE(at(v, {"a"}).is_null());
  EXPECT_EQ(at(v, {"a"}).location().to_string(), "n.yaml:1:1");  // the key, not the next line
  EXPECT_TRUE(at(v, {"b"}).is_null());
  EXPECT_EQ(at(v, {"b"}).location().to_string(), "n.yaml:2:4");
  EXPECT_TRUE(at(v, {"c"}).is_null());
  EXPECT_TRUE(at(v, {"d"}).is_scalar());
  EXPECT_EQ(at(v, {"d"}).scalar(), "null");
  EXPECT_TRUE(parse_yaml("", "empty.yaml").is_null());
  EXPECT_TRUE(parse_yaml("# only a comment\n", "c.yaml").is_null());
}

TEST(YamlLoader, DuplicateKeyIsAnError) {
  EXPECT_EQ(error_of([] { parse_yaml("run:\n  seed: 1\n  output_dir: x\n  seed: 2\n", "dup.yaml"); }),
            "dup.yaml:4:3: duplicate key 'run.seed' (first defined at line 2)");
}

TEST(YamlLoader, NonStringKeyIsAnError) {
  EXPECT_EQ(error_of([] { parse_yaml("run:\n  [a, b]: 1\n", "k.yaml"); }),
            "k.yaml:2:3: run: map keys must be strings, got a list");
  EXPECT_EQ(error_of([] { parse_yaml("~: 1\n", "k.yaml"); }), "k.yaml:1:1: map keys must be strings, got null");
}

TEST(YamlLoader, RecursiveAliasIsAnError) {
  std::string msg = error_of([] { parse_yaml("a: &x [1, *x]\n", "alias.yaml"); });
  EXPECT_NE(msg.find("alias.yaml:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a[1]: recursive alias"), std::string::npos) << msg;
}

// A "billion laughs" document: each level is a list of 9 aliases of the level before, so a few
// hundred bytes stand for 10 + 91 + 820 + ... values (level n holds 1 + 9 x level n-1).
std::string alias_bomb() {
  std::string yaml = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    const char before = static_cast<char>(level - 1);
    yaml += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) yaml += std::string(i ? ", " : "") + "*" + before;
    yaml += "]\n";
  }
  return yaml;
}

TEST(YamlLoader, AliasBombFailsNamingTheFile) {
  const std::string path = write(test_dir(), "bomb.yaml", alias_bomb());
  const std::string msg = error_of([&] { load_yaml_file(path); });
  // Levels a..f expand to 10, 91, 820, 7381, 66430 and 597871 values: with the root map, 672605
  // values up to g's own list, and its first copy of f crosses 1,000,000.
  EXPECT_EQ(msg.rfind(path + ":", 0), 0u) << msg;
  EXPECT_NE(msg.find(": g[0]["), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than 1000000 values once its aliases are expanded"), std::string::npos) << msg;
}

TEST(YamlLoader, AliasExpansionLimitIsOneMillionValues) {
  // The root map, a's list of 999 scalars (1000 values) and b's list of m copies of a:
  // 1 + 1000 + 1 + 1000 m values, 999002 for m = 998, 1000002 for m = 999.
  auto document = [](int copies) {
    std::string yaml = "a: &a [";
    for (int i = 0; i < 999; ++i) yaml += i ? ", x" : "x";
    yaml += "]\nb: [";
    for (int i = 0; i < copies; ++i) yaml += i ? ", *a" : "*a";
    return yaml + "]\n";
  };
  const ConfigValue within = parse_yaml(document(998), "within.yaml");
  EXPECT_EQ(at(within, {"b"}).items().size(), 998u);
  EXPECT_EQ(at(within, {"b"}).items()[997].items().size(), 999u);
  const std::string msg = error_of([&] { parse_yaml(document(999), "over.yaml"); });
  EXPECT_EQ(msg.rfind("over.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find("b[998]"), std::string::npos) << msg;
}

TEST(YamlLoader, SeveralDocumentsAreAnError) {
  EXPECT_EQ(error_of([] { parse_yaml("a: 1\n---\nb: 2\n", "two.yaml"); }),
            "two.yaml: contains 2 YAML documents; expected one");
}

TEST(YamlLoader, SyntaxErrorNamesFileLineAndEnclosingKey) {
  const std::string dir = test_dir();
  const std::string path = write(dir, "bad.yaml",
                                 "algorithm:\n"
                                 "  policy_loss:\n"
                                 "    name: ppo_clip\n"
                                 "    clip_high: [0.2, 0.3\n"
                                 "run:\n"
                                 "  seed: 1\n");
  std::string msg = error_of([&] { load_yaml_file(path); });
  // yaml-cpp notices the unclosed list where the next key starts: line 5.
  EXPECT_EQ(msg.rfind(path + ":5:", 0), 0u) << msg;
  EXPECT_NE(msg.find(": YAML syntax error: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("(in key 'algorithm.policy_loss.clip_high')"), std::string::npos) << msg;
}

TEST(YamlLoader, SyntaxErrorInsideALine) {
  std::string msg = error_of([] { parse_yaml("log:\n  level: info\n  file: \"a\" b\n", "x.yaml"); });
  EXPECT_EQ(msg.rfind("x.yaml:3:", 0), 0u) << msg;
  EXPECT_NE(msg.find("(in key 'log.file')"), std::string::npos) << msg;
}

TEST(YamlLoader, EnclosingKeyPath) {
  const std::string text =
      "run:\n"             // 1
      "  seed: 1\n"        // 2
      "verifiers:\n"       // 3
      "  - name: math\n"   // 4
      "    weight: 2\n"    // 5
      "  - name: format\n" // 6
      "    opts:\n"        // 7
      "      deep: x\n"    // 8
      "    doc: |\n"       // 9
      "      not: a key\n" // 10
      "top: 1\n";          // 11
  EXPECT_EQ(enclosing_key_path(text, 2, 9), "run.seed");
  EXPECT_EQ(enclosing_key_path(text, 2, 3), "run");  // before the colon: the key above encloses
  EXPECT_EQ(enclosing_key_path(text, 5, 13), "verifiers[0].weight");
  EXPECT_EQ(enclosing_key_path(text, 8, 13), "verifiers[1].opts.deep");
  EXPECT_EQ(enclosing_key_path(text, 10, 12), "verifiers[1].doc");
  EXPECT_EQ(enclosing_key_path(text, 11, 6), "top");
  EXPECT_EQ(enclosing_key_path(text, 1, 1), "");
  EXPECT_EQ(enclosing_key_path("- a\n- b\n- c: 1\n", 3, 6), "[2].c");
}

TEST(YamlLoader, MissingFile) {
  const std::string path = test_dir() + "/does_not_exist.yaml";
  EXPECT_EQ(error_of([&] { load_yaml_file(path); }),
            "config file '" + path + "': cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{path}, {}}); }),
            "config file '" + path + "': cannot open: No such file or directory");
}

TEST(YamlLoader, DirectoryIsNotAFile) {
  const std::string dir = test_dir();
  EXPECT_EQ(error_of([&] { load_yaml_file(dir); }), "config file '" + dir + "': cannot open: Is a directory");
}

// ---- defaults and validation ----

TEST(Config, DefaultsArePresent) {
  ConfigValue cfg = load_config({});
  EXPECT_EQ(at(cfg, {"run", "output_dir"}).scalar(), "runs/grpo");
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "1");
  EXPECT_EQ(at(cfg, {"log", "level"}).scalar(), "info");
  EXPECT_EQ(at(cfg, {"log", "file"}).scalar(), "run.log");
  EXPECT_TRUE(at(cfg, {"plugins", "paths"}).is_sequence());
  EXPECT_TRUE(at(cfg, {"plugins", "paths"}).items().empty());
  EXPECT_TRUE(at(cfg, {"plugins", "load"}).is_sequence());
  EXPECT_TRUE(at(cfg, {"verifiers"}).is_sequence());
  EXPECT_TRUE(at(cfg, {"algorithm", "advantage"}).is_null());
  EXPECT_TRUE(at(cfg, {"algorithm", "policy_loss"}).is_null());
  EXPECT_TRUE(at(cfg, {"algorithm", "kl_estimator"}).is_null());
  EXPECT_TRUE(at(cfg, {"rollout", "backend"}).is_null());
  EXPECT_EQ(at(cfg, {"run", "seed"}).location().to_string(), "<default>");
}

TEST(Config, FileValuesOverrideDefaultsAndKeepTheirLocation) {
  const std::string path = write(test_dir(), "a.yaml", "run:\n  seed: 7\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "7");
  EXPECT_EQ(at(cfg, {"run", "seed"}).location().to_string(), path + ":2:9");
  EXPECT_EQ(at(cfg, {"run", "output_dir"}).scalar(), "runs/grpo");  // untouched sibling
  EXPECT_EQ(at(cfg, {"log", "level"}).scalar(), "info");
}

TEST(Config, UnknownKeyNamesFileLineKeyAndSuggestion) {
  const std::string path = write(test_dir(), "typo.yaml",
                                 "run:\n"
                                 "  seed: 3\n"
                                 "  ouput_dir: /tmp/x\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{path}, {}}); }),
            path + ":3:3: unknown key 'run.ouput_dir' (did you mean 'run.output_dir'?)");
}

TEST(Config, UnknownTopLevelKey) {
  const std::string dir = test_dir();
  const std::string typo = write(dir, "a.yaml", "log:\n  level: debug\nverifier: []\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{typo}, {}}); }),
            typo + ":3:1: unknown key 'verifier' (did you mean 'verifiers'?)");
  const std::string unrelated = write(dir, "b.yaml", "completely_unrelated: 1\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{unrelated}, {}}); }),
            unrelated + ":1:1: unknown key 'completely_unrelated'");
}

TEST(Config, WrongTypes) {
  const std::string dir = test_dir();
  const std::string seed = write(dir, "seed.yaml", "run:\n  seed: abc\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{seed}, {}}); }),
            seed + ":2:9: run.seed: expected an integer, got \"abc\"");
  const std::string frac = write(dir, "frac.yaml", "run:\n  seed: 1.5\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{frac}, {}}); }),
            frac + ":2:9: run.seed: expected an integer, got \"1.5\"");
  const std::string level = write(dir, "level.yaml", "log:\n  level: inf\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{level}, {}}); }),
            level + ":2:10: log.level: expected one of trace, debug, info, warn, error, got \"inf\" (did you mean 'info'?)");
  const std::string section = write(dir, "section.yaml", "run: 5\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{section}, {}}); }),
            section + ":1:6: run: expected a map, got \"5\"");
  const std::string str = write(dir, "str.yaml", "run:\n  output_dir: [a]\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{str}, {}}); }),
            str + ":2:15: run.output_dir: expected a string, got a list");
  const std::string list = write(dir, "list.yaml", "plugins:\n  load: [a, {b: 1}]\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{list}, {}}); }),
            list + ":2:13: plugins.load[1]: expected a string, got a map");
  const std::string top = write(dir, "top.yaml", "- a\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{top}, {}}); }),
            top + ":1:1: expected a map of configuration keys at the top level, got a list");
}

TEST(Config, NullScalarIsRejectedButNullSectionKeepsDefaults) {
  const std::string dir = test_dir();
  const std::string null_seed = write(dir, "a.yaml", "run:\n  seed:\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{null_seed}, {}}); }),
            null_seed + ":2:3: run.seed: expected an integer, got null");
  const std::string commented = write(dir, "b.yaml", "run:\n  # seed: 3\nlog:\n  level: warn\n");
  ConfigValue cfg = load_config(ConfigSources{{commented}, {}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "1");
  EXPECT_EQ(at(cfg, {"log", "level"}).scalar(), "warn");
}

TEST(Config, EmptyFileIsFine) {
  const std::string path = write(test_dir(), "empty.yaml", "# nothing yet\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "1");
}

// ---- layering ----

TEST(Config, LaterConfigFileWins) {
  const std::string dir = test_dir();
  const std::string a = write(dir, "a.yaml", "run:\n  seed: 3\n  output_dir: from_a\nplugins:\n  load: [x, y]\n");
  const std::string b = write(dir, "b.yaml", "run:\n  seed: 4\nplugins:\n  load: [z]\n");
  ConfigValue cfg = load_config(ConfigSources{{a, b}, {}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "4");
  EXPECT_EQ(at(cfg, {"run", "seed"}).location().to_string(), b + ":2:9");
  EXPECT_EQ(at(cfg, {"run", "output_dir"}).scalar(), "from_a");  // maps merge
  const ConfigValue& load = at(cfg, {"plugins", "load"});         // lists replace
  ASSERT_EQ(load.items().size(), 1u);
  EXPECT_EQ(load.items()[0].scalar(), "z");
  // The other order.
  cfg = load_config(ConfigSources{{b, a}, {}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "3");
  EXPECT_EQ(at(cfg, {"plugins", "load"}).items().size(), 2u);
}

TEST(Config, SetOverridesFilesAndLaterSetWins) {
  const std::string path = write(test_dir(), "a.yaml", "run:\n  seed: 3\nlog:\n  level: warn\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {"run.seed=9", "log.level=debug", "log.level=error"}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "9");
  EXPECT_EQ(at(cfg, {"run", "seed"}).location().to_string(), "--set #1");
  EXPECT_EQ(at(cfg, {"log", "level"}).scalar(), "error");
  EXPECT_EQ(at(cfg, {"log", "level"}).location().to_string(), "--set #3");
}

TEST(Config, SetErrorsAreReportedAtTheSet) {
  EXPECT_EQ(error_of([] { load_config(ConfigSources{{}, {"run.seed=2", "run.sed=3"}}); }),
            "--set #2: unknown key 'run.sed' (did you mean 'run.seed'?)");
  EXPECT_EQ(error_of([] { load_config(ConfigSources{{}, {"run.seed=abc"}}); }),
            "--set #1: run.seed: expected an integer, got \"abc\"");
}

TEST(Config, SetListIndexAndFlowValues) {
  const std::string path = write(test_dir(), "v.yaml",
                                 "verifiers:\n"
                                 "  - math\n"
                                 "  - name: format\n"
                                 "    weight: 0.5\n");
  ConfigValue cfg = load_config(ConfigSources{
      {path},
      {"verifiers.0.weight=2", "verifiers.1.weight=0.25", "verifiers.2=length", "plugins.paths=[/opt/a, b]",
       "algorithm.policy_loss={name: ppo_clip, clip_high: 0.28}", "run.output_dir=\"007\"",
       "algorithm.kl_estimator=k3", "algorithm.kl_estimator.clamp=20"}});
  const ConfigValue& v = at(cfg, {"verifiers"});
  ASSERT_EQ(v.items().size(), 3u);
  EXPECT_EQ(at(v.items()[0], {"name"}).scalar(), "math");  // shorthand became a map
  EXPECT_EQ(at(v.items()[0], {"weight"}).scalar(), "2");
  EXPECT_EQ(at(v.items()[0], {"weight"}).location().to_string(), "--set #1");
  EXPECT_EQ(at(v.items()[1], {"name"}).scalar(), "format");
  EXPECT_EQ(at(v.items()[1], {"weight"}).scalar(), "0.25");
  EXPECT_EQ(at(v.items()[2], {"name"}).scalar(), "length");
  const ConfigValue& paths = at(cfg, {"plugins", "paths"});
  ASSERT_EQ(paths.items().size(), 2u);
  EXPECT_EQ(paths.items()[0].scalar(), "/opt/a");
  EXPECT_EQ(paths.items()[1].scalar(), "b");
  EXPECT_EQ(paths.items()[1].location().to_string(), "--set #4");
  EXPECT_EQ(at(cfg, {"algorithm", "policy_loss", "name"}).scalar(), "ppo_clip");
  EXPECT_EQ(at(cfg, {"algorithm", "policy_loss", "clip_high"}).scalar(), "0.28");
  EXPECT_EQ(at(cfg, {"run", "output_dir"}).scalar(), "007");
  EXPECT_TRUE(at(cfg, {"run", "output_dir"}).quoted());
  EXPECT_EQ(at(cfg, {"algorithm", "kl_estimator", "name"}).scalar(), "k3");
  EXPECT_EQ(at(cfg, {"algorithm", "kl_estimator", "clamp"}).scalar(), "20");
}

TEST(Config, SetEmptyValueIsNull) {
  const std::string path = write(test_dir(), "a.yaml", "algorithm:\n  policy_loss: ppo_clip\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {"algorithm.policy_loss="}});
  EXPECT_TRUE(at(cfg, {"algorithm", "policy_loss"}).is_null());
}

TEST(Config, SetMapValueMergesIntoASection) {
  ConfigValue cfg = load_config(ConfigSources{{}, {"run={seed: 5}"}});
  EXPECT_EQ(at(cfg, {"run", "seed"}).scalar(), "5");
  EXPECT_EQ(at(cfg, {"run", "output_dir"}).scalar(), "runs/grpo");
}

TEST(Config, MalformedSet) {
  ConfigValue root = default_config();
  EXPECT_EQ(error_of([&] { apply_override(root, "run.seed", 1); }), "--set #1 'run.seed': expected KEY=VALUE");
  EXPECT_EQ(error_of([&] { apply_override(root, "=3", 2); }), "--set #2 '=3': empty key before '='");
  EXPECT_EQ(error_of([&] { apply_override(root, "run..seed=1", 3); }),
            "--set #3 'run..seed=1': empty segment in key 'run..seed'");
  EXPECT_EQ(error_of([&] { apply_override(root, "run.seed.x=1", 4); }),
            "--set #4 'run.seed.x=1': 'run.seed' is a scalar (\"1\"); it has no key 'x'");
  EXPECT_EQ(error_of([&] { apply_override(root, "verifiers.3.weight=1", 5); }),
            "--set #5 'verifiers.3.weight=1': index 3 is out of range: 'verifiers' has 0 items (use 0 to append)");
  EXPECT_EQ(error_of([&] { apply_override(root, "verifiers.weight=1", 6); }),
            "--set #6 'verifiers.weight=1': 'verifiers' is a list; select an item with a numeric index, e.g. "
            "'verifiers.0'");
  std::string msg = error_of([&] { apply_override(root, "plugins.paths=[a, b", 7); });
  EXPECT_EQ(msg.rfind("--set #7 'plugins.paths=[a, b': YAML syntax error in the value", 0), 0u) << msg;
  EXPECT_EQ(error_of([&] { apply_override(root, "run={seed: 1, seed: 2}", 8); }),
            "--set #8 'run={seed: 1, seed: 2}': invalid value: duplicate key 'seed' (first defined at line 1)");
  // A failed assignment leaves the tree as it was.
  ConfigValue before = default_config();
  EXPECT_TRUE(same_tree(root, before));
  // Through load_config the index is the 1-based position on the command line.
  EXPECT_EQ(error_of([] { load_config(ConfigSources{{}, {"run.seed=1", "log.level"}}); }),
            "--set #2 'log.level': expected KEY=VALUE");
}

// ---- component nodes ----

TEST(Config, ComponentShorthandMapAndMissingName) {
  const std::string dir = test_dir();
  const std::string shorthand = write(dir, "s.yaml", "algorithm:\n  policy_loss: cispo\n");
  ConfigValue cfg = load_config(ConfigSources{{shorthand}, {}});
  const ConfigValue& loss = at(cfg, {"algorithm", "policy_loss"});
  ASSERT_TRUE(loss.is_map());
  EXPECT_EQ(at(loss, {"name"}).scalar(), "cispo");
  EXPECT_EQ(at(loss, {"name"}).location().to_string(), shorthand + ":2:16");

  const std::string map = write(dir, "m.yaml", "algorithm:\n  policy_loss:\n    name: ppo_clip\n    clip_high: 0.28\n");
  cfg = load_config(ConfigSources{{map}, {}});
  EXPECT_EQ(at(cfg, {"algorithm", "policy_loss", "name"}).scalar(), "ppo_clip");
  EXPECT_EQ(at(cfg, {"algorithm", "policy_loss", "clip_high"}).scalar(), "0.28");  // options are not checked here

  const std::string no_name = write(dir, "n.yaml", "algorithm:\n  policy_loss:\n    clip_high: 0.28\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{no_name}, {}}); }),
            no_name + ":3:5: algorithm.policy_loss: component map has no 'name' (a component is written `NAME` or "
                      "as a map `{name: NAME, ...options}`)");

  const std::string verifier = write(dir, "v.yaml", "verifiers:\n  - math\n  - weight: 2\n");
  std::string msg = error_of([&] { load_config(ConfigSources{{verifier}, {}}); });
  EXPECT_EQ(msg.rfind(verifier + ":3:5: verifiers[1]: component map has no 'name'", 0), 0u) << msg;

  const std::string bad_name = write(dir, "b.yaml", "rollout:\n  backend:\n    name: [x]\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{bad_name}, {}}); }),
            bad_name + ":3:11: rollout.backend.name: expected a component name, got a list");

  const std::string weight = write(dir, "w.yaml", "verifiers:\n  - name: math\n    weight: heavy\n");
  EXPECT_EQ(error_of([&] { load_config(ConfigSources{{weight}, {}}); }),
            weight + ":3:13: verifiers[0].weight: expected a finite number, got \"heavy\"");

  const std::string list = write(dir, "l.yaml", "algorithm:\n  advantage: [grpo]\n");
  msg = error_of([&] { load_config(ConfigSources{{list}, {}}); });
  EXPECT_EQ(msg.rfind(list + ":2:14: algorithm.advantage: expected a component, got a list", 0), 0u) << msg;
}

TEST(Config, ComponentLayersMergeOptionsUnlessTheNameChanges) {
  const std::string dir = test_dir();
  const std::string a = write(dir, "a.yaml", "algorithm:\n  policy_loss:\n    name: ppo_clip\n    clip_high: 0.28\n");
  const std::string b = write(dir, "b.yaml", "algorithm:\n  policy_loss:\n    clip_low: 0.2\n");
  const std::string c = write(dir, "c.yaml", "algorithm:\n  policy_loss: cispo\n");
  ConfigValue ab = load_config(ConfigSources{{a, b}, {}});
  const ConfigValue& merged = at(ab, {"algorithm", "policy_loss"});
  EXPECT_EQ(at(merged, {"name"}).scalar(), "ppo_clip");
  EXPECT_EQ(at(merged, {"clip_high"}).scalar(), "0.28");
  EXPECT_EQ(at(merged, {"clip_low"}).scalar(), "0.2");
  ConfigValue ac = load_config(ConfigSources{{a, c}, {}});
  const ConfigValue& replaced = at(ac, {"algorithm", "policy_loss"});
  EXPECT_EQ(replaced.entries().size(), 1u);  // cispo does not inherit ppo_clip's clip_high
  EXPECT_EQ(at(replaced, {"name"}).scalar(), "cispo");
  // A shorthand file followed by an options-only file: the options join the named component.
  ConfigValue cb = load_config(ConfigSources{{c, b}, {}});
  EXPECT_EQ(at(cb, {"algorithm", "policy_loss", "name"}).scalar(), "cispo");
  EXPECT_EQ(at(cb, {"algorithm", "policy_loss", "clip_low"}).scalar(), "0.2");
}

TEST(Config, StringListShorthandBecomesAList) {
  const std::string path = write(test_dir(), "a.yaml", "plugins:\n  load: my_plugin\n  paths:\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {}});
  const ConfigValue& load = at(cfg, {"plugins", "load"});
  ASSERT_TRUE(load.is_sequence());
  ASSERT_EQ(load.items().size(), 1u);
  EXPECT_EQ(load.items()[0].scalar(), "my_plugin");
  EXPECT_TRUE(at(cfg, {"plugins", "paths"}).is_sequence());
  EXPECT_TRUE(at(cfg, {"plugins", "paths"}).items().empty());
}

// ---- YAML output ----

TEST(ToYaml, BlockStyleByHand) {
  ConfigValue v = parse_yaml(
      "a: 1\n"
      "b: \"007\"\n"
      "c: []\n"
      "d: ~\n"
      "e: {}\n"
      "f:\n"
      "  - x\n"
      "  - {name: m, weight: 2}\n"
      "  - [1, 2]\n"
      "g: {h: 'it''s'}\n",
      "t.yaml");
  EXPECT_EQ(to_yaml(v),
            "a: 1\n"
            "b: \"007\"\n"
            "c: []\n"
            "d: null\n"
            "e: {}\n"
            "f:\n"
            "  - x\n"
            "  - name: m\n"
            "    weight: 2\n"
            "  - - 1\n"
            "    - 2\n"
            "g:\n"
            "  h: \"it's\"\n");
  EXPECT_EQ(to_yaml(ConfigValue::make_null()), "null\n");
  EXPECT_EQ(to_yaml(ConfigValue::make_sequence()), "[]\n");
}

TEST(ToYaml, QuotesStringsThatWouldReparseAsSomethingElse) {
  ConfigValue v = ConfigValue::make_map();
  // Plain scalars built in code (not parsed), whose text YAML would read differently.
  for (const char* text : {"null", "~", "", "a: b", "- x", "#x", "x #y", " lead", "trail ", "[a", "{a", "*a", "&a",
                           "!a", "|", ">", "@a", "`a", "%a", "line\nbreak", "tab\there", "quote\"back\\slash", "---"})
    v.set(text, ConfigValue::make_scalar(text));
  ConfigValue back = parse_yaml(to_yaml(v), "back.yaml");
  ASSERT_EQ(back.entries().size(), v.entries().size()) << to_yaml(v);
  for (const auto& e : v.entries()) {
    const ConfigValue* b = back.find(e.key);
    ASSERT_NE(b, nullptr) << "key [" << e.key << "] lost in:\n" << to_yaml(v);
    ASSERT_TRUE(b->is_scalar()) << "[" << e.key << "] in:\n" << to_yaml(v);
    EXPECT_EQ(b->scalar(), e.key) << to_yaml(v);
  }
  EXPECT_EQ(to_yaml(parse_yaml("k: plain text\n", "p.yaml")), "k: plain text\n");  // not quoted needlessly
}

TEST(ToYaml, RoundTripOfAFullConfig) {
  const std::string dir = test_dir();
  const std::string path = write(dir, "full.yaml",
                                 "run:\n"
                                 "  output_dir: \"runs/it's: here\"\n"
                                 "  seed: -3\n"
                                 "log:\n"
                                 "  level: debug\n"
                                 "  file: \"\"\n"
                                 "plugins:\n"
                                 "  paths: [\"/opt/p\", ./rel]\n"
                                 "  load: [\"true\", \"123\", 'null', ünïcødé]\n"
                                 "verifiers:\n"
                                 "  - math\n"
                                 "  - name: format\n"
                                 "    weight: 0.5\n"
                                 "    pattern: \"(?s).*?</think>\\\\s*<answer>.*?</answer>\"\n"
                                 "    tags: {open: \"<answer>\", nested: [[a, b], {}, []]}\n"
                                 "    multiline: |\n"
                                 "      first line\n"
                                 "        indented: second\n"
                                 "algorithm:\n"
                                 "  policy_loss: {name: ppo_clip, clip_high: 0.28, dual_clip: .inf, enabled: yes}\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {"algorithm.advantage=grpo"}});
  const std::string text = to_yaml(cfg);
  EXPECT_TRUE(same_tree(parse_yaml(text, "again.yaml"), cfg)) << text;
  // The effective config is itself a valid config that reproduces the same tree.
  const std::string again = write(dir, "again.yaml", text);
  EXPECT_TRUE(same_tree(load_config(ConfigSources{{again}, {}}), cfg)) << text;
  EXPECT_TRUE(same_tree(parse_yaml(to_yaml(default_config()), "d.yaml"), default_config()));
}

TEST(ToYaml, EffectiveConfigWrittenAtomicallyAndReadBack) {
  const std::string dir = test_dir();
  const std::string path = write(dir, "a.yaml", "run:\n  seed: 42\nverifiers: [math]\n");
  ConfigValue cfg = load_config(ConfigSources{{path}, {"log.level=warn"}});
  const std::string out = dir + "/run/effective_config.yaml";
  atomic_write_file(out, to_yaml(cfg));
  const std::string text = read_file(out);
  EXPECT_NE(text.find("seed: 42\n"), std::string::npos) << text;
  EXPECT_NE(text.find("level: warn\n"), std::string::npos) << text;
  EXPECT_NE(text.find("verifiers:\n  - name: math\n"), std::string::npos) << text;
  ConfigValue back = load_yaml_file(out);
  EXPECT_TRUE(same_tree(back, cfg)) << text;
  EXPECT_EQ(at(back, {"run", "seed"}).location().file, out);
  validate_config(back);
}

}  // namespace

// Free-form maps (tokenizer.chat_template_kwargs) reach JSON with YAML 1.2's scalar types;
// quoted scalars stay strings.
TEST(ConfigToJson, ScalarsKeepTheirYamlTypes) {
  const ConfigValue v = parse_yaml(
      "kw:\n  enable_thinking: false\n  n: 3\n  x: -0.5\n  e: 1e3\n  none: ~\n  text: hello\n  quoted: \"false\"\n"
      "  list: [1, 'a', true]\n  nested: {k: null}\n",
      "cfg.yaml");
  EXPECT_EQ(grpo::core::config_to_json_text(*v.find("kw")),
            R"({"enable_thinking":false,"n":3,"x":-0.5,"e":1000.0,"none":null,"text":"hello","quoted":"false",)"
            R"("list":[1,"a",true],"nested":{"k":null}})");
}
