// grpo-run as a user runs it: exit codes, messages, files written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = grpo::testing::CommandResult;  // output: stdout and stderr

// Runs grpo-run with `args` in `cwd`, without the caller's GRPO_PLUGIN_PATH.
// `env_vars`: extra "NAME=VALUE ..." for the process.
Result grpo_run(const std::string& args, const fs::path& cwd, const std::string& env_vars = "") {
  return grpo::testing::run_command("cd '" + cwd.string() + "' && env -u GRPO_PLUGIN_PATH " + env_vars + " '" GRPO_RUN_BINARY "' " +
                                    args + " 2>&1");
}

class GrpoRunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(GRPO_TEST_TMP_DIR) /
           ("cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(GrpoRunCli, HelpListsOptionsAndExitCodes) {
  Result r = grpo_run("--help", dir_);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, AllOf(HasSubstr("--config"), HasSubstr("--set"), HasSubstr("--validate"),
                              HasSubstr("--list-plugins"), HasSubstr("--print-config"), HasSubstr("--log-level"),
                              HasSubstr("Exit codes:"), HasSubstr("3  invalid configuration")));
}

TEST_F(GrpoRunCli, UnknownFlagIsUsageError) {
  Result r = grpo_run("--no-such-flag", dir_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("no-such-flag"));
}

TEST_F(GrpoRunCli, NprocMisuseIsAUsageError) {
  Result zero = grpo_run("--nproc 0", dir_);
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_THAT(zero.output, HasSubstr("--nproc takes a number of ranks >= 1, got 0"));
  Result with_mode = grpo_run("--nproc 2 --validate", dir_);
  EXPECT_EQ(with_mode.exit_code, 2) << with_mode.output;
  EXPECT_THAT(with_mode.output, HasSubstr("--nproc only applies to training"));
  // Under another launcher (its variables set), --nproc would multiply the ranks.
  Result nested = grpo_run("--nproc 2", dir_, "WORLD_SIZE=2 RANK=0");
  EXPECT_EQ(nested.exit_code, 2) << nested.output;
  EXPECT_THAT(nested.output, HasSubstr("cannot run under another launcher"));
}

TEST_F(GrpoRunCli, ListPluginsShowsExactMatchWithKindVersionAndFile) {
  Result r = grpo_run("--list-plugins", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("NAME"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("exact_match +verifier +1\\.0\\.0 +exact_match +[^\n]*/grpo/plugins/libgrpo_exact_match\\.so"));
}

TEST_F(GrpoRunCli, ValidateConstructsConfiguredVerifier) {
  write("ok.yaml", "verifiers:\n  - name: exact_match\n    weight: 2.0\n    case_sensitive: true\n");
  Result r = grpo_run("--validate --config ok.yaml", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("config OK"), HasSubstr("verifiers[0]=exact_match")));
  EXPECT_THAT(r.output, HasSubstr("BLAS:"));
}

TEST_F(GrpoRunCli, ValidateRejectsUnknownComponentWithExitCode4) {
  write("bad.yaml", "verifiers:\n  - name: exact_matsh\n");
  Result r = grpo_run("--validate --config bad.yaml", dir_);
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("verifiers[0]: no verifier named 'exact_matsh'"),
                              HasSubstr("did you mean 'exact_match'?")));
}

TEST_F(GrpoRunCli, ValidateRejectsUnknownComponentOptionWithFileAndLine) {
  write("opt.yaml", "verifiers:\n  - name: exact_match\n    case_sensitiv: true\n");
  Result r = grpo_run("--validate --config opt.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("opt.yaml:3:5: verifiers[0].case_sensitiv: unknown option"),
                              HasSubstr("did you mean 'case_sensitive'?")));
}

TEST_F(GrpoRunCli, UnknownTopLevelKeyIsConfigErrorWithFileLineAndSuggestion) {
  write("typo.yaml", "run:\n  seed: 3\n  ouput_dir: x\n");
  Result r = grpo_run("--validate --config typo.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("typo.yaml:3:3"), HasSubstr("run.ouput_dir"),
                              HasSubstr("did you mean 'run.output_dir'?")));
}

TEST_F(GrpoRunCli, MissingConfigFileIsConfigError) {
  Result r = grpo_run("--validate --config nowhere.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("nowhere.yaml"));
}

TEST_F(GrpoRunCli, PrintConfigAppliesSetOverFileOverDefaults) {
  write("a.yaml", "run:\n  seed: 5\n  output_dir: from_a\n");
  write("b.yaml", "run:\n  seed: 6\n");
  Result r = grpo_run("--print-config --config a.yaml --config b.yaml --set run.seed=7", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("seed: 7"), HasSubstr("output_dir: from_a"), HasSubstr("level: info")));
  Result no_set = grpo_run("--print-config --config a.yaml --config b.yaml", dir_);
  EXPECT_THAT(no_set.output, HasSubstr("seed: 6"));
}

TEST_F(GrpoRunCli, LogLevelFlagIsValidated) {
  Result r = grpo_run("--print-config --log-level loud", dir_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("loud"));
}

TEST_F(GrpoRunCli, TrainModeWritesEffectiveConfigAndLogThenNamesWhatIsMissing) {
  write("run.yaml", "run:\n  output_dir: out/run1\nverifiers: [exact_match]\n");
  Result r = grpo_run("--config run.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model.path: training needs a policy model"));
  const fs::path effective = dir_ / "out/run1/effective_config.yaml";
  ASSERT_TRUE(fs::exists(effective)) << r.output;
  EXPECT_THAT(read(effective), AllOf(HasSubstr("output_dir: out/run1"), HasSubstr("exact_match")));
  ASSERT_TRUE(fs::exists(dir_ / "out/run1/run.log"));
  EXPECT_THAT(read(dir_ / "out/run1/run.log"), AllOf(HasSubstr("BLAS:"), HasSubstr("training needs a policy model")));
  for (const auto& e : fs::directory_iterator(dir_ / "out/run1"))
    EXPECT_THAT(e.path().filename().string(), Not(HasSubstr(".tmp"))) << "temporary file left behind";
}

}  // namespace

TEST_F(GrpoRunCli, ValidateChecksModelAndTokenizerFiles) {
  const std::string model = std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/qwen3";
  write("tokenizer.json", grpo::core::make_byte_level_tokenizer_json());
  write("ok.yaml", "model:\n  path: " + model + "\ntokenizer:\n  path: tokenizer.json\n  chat_template_name: chatml\n");
  Result r = grpo_run("--validate --config ok.yaml", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("model: " + model + " (Qwen3ForCausalLM)"),
                              HasSubstr("tokenizer: tokenizer.json (259 ids, chat template chatml)")));

  write("template.yaml", "tokenizer:\n  chat_template_name: chatlm\n");
  r = grpo_run("--validate --config template.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("template.yaml:2:23: tokenizer.chat_template_name"), HasSubstr("chatml")));
}

TEST_F(GrpoRunCli, ValidateReportsABadModelConfigWithTheConfigKeyAndTheFile) {
  fs::create_directories(dir_ / "m");
  std::string config = read(std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/qwen3/config.json");
  config.replace(config.find("\"use_sliding_window\": false"), 27, "\"use_sliding_window\": true");
  write("m/config.json", config);
  write("run.yaml", "model:\n  path: m\n");
  Result r = grpo_run("--validate --config run.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("run.yaml:2:9: model.path: m/config.json: use_sliding_window: sliding-window "
                                  "attention is not supported"));
  write("missing.yaml", "model:\n  path: nowhere\n");
  r = grpo_run("--validate --config missing.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("missing.yaml:2:9: model.path: 'nowhere' is not a folder"));
}
