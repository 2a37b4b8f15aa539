// grpo-export as a user runs it (docs/cli.md#grpo-export): what --output may replace (nothing
// of the user's), --base as a run directory, adapters with NaN weights or mistyped settings.
// On the llama fixture and its PEFT adapter (tests/fixtures), always through copies, so that a
// broken grpo-export can never damage the fixtures themselves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tests/support/file_damage.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using grpo::testing::CommandResult;

const std::string kFixtures = std::string(GRPO_SOURCE_DIR) + "/tests/fixtures";
const char* kAdapterTensor = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";  // [r 2, hidden 64]

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file under `dir` (relative name -> contents): what a refused export must leave as it was.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read(e.path());
  return out;
}

void copy_files(const fs::path& from, const fs::path& to, std::initializer_list<const char*> names) {
  fs::create_directories(to);
  for (const char* name : names) fs::copy_file(from / name, to / name);
}

class GrpoExportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = grpo::testing::fresh_test_dir("export-cli");
    base_ = dir_ + "/base";
    adapter_ = dir_ + "/adapter";
    copy_files(kFixtures + "/models/llama", base_, {"config.json", "model.safetensors"});
    copy_files(kFixtures + "/lora/llama_rslora_qv", adapter_, {"adapter_config.json", "adapter_model.safetensors"});
  }
  CommandResult merge(const std::string& output, const std::string& base = "", const std::string& adapter = "") {
    return grpo::testing::run_command("'" GRPO_EXPORT_BINARY "' --merge " + (adapter.empty() ? adapter_ : adapter) + " --base " +
                                      (base.empty() ? base_ : base) + " --output " + output + " 2>&1");
  }
  // A run directory as grpo-run leaves it: a complete checkpoint (trainer_state.json) holding
  // `files` of `from`, and the run's logs.
  std::string fake_run(const std::string& name, const fs::path& from, std::initializer_list<const char*> files) {
    const fs::path run = fs::path(dir_) / name;
    copy_files(from, run / "checkpoints/step_000002", files);
    std::ofstream(run / "checkpoints/step_000002/trainer_state.json") << "{\"global_step\": 2}\n";
    std::ofstream(run / "metrics.jsonl") << "{\"step\": 1}\n{\"step\": 2}\n";
    std::ofstream(run / "run.log") << "the run's log\n";
    return run.string();
  }
  std::string dir_, base_, adapter_;
};

// A folder holding the user's files, a file, the base being merged: refused (exit 2) before any
// work, each left exactly as it was, and nothing else appears beside them.
TEST_F(GrpoExportCli, ExistingFolderOrFileIsRefusedAndLeftUntouched) {
  const fs::path victim = fs::path(dir_) / "victim";
  fs::create_directories(victim);
  std::ofstream(victim / "notes.txt") << "my notes\n";
  std::ofstream(fs::path(dir_) / "file.txt") << "a file\n";
  const auto before = snapshot(dir_);

  CommandResult r = merge(victim.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--output " + victim.string() + " is a folder with files an export does not write (notes.txt). "
                                  "Left untouched: grpo-export replaces only an empty folder or an earlier export"));
  r = merge(dir_ + "/file.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--output " + dir_ + "/file.txt is a file, not a folder"));
  r = merge(base_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--output " + base_ + " is a folder being merged (" + base_ + ")"));
  EXPECT_EQ(snapshot(dir_), before);  // no staging folder left either
}

// The run's own folder as --output: its checkpoints, metrics and log stay.
TEST_F(GrpoExportCli, RunDirectoryIsRefusedAndLeftUntouched) {
  const std::string run = fake_run("run", adapter_, {"adapter_config.json", "adapter_model.safetensors"});
  const auto before = snapshot(run);
  const CommandResult r = merge(run, "", run);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--output " + run + " is a run directory (it holds checkpoints/)"));
  EXPECT_EQ(snapshot(run), before);
}

// What an export may replace: nothing yet, an empty folder, or an earlier export (its
// grpo_export.json beside only an export's files). Not a model folder it did not write, and not
// an export the user has since put a file into.
TEST_F(GrpoExportCli, OnlyAnEmptyFolderOrAnEarlierExportIsReplaced) {
  const std::string out = dir_ + "/merged";
  CommandResult r = merge(out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/grpo_export.json"));
  const std::string weights = read(out + "/model.safetensors");
  r = merge(out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(out + "/model.safetensors"), weights);

  std::ofstream(out + "/notes.txt") << "mine\n";
  r = merge(out);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is a folder with files an export does not write (notes.txt)"));
  EXPECT_EQ(read(out + "/notes.txt"), "mine\n");

  const std::string model = dir_ + "/model";
  copy_files(base_, model, {"config.json", "model.safetensors"});
  r = merge(model);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--output " + model + " is a model folder grpo-export did not write (no grpo_export.json)"));

  fs::create_directories(dir_ + "/empty");
  r = merge(dir_ + "/empty");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read(dir_ + "/empty/model.safetensors"), weights);
}

// --base takes a run directory as model.path does: its newest checkpoint. The merge equals the
// one with that checkpoint's model folder named directly; a LoRA run there is named as such.
TEST_F(GrpoExportCli, BaseMayBeARunDirectory) {
  const std::string run = fake_run("full_run", base_, {"config.json", "model.safetensors"});
  CommandResult r = merge(dir_ + "/direct");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = merge(dir_ + "/from_run", run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(run + "/checkpoints/step_000002 (the newest checkpoint of the run " + run + ")"));
  EXPECT_EQ(read(dir_ + "/from_run/model.safetensors"), read(dir_ + "/direct/model.safetensors"));

  const std::string lora_run = fake_run("lora_run", adapter_, {"adapter_config.json", "adapter_model.safetensors"});
  r = merge(dir_ + "/from_lora_run", lora_run);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--base " + lora_run + " is a LoRA run: its newest checkpoint " + lora_run +
                                  "/checkpoints/step_000002 is a PEFT adapter, not a model"));
  EXPECT_FALSE(fs::exists(dir_ + "/from_lora_run"));
}

// A NaN lora_A passes every shape check; the merge would be NaN. Refused (exit 3) naming the
// file and the tensor, and nothing is written.
TEST_F(GrpoExportCli, NonFiniteAdapterIsRefusedNamingFileAndTensor) {
  grpo::testing::fill_tensor_with_nan(adapter_ + "/adapter_model.safetensors", kAdapterTensor);
  const CommandResult r = merge(dir_ + "/merged");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("safetensors file '" + adapter_ + "/adapter_model.safetensors': tensor '" + kAdapterTensor +
                                  "': 128 of its 128 values are not finite (the first, at [0, 0], is NaN)"));
  EXPECT_FALSE(fs::exists(dir_ + "/merged"));
}

// adapter_config.json with "r": "eight": the file, the key and what was expected.
TEST_F(GrpoExportCli, MistypedAdapterConfigNamesFileAndKey) {
  std::string config = read(adapter_ + "/adapter_config.json");
  const auto at = config.find("\"r\": 2,");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, 7, "\"r\": \"eight\",");
  std::ofstream(adapter_ + "/adapter_config.json", std::ios::trunc) << config;
  const CommandResult r = merge(dir_ + "/merged");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr(adapter_ + "/adapter_config.json: r: expected an integer >= 1 (the adapters' rank), got \"eight\""));
  EXPECT_FALSE(fs::exists(dir_ + "/merged"));
}

}  // namespace
