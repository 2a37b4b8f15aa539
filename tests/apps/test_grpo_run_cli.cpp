// grpo-run as a user runs it: exit codes, messages, files written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/file_damage.h"
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
  Result r = grpo_run("--validate-fragment --config ok.yaml", dir_);
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

// A run its checks reject writes its log, saying why, and no effective_config.yaml (that is
// written once the checks pass: tests/train/test_checkpoint_recovery.cpp).
TEST_F(GrpoRunCli, TrainModeWritesTheLogThenNamesWhatIsMissing) {
  write("run.yaml", "run:\n  output_dir: out/run1\nverifiers: [exact_match]\n");
  Result r = grpo_run("--config run.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model.path: training needs a policy model"));
  EXPECT_FALSE(fs::exists(dir_ / "out/run1/effective_config.yaml")) << r.output;
  ASSERT_TRUE(fs::exists(dir_ / "out/run1/run.log"));
  EXPECT_THAT(read(dir_ / "out/run1/run.log"), AllOf(HasSubstr("BLAS:"), HasSubstr("training needs a policy model")));
  for (const auto& e : fs::directory_iterator(dir_ / "out/run1"))
    EXPECT_THAT(e.path().filename().string(), Not(HasSubstr(".tmp"))) << "temporary file left behind";
}

}  // namespace

TEST_F(GrpoRunCli, ValidateChecksModelAndTokenizerFiles) {
  const std::string model = std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/qwen3";
  write("tokenizer.json", grpo::core::make_byte_level_tokenizer_json());
  write("ok.yaml", "model:\n  path: " + model + "\ntokenizer:\n  path: tokenizer.json\n  chat_template: chatml\n");
  Result r = grpo_run("--validate-fragment --config ok.yaml", dir_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("model: " + model + " (Qwen3ForCausalLM)"),
                              HasSubstr("tokenizer: tokenizer.json (259 ids, chat template chatml (built-in))")));

  write("template.yaml", "tokenizer:\n  chat_template: chatlm\n");
  r = grpo_run("--validate --config ok.yaml --config template.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("template.yaml:2:18: tokenizer.chat_template"), HasSubstr("did you mean 'chatml'")));

  // A Jinja file with an unknown filter: the file, its line and the filter.
  write("bad.jinja", "{% for m in messages %}\n{{ m.content | shout }}\n{% endfor %}");
  write("jinja.yaml", "tokenizer:\n  chat_template: bad.jinja\n");
  r = grpo_run("--validate --config ok.yaml --config jinja.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("jinja.yaml:2:18: tokenizer.chat_template"), HasSubstr("bad.jinja:2: unknown filter 'shout'")));
}

TEST_F(GrpoRunCli, ValidateReportsABadModelConfigWithTheConfigKeyAndTheFile) {
  fs::create_directories(dir_ / "m");
  std::string config = read(std::string(GRPO_SOURCE_DIR) + "/tests/fixtures/models/qwen3/config.json");
  config.replace(config.find("\"hidden_act\": \"silu\""), 20, "\"hidden_act\": \"relu\"");
  write("m/config.json", config);
  write("run.yaml", "model:\n  path: m\n");
  Result r = grpo_run("--validate --config run.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("run.yaml:2:9: model.path: m/config.json: hidden_act: 'relu' is not supported "
                                  "(supported: silu, gelu_pytorch_tanh)"));
  write("missing.yaml", "model:\n  path: nowhere\n");
  r = grpo_run("--validate --config missing.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("missing.yaml:2:9: model.path: 'nowhere' is not a folder"));
}

namespace {

// The text of the first "[error] " line of a grpo-run output.
std::string error_line(const std::string& output) {
  const auto at = output.find("[error] ");
  if (at == std::string::npos) return "(no error line in:\n" + output + ")";
  const auto begin = at + 8;
  return output.substr(begin, output.find('\n', begin) - begin);
}

}  // namespace

// A configuration training accepts: the fixture model's config.json (neither --validate nor the
// failing runs below get as far as its weights), the demo tokenizer, two rows, exact_match.
class GrpoRunJob : public GrpoRunCli {
 protected:
  void SetUp() override {
    GrpoRunCli::SetUp();
    write("tokenizer.json", grpo::core::make_byte_level_tokenizer_json());
    write("train.jsonl", "{\"prompt\": \"1+1\", \"ground_truth\": \"2\"}\n{\"prompt\": \"2+2\", \"ground_truth\": \"4\"}\n");
    write("run.yaml", "run: {output_dir: out}\nmodel: {path: " + std::string(GRPO_SOURCE_DIR) +
                          "/tests/fixtures/models/qwen3}\ntokenizer: {path: tokenizer.json, chat_template: none}\n"
                          "verifiers: [exact_match]\ndata: {train: [train.jsonl]}\n"
                          "algorithm: {advantage: grpo, policy_loss: ppo_clip}\n"
                          "rollout: {num_unique_prompts: 2, num_samples_per_prompt: 2, max_prompt_tokens: 16, max_new_tokens: 8}\n"
                          "train: {steps: 1, pack_length: 32, num_mini_batches: 1}\n");
  }
  // `args` fails --validate and training alike: exit 3 and the same error line, holding `message`.
  void expect_validate_and_training_fail_alike(const std::string& args, const std::string& message) {
    const Result validate = grpo_run("--validate " + args, dir_);
    const Result train = grpo_run(args, dir_);
    const std::string shown = args.substr(0, 200);  // a case may be a 1 MB path
    EXPECT_EQ(validate.exit_code, 3) << shown << "\n" << validate.output.substr(0, 2000);
    EXPECT_EQ(train.exit_code, 3) << shown << "\n" << train.output.substr(0, 2000);
    EXPECT_THAT(error_line(validate.output), HasSubstr(message)) << shown;
    EXPECT_EQ(error_line(validate.output), error_line(train.output)) << shown;
  }
};

TEST_F(GrpoRunJob, ValidateFailsWhereTrainingFailsWithTheSameMessage) {
  Result ok = grpo_run("--validate --config run.yaml", dir_);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("data: 2 training rows, 0 eval rows\n"));
  EXPECT_THAT(ok.output, Not(HasSubstr("not yet a training job")));
  // Each passed --validate and failed training with exit 3 before --validate ran training's checks.
  struct Case {
    std::string set, message;
  };
  for (const Case& c : {Case{"train.steps=-5", "train.steps: expected an integer >= 1, got -5"},
                        Case{"rollout.num_unique_prompts=0", "rollout.num_unique_prompts: expected an integer >= 1, got 0"},
                        Case{"train.pack_length=16", "train.pack_length: 16 cannot hold one sequence of rollout.max_prompt_tokens + "
                                                     "rollout.max_new_tokens = 16 + 8 = 24 tokens"},
                        Case{"rollout.temperature=-1", "rollout.temperature"},
                        Case{"checkpoint.save_freq=-3", "checkpoint.save_freq: expected an integer >= 0, got -3"}})
    expect_validate_and_training_fail_alike("--config run.yaml --set " + c.set, c.message);
}

