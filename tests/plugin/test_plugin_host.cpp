// The plugin host against real plugin libraries: good fixtures load and construct; each
// deliberately bad fixture fails with its own message, and the host keeps working.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/plugin/plugin_registry.h"
#include "core/runtime/components.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kGoodDir = std::string(GRPO_FIXTURE_PLUGIN_DIR) + "/good";
const std::string kBadDir = std::string(GRPO_FIXTURE_PLUGIN_DIR) + "/bad";

// Fixture files: good ones load, bad ones each fail in their own way.
std::string fixture(const std::string& name) {
  const bool bad = name.find("_bad_") != std::string::npos || name.find("_duplicate_") != std::string::npos ||
                   name == "fixture_no_entry" || name == "fixture_register_throws";
  return (bad ? kBadDir : kGoodDir) + "/libgrpo_" + name + ".so";
}

// Only the good fixture folder: neither the bad one, the environment nor the install dir.
PluginSearchPath fixture_path() {
  PluginSearchPath sp;
  sp.explicit_dirs = {kGoodDir};
  sp.use_environment = false;
  sp.use_install_dir = false;
  return sp;
}

std::string load_error(PluginRegistry& registry, const std::string& name) {
  try {
    registry.load_file(fixture(name));
  } catch (const PluginError& e) {
    return e.what();
  }
  ADD_FAILURE() << "loading " << name << " did not fail";
  return {};
}

sdk::ConfigValue options(std::initializer_list<std::pair<const char*, const char*>> kv) {
  sdk::ConfigValue m = sdk::ConfigValue::make_map(sdk::SourceLocation{"test.yaml", 3, 5});
  int line = 4;  // the first option is on line 4, the next on 5, ...
  for (const auto& [k, v] : kv) {
    m.set(k, sdk::ConfigValue::make_scalar(v, {"test.yaml", line, 16}), {"test.yaml", line, 5});
    ++line;
  }
  return m;
}

sdk::VerifierInput input(std::string_view completion, std::string_view truth) {
  sdk::VerifierInput in;
  in.completion = completion;
  in.ground_truth = truth;
  return in;
}

TEST(PluginHost, LoadsGoodPluginAndReportsItsManifest) {
  PluginRegistry registry(fixture_path());
  PluginInfo info = registry.load_file(fixture("fixture_good"));
  EXPECT_EQ(info.name, "fixture_good");
  EXPECT_EQ(info.version, "2.3.4");
  EXPECT_EQ(info.abi_major, 1u);
  ASSERT_EQ(info.components.size(), 2u);
  auto components = registry.components();
  ASSERT_EQ(components.size(), 2u);
  EXPECT_EQ(components[0].name, "fixture_always_one");  // sorted by name within a kind
  EXPECT_EQ(components[1].name, "fixture_contains");
  EXPECT_EQ(components[1].kind, sdk::ComponentKind::kVerifier);
  EXPECT_EQ(components[1].plugin_version, "2.3.4");
  EXPECT_THAT(components[1].file, HasSubstr("libgrpo_fixture_good.so"));
  EXPECT_FALSE(components[1].uses_torch);
}

TEST(PluginHost, LoadingTheSameFileTwiceIsANoOp) {
  PluginRegistry registry(fixture_path());
  registry.load_file(fixture("fixture_good"));
  registry.load_file(fixture("fixture_good"));
  EXPECT_EQ(registry.plugins().size(), 1u);
  EXPECT_EQ(registry.components().size(), 2u);
}

TEST(PluginHost, ConstructsVerifierWithOptionsAndScores) {
  PluginRegistry registry(fixture_path());
  sdk::ConfigValue opts = options({{"name", "fixture_contains"}, {"bonus", "0.25"}});
  auto v = registry.create_verifier("fixture_contains", &opts, "verifiers[0]");
  ASSERT_TRUE(v);
  EXPECT_DOUBLE_EQ(v->verify(input("the answer is 42", "\"42\"")).score, 1.25);
  EXPECT_DOUBLE_EQ(v->verify(input("the answer is 41", "\"42\"")).score, 0.25);
}

TEST(PluginHost, ResolvesUnqualifiedNameByDiscoveryAndQualifiedName) {
  PluginRegistry registry(fixture_path());
  // "fixture_always_one" is not a plugin file name: found by scanning the search path.
  auto one = registry.create_verifier("fixture_always_one", nullptr, "verifiers[0]");
  EXPECT_DOUBLE_EQ(one->verify(input("x", "\"y\"")).score, 1.0);
  auto qualified = registry.create_verifier("fixture_good/fixture_contains", nullptr, "verifiers[1]");
  EXPECT_DOUBLE_EQ(qualified->verify(input("abc", "\"b\"")).score, 1.0);
}

