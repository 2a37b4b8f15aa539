// Shared by the verifier plugin tests: a verifier built from the build's plugin folder the way
// a run builds it (configured with a ConfigValue tree at key path verifiers[0]), one verify()
// call, its details, and the ConfigError a bad configuration throws.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grpo/sdk/config_view.h"
#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"

namespace grpo::testing::verifier_tests {

using json = nlohmann::json;
using Option = grpo::testing::PluginOption;

inline std::shared_ptr<grpo::sdk::Verifier> make(const std::string& name, const std::vector<Option>& opts = {}) {
  return grpo::testing::create_component<grpo::sdk::Verifier>(name, opts, "verifiers[0]");
}

inline grpo::sdk::VerifierResult run(const grpo::sdk::Verifier& v, const std::string& completion,
                                     const std::string& gt = "null") {
  grpo::sdk::VerifierInput in;
  in.prompt = "p";
  in.completion = completion;
  in.ground_truth = gt;
  in.dataset = "test";
  in.metadata = "{}";
  return v.verify(in);
}

inline json details(const grpo::sdk::VerifierResult& r) {
  json d = json::parse(r.details);
  EXPECT_TRUE(d.is_object()) << r.details;
  return d;
}

// The message of the ConfigError `fn` throws, "" when it throws none.
template <class Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const grpo::sdk::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace grpo::testing::verifier_tests
