// The one exit-code table of the grpo-* programs and the one exception -> exit code mapping
// (apps/cli/exit_codes.h), as docs/cli.md#exit-codes documents them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "apps/cli/app_common.h"
#include "apps/cli/exit_codes.h"
#include "core/data/dataset.h"
#include "core/dist/process_group.h"
#include "core/plugin/plugin_registry.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"

namespace {

using namespace grpo::cli;
using ::testing::HasSubstr;

template <class Fn>
ExitStatus status_of(Fn&& throw_it) {
  try {
    throw_it();
  } catch (...) {
    return exit_status_of(std::current_exception());
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

TEST(ExitCodes, TableHasCodesZeroToSevenInOrderWithDistinctNames) {
  const auto& table = exit_code_table();
  ASSERT_EQ(table.size(), 8u);
  std::set<std::string> names;
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<int>(table[i].code), static_cast<int>(i));
    EXPECT_TRUE(names.insert(table[i].name).second) << table[i].name;
    EXPECT_STRNE(table[i].meaning, "");
  }
  // The program-specific names share the numbers of docs/cli.md's table.
  EXPECT_EQ(kExitBadInput, 5);
  EXPECT_EQ(kExitRequestsFailed, 6);
  EXPECT_EQ(kExitGenerationFailed, 7);
}

TEST(ExitCodes, EachExceptionMapsToItsDocumentedCode) {
  struct Case {
    ExitStatus status;
    int code;
    std::string message;
  };
  const Case cases[] = {
      {status_of([] { throw AppError(kExitRequestsFailed, "2 of 3 request(s) failed"); }), 6, "2 of 3 request(s) failed"},
      {status_of([] { throw grpo::core::dist::PeerLostError("rank 1 died", 1); }), 7, "rank 1 died"},
      {status_of([] { throw grpo::sdk::ConfigError("a.yaml:2:3: run.seed: expected an integer"); }), 3,
       "configuration error: a.yaml:2:3: run.seed: expected an integer"},
      {status_of([] { throw grpo::core::PluginError("no verifier named 'x'"); }), 4, "plugin error: no verifier named 'x'"},
      {status_of([] { throw grpo::core::DataError("train.jsonl:4: missing prompt"); }), 3,
       "data error: train.jsonl:4: missing prompt"},
      {status_of([] { throw std::invalid_argument("--nproc takes a number"); }), 2, "--nproc takes a number"},
      {status_of([] { throw std::runtime_error("disk full"); }), 1, "internal error: disk full"},
      {status_of([] { throw std::logic_error("unreachable"); }), 1, "internal error: unreachable"},
      {status_of([] { throw 42; }), 1, "internal error: an exception not derived from std::exception"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(static_cast<int>(c.status.code), c.code) << c.message;
    EXPECT_EQ(c.status.message, c.message);
  }
}

TEST(ExitCodes, RunJobMakesAFailureOfTheJobARuntimeError) {
  // A job's own failure: 5, with the context.
  ExitStatus s = status_of([] { run_job([] { throw std::runtime_error("cannot write x"); }, "evaluating m: "); });
  EXPECT_EQ(s.code, kExitRuntime);
  EXPECT_EQ(s.message, "evaluating m: cannot write x");
  // What the mapping names passes through with its own code; a logic error stays a bug.
  s = status_of([] { run_job([] { throw grpo::sdk::ConfigError("k: bad"); }); });
  EXPECT_EQ(s.code, kExitConfig);
  s = status_of([] { run_job([] { throw grpo::core::DataError("f:1: bad row"); }); });
  EXPECT_EQ(s.code, kExitConfig);
  s = status_of([] { run_job([] { throw grpo::core::PluginError("p"); }); });
  EXPECT_EQ(s.code, kExitPlugin);
  s = status_of([] { run_job([] { throw grpo::core::dist::PeerLostError("rank 0 hung", 0); }); });
  EXPECT_EQ(s.code, kExitPeerLost);
  s = status_of([] { run_job([] { throw AppError(kExitGenerationFailed, "backend failed"); }); });
  EXPECT_EQ(s.code, kExitGenerationFailed);
  s = status_of([] { run_job([] { throw std::invalid_argument("bad flag"); }); });
  EXPECT_EQ(s.code, kExitUsage);
  s = status_of([] { run_job([] { throw std::logic_error("bug"); }); });
  EXPECT_EQ(s.code, kExitInternal);
}

TEST(ExitCodes, RunAppGuardedPrintsTheProgramAndTheMessage) {
  ::testing::internal::CaptureStderr();
  const int code = run_app_guarded("grpo-x", []() -> int { throw grpo::sdk::ConfigError("a.yaml:1:1: bad"); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "grpo-x: configuration error: a.yaml:1:1: bad\n");
  EXPECT_EQ(code, 3);
  EXPECT_EQ(run_app_guarded("grpo-x", [] { return 6; }), 6);
}

TEST(ExitCodes, HelpBlockUsesTheTableUnlessTheProgramWordsItsOwn) {
  EXPECT_EQ(exit_codes_help({{kExitOk}, {kExitUsage}, {kExitBadInput, "some lines were invalid"}}),
            "\nExit codes:\n  0  success\n  2  bad command line\n  5  some lines were invalid\n");
}

TEST(ExitCodes, DocsCliListsEveryCodeInOneTable) {
  const std::string md = grpo::core::read_file(GRPO_SOURCE_DIR "/docs/cli.md");
  const std::string section = "\n## Exit codes\n";
  ASSERT_THAT(md, HasSubstr(section));
  EXPECT_EQ(md.find(section), md.rfind(section)) << "one exit-code section";
  const std::string table = md.substr(md.find(section));
  for (const ExitCodeInfo& row : exit_code_table())
    EXPECT_THAT(table, HasSubstr("| " + std::to_string(static_cast<int>(row.code)) + " | `" + row.name + "` |"));
}

}  // namespace