TEST(PluginHost, UnknownComponentNameSuggestsAndListsAvailable) {
  PluginRegistry registry(fixture_path());
  registry.load_file(fixture("fixture_good"));
  try {
    registry.create_verifier("fixture_contain", nullptr, "verifiers[2]");
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("verifiers[2]: no verifier named 'fixture_contain'"),
                                HasSubstr("did you mean 'fixture_contains'?"), HasSubstr("fixture_always_one"),
                                HasSubstr(kGoodDir)));
  }
}

TEST(PluginHost, QualifiedNameWithUnknownComponentNamesPlugin) {
  PluginRegistry registry(fixture_path());
  try {
    registry.create_verifier("fixture_good/nope", nullptr, "verifiers[0]");
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("plugin 'fixture_good' has no verifier named 'nope'"),
                                HasSubstr("fixture_contains")));
  }
}

TEST(PluginHost, RejectsWrongAbiMajorNamingBothVersions) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_bad_abi_major"),
              AllOf(HasSubstr("ABI major version mismatch"), HasSubstr("built for grpo SDK ABI 2.2"),
                    HasSubstr("this host implements ABI 1.2"), HasSubstr("libgrpo_fixture_bad_abi_major.so")));
  EXPECT_TRUE(registry.components().empty());
}

TEST(PluginHost, RejectsNewerAbiMinorNamingBothVersions) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_bad_abi_minor"),
              AllOf(HasSubstr("ABI minor version too new"), HasSubstr("built for grpo SDK ABI 1.3"),
                    HasSubstr("this host implements ABI 1.2")));
}

// ABI 1.1 appended score_range() and concurrent_calls() to Verifier: the host calls them on
// verifiers of plugins built for minor >= 1 only. The same verifier claimed by a 1.0 manifest
// keeps the defaults (a real 1.0 vtable has no such slots) and still loads and scores.
TEST(PluginHost, CallsAbi11VerifierFunctionsOnlyForPluginsOfMinorOneOrNewer) {
  PluginRegistry registry(fixture_path());
  const VerifierSlot old_slot = create_verifier_slot(registry, "fixture_unbounded_1_0", nullptr, "verifiers[0]");
  EXPECT_EQ(old_slot.score_range, sdk::ScoreRange::kUnit);
  EXPECT_EQ(old_slot.concurrent_calls, 0u);
  EXPECT_EQ(old_slot.verifier->verify(input("a", "b")).score, 5.0);
  const VerifierSlot new_slot = create_verifier_slot(registry, "fixture_unbounded_1_1", nullptr, "verifiers[1]");
  EXPECT_EQ(new_slot.score_range, sdk::ScoreRange::kUnbounded);
  EXPECT_EQ(new_slot.concurrent_calls, 99u);
}

// ABI 1.2's tool kind: a tool loads and is built with its description and schema; a schema that
// is not JSON, or not an object schema, is refused when the tool is built, naming the entry; a
// factory's exception is reported the same way.
TEST(PluginHost, BuildsToolsAndRefusesUnusableSchemas) {
  PluginRegistry registry(fixture_path());
  const ToolSlot echo = create_tool_slot(registry, "fixture_echo", nullptr, "tools[0]");
  EXPECT_EQ(echo.call_name, "fixture_echo");
  EXPECT_EQ(echo.description, "Echoes its text.");
  grpo::sdk::ToolCallContext context;
  EXPECT_EQ(echo.tool->call(R"({"text": "x"})", context).text, R"({"text": "x"})");
  auto error = [&](const std::string& name) {
    try {
      create_tool_slot(registry, name, nullptr, "tools[3]");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << name << " was built";
    return std::string();
  };
  EXPECT_THAT(error("fixture_schema_not_json"), AllOf(HasSubstr("tools[3]"), HasSubstr("parameters that are not JSON")));
  EXPECT_THAT(error("fixture_schema_not_object"),
              AllOf(HasSubstr("tools[3]"), HasSubstr("unusable parameters schema"), HasSubstr("expected \"object\"")));
  EXPECT_THAT(error("fixture_tool_factory_throws"), HasSubstr("no tool today"));
  EXPECT_THAT(error("fixture_no_such_tool"), HasSubstr("fixture_no_such_tool"));
}

TEST(PluginHost, RefusesToolsOfPluginsOlderThanTheToolKindAndDuplicateTools) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_bad_tool_old_minor"),
              AllOf(HasSubstr("tool 'fixture_old_tool'"), HasSubstr("the tool kind exists since SDK ABI 1.2"),
                    HasSubstr("the plugin declares ABI 1.1")));
  EXPECT_THAT(load_error(registry, "fixture_duplicate_tool"),
              HasSubstr("duplicate component name: tool 'fixture_tool_twice' is registered twice by this plugin"));
}