// NaN weights (a diverged run's save) fit every shape check. In the model or in
// model.lora.adapter_path they fail --validate, and training with the same line, naming the file
// and the tensor (before, the run started and blamed the divergence on training).
TEST_F(GrpoRunJob, NonFiniteWeightsFailValidateAndTrainingNamingFileAndTensor) {
  const std::string fixtures = std::string(GRPO_SOURCE_DIR) + "/tests/fixtures";
  fs::create_directories(dir_ / "nan_model");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(fixtures + "/models/qwen3/" + f, dir_ / "nan_model" / f);
  grpo::testing::fill_tensor_with_nan(dir_ / "nan_model/model.safetensors", "model.layers.0.mlp.down_proj.weight");  // [64, 128]
  fs::create_directories(dir_ / "nan_adapter");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    fs::copy_file(fixtures + "/lora/qwen2_all_linear/" + f, dir_ / "nan_adapter" / f);
  const std::string lora_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";  // [r 4, hidden 64]
  grpo::testing::fill_tensor_with_nan(dir_ / "nan_adapter/adapter_model.safetensors", lora_a);
  struct Case {
    std::string sets, message;
  };
  for (const Case& c :
       {Case{"--set model.path=nan_model",
             "model.path: safetensors file 'nan_model/model.safetensors': tensor 'model.layers.0.mlp.down_proj.weight': 8192 of "
             "its 8192 values are not finite (the first, at [0, 0], is NaN)"},
        Case{"--set model.path=" + fixtures + "/models/qwen2 --set model.lora.adapter_path=nan_adapter",
             "model.lora.adapter_path: safetensors file 'nan_adapter/adapter_model.safetensors': tensor '" + lora_a +
                 "': 256 of its 256 values are not finite (the first, at [0, 0], is NaN)"}})
    expect_validate_and_training_fail_alike("--config run.yaml " + c.sets, c.message);
}

