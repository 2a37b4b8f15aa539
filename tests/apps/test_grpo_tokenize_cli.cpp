// grpo-tokenize, run as a process: encode / decode / chat, exit codes and line-numbered errors.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "tests/tokenizer/tokenizer_test_support.h"

namespace grpo::testing {
namespace {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

CliRun run_cli(const std::string& args, const std::string& input) {
  // Unique names: ctest runs the tests of this file in parallel processes.
  static int counter = 0;
  std::string stem = tmp_dir() + "/cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  std::string in_path = stem + "-in.txt", out_path = stem + "-out.txt", err_path = stem + "-err.txt";
  grpo::core::atomic_write_file(in_path, input);
  std::string cmd = std::string("'") + GRPO_TOKENIZE_BINARY + "' " + args + " < '" + in_path + "' > '" + out_path +
                    "' 2> '" + err_path + "'";
  int status = std::system(cmd.c_str());
  return CliRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, grpo::core::read_file(out_path),
             grpo::core::read_file(err_path)};
}

std::string demo_dir() {
  std::string dir = tmp_dir() + "/cli-demo";
  {  // atomic_write_file: a parallel test process never sees a half-written file
    auto tok = grpo::core::Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
    grpo::core::TokenizerFilesOptions o;
    o.eos_token = "<|im_end|>";
    grpo::core::write_tokenizer_files(dir, tok, o);
  }
  return dir;
}

TEST(TokenizeCli, EncodesAndDecodesLines) {
  // hand-derived demo ids: 'h' = 104 - 33, 'i' = 105 - 33, ' ' = 220, <|im_start|> = 257
  CliRun r = run_cli("--tokenizer '" + demo_dir() + "'", "\"hi\"\n\"<|im_start|>h i\"\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[71,72]\n[257,71,220,72]\n");
  r = run_cli("--tokenizer '" + demo_dir() + "/tokenizer.json' --decode", "[71,72]\n[257,71,220,72]\n[]\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "\"hi\"\n\"<|im_start|>h i\"\n\"\"\n");
  r = run_cli("--tokenizer '" + demo_dir() + "' --decode --skip-special-tokens", "[257,71]\n");
  EXPECT_EQ(r.out, "\"h\"\n");
}

TEST(TokenizeCli, ChatRendersWithTheTemplate) {
  std::string line = R"([{"role":"system","content":"S"},{"role":"user","content":"U"}])";
  CliRun r = run_cli("--tokenizer '" + demo_dir() + "' --chat --render", line + "\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "\"<|im_start|>system\\nS<|im_end|>\\n<|im_start|>user\\nU<|im_end|>\\n<|im_start|>assistant\\n\"\n");
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat --template llama3 --render --no-generation-prompt",
              R"([{"role":"user","content":" U "}])" "\n");
  EXPECT_EQ(r.out, "\"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nU<|eot_id|>\"\n");
  // ids: <|im_start|> "user" "\n" "U" <|im_end|> "\n" <|im_start|> "assistant" "\n"
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", R"([{"role":"user","content":"U"}])" "\n");
  EXPECT_EQ(r.out, "[257,84,82,68,81,198,52,258,198,257,64,82,82,72,82,83,64,77,83,198]\n");
}

TEST(TokenizeCli, BadInputLineNamesTheLine) {
  CliRun r = run_cli("--tokenizer '" + demo_dir() + "'", "\"ok\"\n42\n\"never\"\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_EQ(r.out, "[78,74]\n");
  EXPECT_NE(r.err.find("stdin line 2: expected a JSON string, got number"), std::string::npos) << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --decode", "[1,2]\n[1, 999]\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 2: element 1: expected a token id in 0..258, got 999"), std::string::npos) << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "'", "not json\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: expected a JSON string (invalid JSON"), std::string::npos) << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", "[{\"role\":\"user\"}]\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: messages[0].content: expected a string"), std::string::npos) << r.err;
}

TEST(TokenizeCli, UsageAndTokenizerErrors) {
  CliRun r = run_cli("", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tokenizer DIR_OR_FILE is required"), std::string::npos) << r.err;
  r = run_cli("--tokenizer x --decod", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option '--decod' (did you mean '--decode'?)"), std::string::npos) << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat --template chatlm", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("did you mean 'chatml'"), std::string::npos) << r.err;
  std::string bad = tmp_dir() + "/cli-bad/tokenizer.json";
  grpo::core::atomic_write_file(bad, "{\"model\": {\"type\": \"BPE\", \"vocab\": []}}");
  r = run_cli("--tokenizer '" + bad + "'", "");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("cli-bad/tokenizer.json: model.vocab: expected an object"), std::string::npos) << r.err;
  r = run_cli("--help", "");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Exit codes:"), std::string::npos);
}

TEST(TokenizeCli, Qwen3WhenTheReferenceCacheIsPresent) {
  std::string problem = reference_cache_problem();
  ASSERT_TRUE(problem.empty()) << problem;
  // Reference ids from @huggingface/tokenizers for the same strings.
  std::vector<std::string> corpus = {"Hello World", "<|im_start|>user\nhi<|im_end|>"};
  auto refs = reference_encode(qwen3_dir() + "/tokenizer.json", corpus, "cli");
  CliRun r = run_cli("--tokenizer '" + qwen3_dir() + "'", "\"Hello World\"\n\"<|im_start|>user\\nhi<|im_end|>\"\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ids_str(refs[0].ids) + "\n" + ids_str(refs[1].ids) + "\n");
}

}  // namespace
}  // namespace grpo::testing