TEST(PluginHost, RejectsWrongStructSizeNamingTheType) {
  PluginRegistry registry(fixture_path());
  const std::string expected_sizes = std::to_string(sizeof(sdk::VerifierInput) + 8) + "/" +
                                     std::to_string(alignof(sdk::VerifierInput)) + " in the plugin but " +
                                     std::to_string(sizeof(sdk::VerifierInput)) + "/" +
                                     std::to_string(alignof(sdk::VerifierInput)) + " in the host";
  EXPECT_THAT(load_error(registry, "fixture_bad_struct_size"),
              AllOf(HasSubstr("sizeof/alignof(grpo::sdk::VerifierInput)"), HasSubstr(expected_sizes),
                    HasSubstr("plugin 'fixture_bad_struct_size'")));
}

TEST(PluginHost, RejectsCxx11AbiMismatch) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_bad_cxx11_abi"),
              AllOf(HasSubstr("C++ standard library ABI mismatch"), HasSubstr("_GLIBCXX_USE_CXX11_ABI=0"),
                    HasSubstr("the host with _GLIBCXX_USE_CXX11_ABI=1")));
}

TEST(PluginHost, RejectsLibraryWithoutEntrySymbol) {
  PluginRegistry registry(fixture_path());
  const std::string first = load_error(registry, "fixture_no_entry");
  EXPECT_THAT(first, AllOf(HasSubstr("is not a grpo plugin"), HasSubstr("grpo_plugin_entry_v1"),
                           HasSubstr("libgrpo_fixture_no_entry.so")));
  // The library stays mapped; a second attempt gives the same diagnosis.
  EXPECT_EQ(load_error(registry, "fixture_no_entry"), first);
}

TEST(PluginHost, RejectsDuplicateNameWithinPluginAndRegistersNothingOfIt) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_duplicate_name"),
              AllOf(HasSubstr("duplicate component name"), HasSubstr("verifier 'fixture_twice' is registered twice")));
  EXPECT_TRUE(registry.components().empty()) << "fixture_unique_ok must not be registered by a failed load";
  EXPECT_TRUE(registry.plugins().empty());
}

TEST(PluginHost, RejectsDuplicateNameAcrossPlugins) {
  PluginRegistry registry(fixture_path());
  registry.load_file(fixture("fixture_good"));
  EXPECT_THAT(load_error(registry, "fixture_duplicate_across"),
              AllOf(HasSubstr("duplicate component name"), HasSubstr("verifier 'fixture_contains'"),
                    HasSubstr("already registered by plugin 'fixture_good'")));
  EXPECT_EQ(registry.components().size(), 2u);
}

TEST(PluginHost, RegistrationThatThrowsRegistersNothing) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_register_throws"),
              HasSubstr("registration failed: registration exploded"));
  EXPECT_TRUE(registry.components().empty());
}

TEST(PluginHost, RejectsComponentBuiltAgainstOtherLibTorch) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT(load_error(registry, "fixture_bad_torch_version"),
              AllOf(HasSubstr("policy_loss 'fixture_old_torch_loss' was built against LibTorch 0.4.1"),
                    HasSubstr("this host uses LibTorch")));
}

TEST(PluginHost, FactoryThatThrowsGivesClearError) {
  PluginRegistry registry(fixture_path());
  try {
    registry.create_verifier("fixture_thrower", nullptr, "verifiers[0]");
    FAIL() << "expected PluginError";
  } catch (const PluginError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("verifiers[0]: cannot create verifier 'fixture_thrower'"),
                                HasSubstr("plugin 'fixture_factory_throws'"),
                                HasSubstr("boom: cannot open /nonexistent/model.bin")));
  }
}

TEST(PluginHost, FactoryThatRejectsItsConfigNamesKeyAndLocation) {
  PluginRegistry registry(fixture_path());
  sdk::ConfigValue opts = options({{"name", "fixture_thresholded"}, {"threshold", "7"}});
  try {
    registry.create_verifier("fixture_thresholded", &opts, "verifiers[1]");
    FAIL() << "expected ConfigError";
  } catch (const sdk::ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("test.yaml:5:16: verifiers[1].threshold: must be in [0, 1]"),
                                HasSubstr("verifier 'fixture_thresholded'")));
  }
  sdk::ConfigValue wrong_type = options({{"threshold", "high"}});
  try {
    registry.create_verifier("fixture_thresholded", &wrong_type, "verifiers[1]");
    FAIL() << "expected ConfigError";
  } catch (const sdk::ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("test.yaml:4:16: verifiers[1].threshold: expected a number, got \"high\""));
  }
  sdk::ConfigValue fine = options({{"threshold", "0.75"}});
  EXPECT_DOUBLE_EQ(registry.create_verifier("fixture_thresholded", &fine, "v")->verify({}).score, 0.75);
}