TEST_F(GrpoRunJob, ValidateOfAFragmentNamesWhatTrainingWouldStopAt) {
  write("fragment.yaml", "verifiers: [exact_match]\n");
  const Result fragment = grpo_run("--validate-fragment --config fragment.yaml", dir_);
  EXPECT_EQ(fragment.exit_code, 0) << fragment.output;
  EXPECT_THAT(fragment.output, AllOf(HasSubstr("config OK"), HasSubstr("not yet a training job"),
                                     HasSubstr("model.path: training needs a policy model (set model.path)"),
                                     HasSubstr("data.train: training needs data"), HasSubstr("data: (not loaded)")));
  // Training, and --validate, stop at the first of them, with the same words.
  const Result train = grpo_run("--config fragment.yaml --set run.output_dir=out", dir_);
  EXPECT_EQ(train.exit_code, 3) << train.output;
  EXPECT_THAT(error_line(train.output), HasSubstr("model.path: training needs a policy model (set model.path)"));
  const Result validate = grpo_run("--validate --config fragment.yaml --set run.output_dir=out", dir_);
  EXPECT_EQ(validate.exit_code, 3) << validate.output;
  EXPECT_EQ(error_line(validate.output), error_line(train.output));
  EXPECT_THAT(validate.output, Not(HasSubstr("config OK")));
}

// What --validate passed and training rejected: no data, no verifier, an empty file, a
// run.output_dir that cannot be created. --validate now fails each with training's exit code and
// message, naming the key; it creates nothing.
TEST_F(GrpoRunJob, ValidateRejectsEveryConfigurationTrainingRejects) {
  write("empty.yaml", "");
  write("long_dir.yaml", "run:\n  output_dir: " + std::string(1 << 20, 'd') + "\n");
  write("a_file", "not a folder");
  struct Case {
    std::string args, message;
  };
  const std::string run = "--config run.yaml ";
  for (const Case& c : {Case{run + "--set data.train=[]", "data.train: training needs data"},
                        Case{run + "--set verifiers=[]", "verifiers: training needs at least one verifier"},
                        Case{"--config empty.yaml", "model.path: training needs a policy model"},
                        Case{run + "--config long_dir.yaml", "long_dir.yaml:2:15: run.output_dir: 'dddd"},
                        Case{run + "--set run.output_dir=" + std::string(300, 'n'), "has a name of 300 bytes"},
                        Case{run + "--set run.output_dir=a_file/run", "run.output_dir: 'a_file/run' cannot be a folder: "}})
    expect_validate_and_training_fail_alike(c.args, c.message);
  EXPECT_THAT(error_line(grpo_run("--validate --config run.yaml --config long_dir.yaml", dir_).output),
              HasSubstr("is longer than the system's limit on a path"));
  std::error_code ec;
  EXPECT_FALSE(fs::exists(dir_ / std::string(300, 'n'), ec));
}

