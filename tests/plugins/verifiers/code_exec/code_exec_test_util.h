// Helpers shared by the code_exec test files: the verifier under test with short limits, one
// verify() call on a fenced block, its details.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grpo/sdk/verifier.h"
#include "tests/support/build_plugins.h"

namespace grpo_code_test {

using grpo::sdk::Verifier;
using grpo::sdk::VerifierResult;
using json = nlohmann::json;
using Option = grpo::testing::PluginOption;

// Short limits keep the suite fast; the defaults are documented in docs/sandbox.md.
inline std::shared_ptr<Verifier> make(std::vector<Option> opts = {}) {
  for (Option o : {Option{"timeout_s", "2"}, Option{"memory_mb", "512"}, Option{"max_processes", "16"},
                   Option{"output_kb", "256"}, Option{"max_concurrency", "2"}})
    if (std::none_of(opts.begin(), opts.end(), [&](const Option& given) { return given.key == o.key; }))
      opts.push_back(o);
  return grpo::testing::create_component<Verifier>("code", opts, "verifiers[0]");
}

inline VerifierResult run(const Verifier& v, const std::string& code, const json& gt) {
  return grpo::testing::verify_once(v, "Here it is:\n```python\n" + code + "\n```\n", gt, "code");
}

inline json details(const VerifierResult& r) { return json::parse(r.details); }

// An assert test that fails unless `ok` is true in the program's namespace.
inline const json kNeedsOk = json::array({"assert ok"});

// A correct program still scores 1 after a hostile one.
inline void expect_pool_still_works(const Verifier& v) {
  EXPECT_EQ(run(v, "def f(x):\n    return x + 1\nok = f(1) == 2", kNeedsOk).score, 1.0);
}

}  // namespace grpo_code_test