TEST(PluginHost, UnknownOptionIsRejectedWithSuggestion) {
  PluginRegistry registry(fixture_path());
  sdk::ConfigValue opts = options({{"name", "fixture_contains"}, {"weight", "2"}, {"bonsu", "1"}});
  try {
    registry.create_verifier("fixture_contains", &opts, "verifiers[0]");
    FAIL() << "expected ConfigError";
  } catch (const sdk::ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("test.yaml:6:5: verifiers[0].bonsu: unknown option"),
                                HasSubstr("did you mean 'bonus'?")));
  }
}

TEST(PluginHost, TorchPluginRegistersEveryKind) {
  PluginRegistry registry(fixture_path());
  registry.load_file(fixture("fixture_torch"));
  std::vector<std::pair<sdk::ComponentKind, std::string>> got;
  for (const auto& c : registry.components()) {
    got.emplace_back(c.kind, c.name);
    EXPECT_TRUE(c.uses_torch) << c.name;
  }
  std::vector<std::pair<sdk::ComponentKind, std::string>> want = {
      {sdk::ComponentKind::kAdvantage, "fixture_centered"},
      {sdk::ComponentKind::kPolicyLoss, "fixture_vanilla"},
      {sdk::ComponentKind::kKlEstimator, "fixture_k1"},
      {sdk::ComponentKind::kRolloutBackend, "fixture_echo"},
  };
  EXPECT_EQ(got, want);
  for (const auto& [kind, name] : want) EXPECT_TRUE(registry.create(kind, name, nullptr, "algorithm.x")) << name;
  // A kind mismatch does not resolve: a verifier named fixture_k1 does not exist.
  EXPECT_THROW(registry.create_verifier("fixture_k1", nullptr, "verifiers[0]"), PluginError);
}

TEST(PluginHost, HostSurvivesEveryBadPluginInOneProcess) {
  PluginSearchPath both = fixture_path();
  both.explicit_dirs = {kGoodDir, kBadDir};  // good/ first: fixture_good owns its names
  PluginRegistry registry(both);
  for (const char* bad : {"fixture_bad_abi_major", "fixture_bad_abi_minor", "fixture_bad_struct_size",
                          "fixture_bad_cxx11_abi", "fixture_no_entry", "fixture_duplicate_name",
                          "fixture_register_throws", "fixture_bad_torch_version", "fixture_bad_tool_old_minor",
                          "fixture_duplicate_tool"}) {
    EXPECT_THROW(registry.load_file(fixture(bad)), PluginError) << bad;
  }
  EXPECT_THROW(registry.create_verifier("fixture_thrower", nullptr, "v"), PluginError);
  // Discovery reports the broken files but still loads the good ones.
  auto failures = registry.load_all();
  EXPECT_EQ(failures.size(), 11u);  // the 10 above + fixture_duplicate_across
  for (const auto& f : failures) EXPECT_NE(f.file.find("/bad/"), std::string::npos) << f.file;
  auto v = registry.create_verifier("fixture_contains", nullptr, "verifiers[0]");
  EXPECT_DOUBLE_EQ(v->verify(input("yes", "\"yes\"")).score, 1.0);
  for (const auto& c : registry.components())
    if (c.name == "fixture_contains") EXPECT_EQ(c.plugin, "fixture_good");
}

TEST(PluginHost, MissingPluginFileIsAClearError) {
  PluginRegistry registry(fixture_path());
  EXPECT_THAT([&] { try { registry.load_plugin("does_not_exist"); } catch (const PluginError& e) { return std::string(e.what()); } return std::string(); }(),
              AllOf(HasSubstr("libgrpo_does_not_exist.so not found"), HasSubstr(kGoodDir)));
  EXPECT_THROW(registry.load_file("/nonexistent/libgrpo_x.so"), PluginError);
}

TEST(PluginHost, ComponentOutlivesRegistry) {
  std::shared_ptr<sdk::Verifier> v;
  {
    PluginRegistry registry(fixture_path());
    v = registry.create_verifier("fixture_contains", nullptr, "verifiers[0]");
  }
  EXPECT_DOUBLE_EQ(v->verify(input("still here", "\"here\"")).score, 1.0);
}

}  // namespace
}  // namespace grpo::core