// Two tools under one name: the error names the second one's file:line and the first's.
TEST_F(GrpoRunJob, DuplicateToolNamesNameBothPlaces) {
  write("tools.yaml", "tools:\n  - name: calculator\n  - name: calculator\n");
  Result r = grpo_run("--validate --config run.yaml --config tools.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(error_line(r.output), HasSubstr("tools.yaml:3:5: tools[1]: a second tool is called 'calculator' (first: "
                                              "tools[0] at tools.yaml:2:5); rename one with `as`"));
  write("as.yaml", "tools:\n  - {name: calculator, as: calc}\n  - name: calculator\n    as: calc\n");
  r = grpo_run("--validate --config run.yaml --config as.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(error_line(r.output), HasSubstr("as.yaml:4:9: tools[1].as: a second tool is called 'calc' (first: tools[0] at as.yaml:2:5)"));
}

TEST_F(GrpoRunJob, ValidateChecksThePrompts) {
  // The data is checked too: a file that is not there, and every prompt over rollout.max_prompt_tokens.
  Result r = grpo_run("--validate --config run.yaml --set data.train=[nowhere.jsonl]", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(error_line(r.output), HasSubstr("nowhere.jsonl: cannot open the data file"));
  r = grpo_run("--validate --config run.yaml --set rollout.max_prompt_tokens=2 --set train.pack_length=16", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("training data: 2 row(s) dropped: prompt longer than rollout.max_prompt_tokens = 2"));
  EXPECT_THAT(error_line(r.output), HasSubstr("data.train: no training rows left after filtering"));
}

// grpo-run with `args` in `cwd` (no shell: wait4 reports grpo-run's own peak memory); output in `log`.
struct Measured {
  int exit_code = -1;
  long peak_rss_kb = 0;
};
Measured grpo_run_measured(const std::vector<std::string>& args, const fs::path& cwd, const fs::path& log) {
  std::vector<std::string> argv{GRPO_RUN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argv_c;
  for (auto& a : argv) argv_c.push_back(a.data());
  argv_c.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::unsetenv("GRPO_PLUGIN_PATH");
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    std::FILE* out = std::fopen(log.c_str(), "w");
    if (!out) ::_exit(126);
    ::dup2(::fileno(out), STDOUT_FILENO);
    ::dup2(::fileno(out), STDERR_FILENO);
    ::execv(argv_c[0], argv_c.data());
    ::_exit(127);
  }
  Measured m;
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && ::wait4(pid, &status, 0, &usage) == pid && WIFEXITED(status)) {
    m.exit_code = WEXITSTATUS(status);
    m.peak_rss_kb = usage.ru_maxrss;
  }
  return m;
}

TEST_F(GrpoRunJob, AHugePromptIsDroppedWithoutBeingTokenized) {
  // A 32 MiB prompt: as before, the row is dropped with the usual warning, but it is not
  // tokenized (encode_within: it is longer than rollout.max_prompt_tokens x the tokenizer's bytes
  // per token). Tokenized, such a line cost ~26 bytes of memory per byte (1.29 GB for 50 MB).
  const std::size_t huge = std::size_t{32} << 20;
  const Measured base = grpo_run_measured({"--validate", "--config", "run.yaml"}, dir_, dir_ / "base.log");
  ASSERT_EQ(base.exit_code, 0) << read(dir_ / "base.log");
  std::ofstream(dir_ / "train.jsonl", std::ios::app) << "{\"prompt\": \"" << std::string(huge, 'a') << "\", \"ground_truth\": \"a\"}\n";
  const Measured with_huge = grpo_run_measured({"--validate", "--config", "run.yaml"}, dir_, dir_ / "huge.log");
  const std::string output = read(dir_ / "huge.log");
  ASSERT_EQ(with_huge.exit_code, 0) << output;
  EXPECT_THAT(output, AllOf(HasSubstr("training data: 1 row(s) dropped: prompt longer than rollout.max_prompt_tokens = 16"),
                            HasSubstr("data: 2 training rows, 0 eval rows\n")));
  // Reading, parsing and rendering the line keep a few copies of it; tokenizing it would take 26.
  const double extra_mib = static_cast<double>(with_huge.peak_rss_kb - base.peak_rss_kb) / 1024.0;
  EXPECT_LT(extra_mib, 8.0 * 32) << "peak RSS " << base.peak_rss_kb << " kB without the line, " << with_huge.peak_rss_kb << " kB with it";
}

TEST_F(GrpoRunCli, AliasBombFailsFastNamingTheFile) {
  // "Billion laughs": 9 levels of 9 aliases each, 10^9 values once expanded.
  std::string yaml = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char level = 'b'; level <= 'i'; ++level) {
    yaml += std::string(1, level) + ": &" + level + " [";
    for (int i = 0; i < 9; ++i) yaml += std::string(i ? ", *" : "*") + static_cast<char>(level - 1);
    yaml += "]\n";
  }
  write("bomb.yaml", yaml);
  const Result r = grpo_run("--validate --config bomb.yaml", dir_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("bomb.yaml:"), HasSubstr("more than 1000000 values once its aliases are expanded")));
}
