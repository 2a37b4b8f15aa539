// grpo-verify run as a user runs it: JSONL in, one scored JSON object per line out, the
// config's verifier options applied, invalid lines reported with their line number.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

Result grpo_verify(const std::string& args, const fs::path& cwd) {
  const fs::path err_file = cwd / "stderr.txt";
  const std::string cmd = "cd '" + cwd.string() + "' && env -u GRPO_PLUGIN_PATH '" GRPO_VERIFY_BINARY "' " + args +
                          " 2> '" + err_file.string() + "'";
  const grpo::testing::CommandResult run = grpo::testing::run_command(cmd);
  Result r;
  r.exit_code = run.exit_code;
  r.out = run.output;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

std::vector<json> lines_of(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

class GrpoVerifyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(GRPO_TEST_TMP_DIR) / ("verify_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(GrpoVerifyCli, ScoresEachLineWithTheConfiguredOptions) {
  // exact_match with extract: answer_tag (from the config): line 1 has no tag -> 0, line 2's tag
  // holds "42" -> 1; "dataset" stands for "verifier"; ids and line numbers are carried over.
  write("in.jsonl",
        "{\"id\": \"a\", \"completion\": \"The answer is 42\", \"ground_truth\": \"42\", \"verifier\": \"exact_match\"}\n"
        "\n"
        "{\"id\": 7, \"completion\": \"<answer> 42 </answer>\", \"ground_truth\": \"42\", \"dataset\": \"exact_match\"}\n");
  write("v.yaml", "verifiers:\n  - name: exact_match\n    extract: answer_tag\n");
  Result r = grpo_verify("--input in.jsonl --config v.yaml", dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  EXPECT_EQ(out[0]["id"], "a");
  EXPECT_EQ(out[0]["line"], 1);
  EXPECT_EQ(out[0]["score"], 0.0);
  EXPECT_EQ(out[1]["id"], 7);
  EXPECT_EQ(out[1]["line"], 3);
  EXPECT_EQ(out[1]["score"], 1.0);
  EXPECT_EQ(out[1]["details"]["extracted"], "42");
  EXPECT_NE(r.err.find("exact_match                 2      0.5000       0"), std::string::npos) << r.err;

  // Without the config the verifier runs with its defaults (extract: full): line 1 is then
  // "The answer is 42" vs "42" -> 0 as well, line 2 "<answer> 42 </answer>" -> 0.
  r = grpo_verify("--input in.jsonl --output scores.jsonl", dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  std::ifstream f(dir_ / "scores.jsonl");
  std::stringstream ss;
  ss << f.rdbuf();
  auto written = lines_of(ss.str());
  ASSERT_EQ(written.size(), 2u);
  EXPECT_EQ(written[1]["score"], 0.0);
}

TEST_F(GrpoVerifyCli, InvalidLinesAreReportedAndTheOthersStillScored) {
  write("in.jsonl",
        "{\"completion\": \"42\", \"ground_truth\": \"42\", \"verifier\": \"exact_match\"}\n"
        "not json\n"
        "{\"completion\": 5, \"verifier\": \"exact_match\"}\n"
        "{\"completion\": \"x\"}\n");
  Result r = grpo_verify("--input in.jsonl", dir_);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["score"], 1.0);
  EXPECT_NE(out[1]["error"].get<std::string>().find("not valid JSON"), std::string::npos);
  EXPECT_EQ(out[2]["error"], "expected \"completion\": a string");
  EXPECT_EQ(out[3]["error"], "expected \"verifier\" (or \"dataset\"): a verifier name string");
  EXPECT_NE(r.err.find("in.jsonl:2: not valid JSON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3 invalid input line(s)"), std::string::npos) << r.err;
}

TEST_F(GrpoVerifyCli, UnknownVerifierIsAPluginErrorNamingTheLine) {
  write("in.jsonl", "{\"completion\": \"42\", \"verifier\": \"exact_matc\"}\n");
  Result r = grpo_verify("--input in.jsonl", dir_);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("line 1 verifier: no verifier named 'exact_matc' (did you mean 'exact_match'?)"),
            std::string::npos)
      << r.err;
  r = grpo_verify("", dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--input is required"), std::string::npos) << r.err;
}

}  // namespace

namespace {

// A verifier that throws, returns 1.5 or hangs scores 0 on its own line, through the same
// verifier pool as training; the other lines are scored, and the hung call costs --timeout,
// not its 60 s.
TEST_F(GrpoVerifyCli, ThrowingHangingAndOutOfRangeVerifiersScoreZeroAndTheOthersStillScore) {
  write("in.jsonl",
        "{\"completion\": \"fine\", \"verifier\": \"fixture_faults\"}\n"
        "{\"completion\": \"throw\", \"verifier\": \"fixture_faults\"}\n"
        "{\"completion\": \"hang\", \"verifier\": \"fixture_faults\"}\n"
        "{\"completion\": \"out_of_range\", \"verifier\": \"fixture_faults\"}\n"
        "{\"completion\": \"also fine\", \"verifier\": \"fixture_faults\"}\n");
  const auto t0 = std::chrono::steady_clock::now();
  Result r = grpo_verify("--input in.jsonl --threads 2 --timeout 0.5 --plugin-path '" GRPO_FIXTURE_PLUGIN_DIR "/good'",
                         dir_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 5u) << r.out;
  EXPECT_EQ(out[0]["score"], 1.0);
  EXPECT_EQ(out[0]["details"]["ok"], true);
  EXPECT_EQ(out[1]["score"], 0.0);
  EXPECT_EQ(out[1]["error"], true);
  EXPECT_NE(out[1].dump().find("asked to throw"), std::string::npos) << out[1];
  EXPECT_EQ(out[2]["score"], 0.0);
  EXPECT_EQ(out[2]["timed_out"], true);
  EXPECT_EQ(out[3]["score"], 0.0);
  EXPECT_EQ(out[3]["error"], true);
  EXPECT_EQ(out[4]["score"], 1.0);
  // Summary: 5 samples, mean 0.4, 2 errors, 1 timeout.
  EXPECT_NE(r.err.find("fixture_faults              5      0.4000       2         1"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 30.0);  // not a speed check: the hung call must not be waited for (60 s)
}

// A folder as --input is a usage error (exit 2) naming it, like a missing file; not an internal error.
TEST_F(GrpoVerifyCli, AFolderAsInputIsAUsageError) {
  fs::create_directories(dir_ / "rows");
  const Result r = grpo_verify("--input rows --set verifiers=[exact_match]", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--input 'rows' is a folder; expected a JSONL file"), std::string::npos) << r.err;
  const Result missing = grpo_verify("--input nowhere.jsonl --set verifiers=[exact_match]", dir_);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

}  // namespace
