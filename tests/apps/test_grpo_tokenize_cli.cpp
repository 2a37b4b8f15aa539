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
  // llama3 needs its header tokens: refused on the demo tokenizer, rendered on Llama-3's.
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat --template llama3 --render", "");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("the chat template 'llama3' writes <|start_header_id|>"), std::string::npos) << r.err;
  ASSERT_TRUE(reference_cache_problem().empty()) << reference_cache_problem();
  r = run_cli("--tokenizer '" + llama3_dir() + "' --chat --template llama3 --render --no-generation-prompt",
              R"([{"role":"user","content":" U "}])" "\n");
  EXPECT_EQ(r.out, "\"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nU<|eot_id|>\"\n");
  // ids: <|im_start|> "user" "\n" "U" <|im_end|> "\n" <|im_start|> "assistant" "\n"
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", R"([{"role":"user","content":"U"}])" "\n");
  EXPECT_EQ(r.out, "[257,84,82,68,81,198,52,258,198,257,64,82,82,72,82,83,64,77,83,198]\n");
}

// --template PATH with a line that is an object: tools, add_generation_prompt and more variables
// reach the template; a template that raises fails the line with its message.
TEST(TokenizeCli, ChatLinesCarryToolsAndVariables) {
  const std::string tmpl = tmp_dir() + "/cli-template.jinja";
  grpo::core::atomic_write_file(
      tmpl,
      "{%- if tools %}[{{ tools|map(attribute='function.name')|join(',') }}]{% endif %}\n"
      "{%- for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}->{{ m.tool_calls[0].function.arguments|tojson }}"
      "{% endif %};{% endfor %}\n"
      "{%- if messages[0].role == 'tool' %}{{ raise_exception('A conversation cannot start with a tool result.') }}{% endif %}\n"
      "{%- if add_generation_prompt %}>{% if not (enable_thinking | default(true)) %}/no_think{% endif %}{% endif %}");
  const std::string line =
      R"({"messages": [{"role": "user", "content": "météo?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"city": "Paris"}}}]}],)"
      R"( "tools": [{"type": "function", "function": {"name": "w"}}, {"type": "function", "function": {"name": "t"}}], "enable_thinking": false})";
  CliRun r = run_cli("--tokenizer '" + demo_dir() + "' --chat --render --template '" + tmpl + "'",
                     line + "\n" + R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})" "\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "\"[w,t]user:météo?;assistant:->{\\\"city\\\": \\\"Paris\\\"};>/no_think\"\n\"user:x;\"\n");
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat --render --template '" + tmpl + "'",
              R"([{"role": "tool", "content": "21"}])" "\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: the chat template raised an error: A conversation cannot start with a tool result. (" +
                       tmpl + ":3)"),
            std::string::npos)
      << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat --template /no/such.jinja", "");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("chat template file '/no/such.jinja' does not exist"), std::string::npos) << r.err;
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
  // A message without content reaches the template as it is (as transformers passes it); chatml
  // then fails on the missing field, naming the template line.
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", "[{\"role\":\"user\"}]\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: chat template chatml (built-in):2: 'dict object' has no attribute 'content'"),
            std::string::npos)
      << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", "{\"tools\": []}\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: the object has no \"messages\""), std::string::npos) << r.err;
  r = run_cli("--tokenizer '" + demo_dir() + "' --chat", "[\"hi\"]\n");
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.err.find("stdin line 1: messages[0]: expected an object"), std::string::npos) << r.err;
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
