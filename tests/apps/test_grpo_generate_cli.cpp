// grpo-generate run as a user runs it, on the tiny random Qwen3 checkpoint
// (tests/support/rollout_models.h): JSONL prompts in, one JSON object per prompt out, in input
// order, with the input keys kept; chat templates, sampling flags, the config file, progress,
// exit codes and atomic output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/support/rollout_models.h"
#include "tests/support/run_command.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::ordered_json;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::vector<std::int64_t> ids_of(const json& completion) { return completion["token_ids"].get<std::vector<std::int64_t>>(); }

class GrpoGenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = grpo::testing::fresh_test_dir("cli");
    model_ = grpo::testing::rollout_model_dir("qwen3");
  }

  // Runs grpo-generate in the test folder with --model set, without the caller's GRPO_PLUGIN_PATH.
  Result generate(const std::string& args) {
    const fs::path err_file = dir_ / "stderr.txt";
    const std::string cmd = "cd '" + dir_.string() + "' && env -u GRPO_PLUGIN_PATH '" GRPO_GENERATE_BINARY "' --model '" +
                            model_ + "' " + args + " 2> '" + err_file.string() + "'";
    const grpo::testing::CommandResult run = grpo::testing::run_command(cmd);
    return Result{run.exit_code, run.output, read_text(err_file)};
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }
  std::vector<json> output(const std::string& name = "out.jsonl") { return json_lines(read_text(dir_ / name)); }
  // Files in the folder other than the given ones (a temp file left behind would show here).
  std::vector<std::string> files_besides(std::vector<std::string> expected) {
    std::vector<std::string> extra;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (std::find(expected.begin(), expected.end(), name) == expected.end()) extra.push_back(name);
    }
    return extra;
  }

  fs::path dir_;
  std::string model_;
};

TEST_F(GrpoGenerateCli, HelpDocumentsEveryFlagAndTheExitCodes) {
  Result r = generate("--help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--model", "--input", "--output", "--config", "--n ", "--temperature", "--top-p", "--top-k",
                           "--min-p", "--max-new-tokens", "--seed", "--stop ", "--stop-token-id", "--chat-template",
                           "--backend ", "--backend-option", "--plugin-path", "--chunk-size", "--quiet", "--log-level"})
    EXPECT_THAT(r.out, HasSubstr(flag));
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
  EXPECT_THAT(r.out, HasSubstr("6  some requests failed"));
}

TEST_F(GrpoGenerateCli, GreedyChatPromptEqualsThePreRenderedPromptWithoutTemplate) {
  // A "prompt" goes through chatml as one user message, exactly like the equivalent "messages";
  // feeding the rendered text with --chat-template none gives the same tokens, hence (greedy)
  // the same completion.
  const std::string question = "What is 2 + 2?";
  const std::string rendered = grpo::core::render_chat("chatml", {{"user", question}}, true);
  ASSERT_EQ(rendered, "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n");
  write("chat.jsonl", json{{"prompt", question}}.dump() + "\n" +
                          json{{"messages", json::array({json{{"role", "user"}, {"content", question}}})}}.dump() + "\n");
  write("raw.jsonl", json{{"prompt", rendered}}.dump() + "\n" + json{{"prompt", rendered}}.dump() + "\n");
  const std::string common = "--temperature 0 --max-new-tokens 12 --backend-option ignore_eos=true --quiet";
  Result r = generate("--input chat.jsonl --output chat.out.jsonl --chat-template chatml " + common);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = generate("--input raw.jsonl --output raw.out.jsonl --chat-template none " + common);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto chat = output("chat.out.jsonl"), raw = output("raw.out.jsonl");
  ASSERT_EQ(chat.size(), 2u);
  ASSERT_EQ(raw.size(), 2u);

  const grpo::core::Tokenizer tok = grpo::core::Tokenizer::load(model_);
  const std::vector<int> prompt_ids = tok.encode(rendered);
  ASSERT_EQ(tok.token_to_id("<|im_start|>"), prompt_ids.front());  // the specials are single tokens
  for (const auto* lines : {&chat, &raw}) {
    for (const json& line : *lines) {
      EXPECT_EQ(line["prompt_tokens"], prompt_ids.size());
      ASSERT_EQ(line["completions"].size(), 1u);
      const json& c = line["completions"][0];
      EXPECT_EQ(c["token_ids"].size(), 12u);
      EXPECT_EQ(c["finish_reason"], "length");
      EXPECT_EQ(c["logprobs"].size(), 12u);
      for (const auto& lp : c["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
      EXPECT_EQ(ids_of(c), ids_of(chat[0]["completions"][0]));
    }
  }
  const auto ids = ids_of(chat[0]["completions"][0]);
  grpo::core::DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(chat[0]["completions"][0]["text"], tok.decode(std::vector<int>(ids.begin(), ids.end()), skip));
}

TEST_F(GrpoGenerateCli, OutputKeepsInputOrderIdsAndExtraKeysWithNCompletionsEach) {
  write("in.jsonl",
        "{\"id\": \"b\", \"prompt\": \"x\", \"ground_truth\": {\"answer\": [1, 2]}, \"source\": \"s\"}\n"
        "\n"
        "{\"prompt\": \"y\", \"z\": null}\n"
        "{\"id\": 7, \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
        "\"content\": \"hi\"}], \"completions\": \"from an earlier run\"}\n");
  Result r = generate("--input in.jsonl --output out.jsonl --n 3 --max-new-tokens 4 --backend-option ignore_eos=true --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = output();
  ASSERT_EQ(out.size(), 3u);
  for (const json& line : out) {
    ASSERT_TRUE(line["completions"].is_array()) << line.dump();
    ASSERT_EQ(line["completions"].size(), 3u) << line.dump();
    for (const json& c : line["completions"]) {
      EXPECT_EQ(c["token_ids"].size(), 4u);  // max-new-tokens, EOS ignored
      EXPECT_EQ(c["logprobs"].size(), 4u);
      EXPECT_EQ(c["finish_reason"], "length");
      EXPECT_TRUE(c["text"].is_string());
    }
  }
  auto keys = [](const json& j) {
    std::vector<std::string> k;
    for (auto& [key, value] : j.items()) k.push_back(key);
    return k;
  };
  EXPECT_EQ(keys(out[0]), (std::vector<std::string>{"id", "prompt", "ground_truth", "source", "completions", "prompt_tokens"}));
  EXPECT_EQ(out[0]["id"], "b");
  EXPECT_EQ(out[0]["ground_truth"], json::parse("{\"answer\": [1, 2]}"));
  EXPECT_EQ(out[0]["source"], "s");
  // No "id": the line number (blank lines count), added first.
  EXPECT_EQ(keys(out[1]), (std::vector<std::string>{"id", "prompt", "z", "completions", "prompt_tokens"}));
  EXPECT_EQ(out[1]["id"], 3);
  EXPECT_EQ(out[1]["prompt"], "y");
  EXPECT_TRUE(out[1]["z"].is_null());
  // An input "completions" is replaced.
  EXPECT_EQ(out[2]["id"], 7);
  const grpo::core::Tokenizer tok = grpo::core::Tokenizer::load(model_);
  EXPECT_EQ(out[2]["prompt_tokens"],
            tok.encode(grpo::core::render_chat("chatml", {{"system", "Be brief."}, {"user", "hi"}}, true)).size());
}

TEST_F(GrpoGenerateCli, SeedReproducesTheFileByteForByteAndAnotherSeedDiffers) {
  // Lines 1 and 2 are the same prompt: request i samples with seed + i, so they differ.
  write("in.jsonl", "{\"prompt\": \"same\"}\n{\"prompt\": \"same\"}\n{\"prompt\": \"other\"}\n");
  const std::string common = "--input in.jsonl --n 2 --max-new-tokens 8 --backend-option ignore_eos=true --quiet";
  ASSERT_EQ(generate(common + " --seed 7 --output a.jsonl").exit_code, 0);
  ASSERT_EQ(generate(common + " --seed 7 --output b.jsonl").exit_code, 0);
  ASSERT_EQ(generate(common + " --seed 8 --output c.jsonl").exit_code, 0);
  const std::string a = read_text(dir_ / "a.jsonl");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_text(dir_ / "b.jsonl"));
  EXPECT_NE(a, read_text(dir_ / "c.jsonl"));
  const auto seven = output("a.jsonl"), eight = output("c.jsonl");
  ASSERT_EQ(seven.size(), 3u);
  ASSERT_EQ(eight.size(), 3u);
  EXPECT_NE(ids_of(seven[0]["completions"][0]), ids_of(seven[1]["completions"][0]));
  EXPECT_NE(ids_of(seven[0]["completions"][0]), ids_of(seven[0]["completions"][1]));  // the n samples differ too
  // Request 0 of --seed 8 is request 1 of --seed 7: the same prompt with the same seed, 8.
  EXPECT_EQ(ids_of(eight[0]["completions"][0]), ids_of(seven[1]["completions"][0]));
  EXPECT_EQ(ids_of(eight[0]["completions"][1]), ids_of(seven[1]["completions"][1]));
}

TEST_F(GrpoGenerateCli, StopStringCutsTheTextAndStopTokenIdEndsTheCompletion) {
  write("in.jsonl", "{\"prompt\": \"Tell me a story.\"}\n");
  const std::string common = "--input in.jsonl --temperature 0 --max-new-tokens 32 --backend-option ignore_eos=true --quiet";
  ASSERT_EQ(generate(common + " --output full.jsonl").exit_code, 0);
  const json full = output("full.jsonl").at(0)["completions"][0];
  const std::string text = full["text"];
  const auto ids = ids_of(full);
  ASSERT_EQ(ids.size(), 32u);

  // Stop string: an ASCII character of the greedy text (not its first one) cuts the text before it.
  std::size_t at = std::string::npos;
  for (std::size_t i = 1; i < text.size() && at == std::string::npos; ++i)
    if (text[i] > ' ' && text[i] < 0x7f && text[i] != '"' && text[i] != '\'' && text[i] != '\\' && text[i] != '$' &&
        text[i] != '`')
      at = i;
  ASSERT_NE(at, std::string::npos) << "the greedy text has no usable ASCII character: " << text;
  const std::string stop(1, text[at]);
  Result r = generate(common + " --output stop.jsonl --stop '" + stop + "' --stop 'never-in-the-text'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json cut = output("stop.jsonl").at(0)["completions"][0];
  EXPECT_EQ(cut["finish_reason"], "stop");
  EXPECT_EQ(cut["text"], text.substr(0, text.find(stop))) << "stop string '" << stop << "' in " << text;
  const auto cut_ids = ids_of(cut);
  ASSERT_LT(cut_ids.size(), ids.size());
  EXPECT_EQ(cut_ids, std::vector<std::int64_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut_ids.size())));

  // Stop token id: the completion ends with (and keeps) its first occurrence.
  const std::int64_t token = ids[3];
  const auto first = std::find(ids.begin(), ids.end(), token);
  r = generate(common + " --output token.jsonl --stop-token-id " + std::to_string(token));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json stopped = output("token.jsonl").at(0)["completions"][0];
  EXPECT_EQ(stopped["finish_reason"], "stop");
  EXPECT_EQ(ids_of(stopped), std::vector<std::int64_t>(ids.begin(), first + 1));
}

TEST_F(GrpoGenerateCli, ConfigFileBlockAppliesAndFlagsOverrideIt) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  write("gen.yaml",
        "generate:\n"
        "  n: 2\n"
        "  temperature: 0\n"
        "  max_new_tokens: 3\n"
        "  backend: {name: native, ignore_eos: true, max_num_seqs: 4}\n");
  Result r = generate("--input in.jsonl --output out.jsonl --config gen.yaml --max-new-tokens 5 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = output();
  ASSERT_EQ(out.size(), 1u);
  const json& c = out[0]["completions"];
  ASSERT_EQ(c.size(), 2u);  // n from the file
  EXPECT_EQ(c[0]["token_ids"].size(), 5u);  // the flag wins over the file's 3
  EXPECT_EQ(c[0]["finish_reason"], "length");  // ignore_eos from the file's backend options
  EXPECT_EQ(c[0]["token_ids"], c[1]["token_ids"]);  // temperature 0 from the file: greedy
}

TEST_F(GrpoGenerateCli, ConfigErrorsNameFileLineAndKey) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  write("typo.yaml", "generate:\n  temprature: 0\n");
  Result r = generate("--input in.jsonl --output out.jsonl --config typo.yaml");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("typo.yaml:2:3: unknown key 'generate.temprature' (did you mean 'generate.temperature'?)"));

  write("range.yaml", "generate:\n  top_p: 1.5\n");
  r = generate("--input in.jsonl --output out.jsonl --config range.yaml");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("range.yaml:2:10: generate.top_p: must be in (0, 1], got 1.5"));

  write("option.yaml", "generate:\n  backend:\n    name: native\n    max_num_seq: 4\n");
  r = generate("--input in.jsonl --output out.jsonl --config option.yaml");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("option.yaml:4:5: backend.max_num_seq: unknown option"));
  EXPECT_THAT(r.err, HasSubstr("did you mean 'max_num_seqs'?"));

  // Checked against the model's config.json after the file was read: still named in the file.
  write("vocab.yaml", "generate:\n  stop_token_ids: [300]\n");
  r = generate("--input in.jsonl --output out.jsonl --config vocab.yaml");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("vocab.yaml:2:"));
  EXPECT_THAT(r.err, HasSubstr("300 is outside the model's vocabulary [0, 300)"));

  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}

TEST_F(GrpoGenerateCli, MalformedLinesAreReportedWithFileAndLineAndNothingIsWritten) {
  write("in.jsonl",
        "{\"prompt\": \"fine\"}\n"
        "not json\n"
        "{\"prompt\": \"\"}\n"
        "{\"prompt\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
        "{\"text\": \"x\"}\n"
        "{\"messages\": [{\"role\": \"user\"}]}\n"
        "[1, 2]\n");
  write("out.jsonl", "old\n");
  Result r = generate("--input in.jsonl --output out.jsonl");
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:2: not valid JSON"));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:3: \"prompt\" is empty"));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:4: the line has both \"prompt\" and \"messages\""));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:5: expected \"prompt\" (a string) or \"messages\""));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:6: messages[0].content: expected a string"));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:7: expected a JSON object, got array"));
  EXPECT_THAT(r.err, HasSubstr("6 invalid input line(s) in in.jsonl; nothing was generated"));
  EXPECT_THAT(r.err, Not(HasSubstr("in.jsonl:1:")));
  EXPECT_EQ(read_text(dir_ / "out.jsonl"), "old\n");  // untouched
  EXPECT_THAT(files_besides({"in.jsonl", "out.jsonl", "stderr.txt"}), ::testing::IsEmpty());
}

TEST_F(GrpoGenerateCli, BadCommandLinesAreUsageErrorsBeforeAnythingRuns) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--top-p 1.5", "--top-p: must be in (0, 1], got 1.5"},
      {"--chat-template chatlm", "--chat-template: unknown chat template 'chatlm' (did you mean 'chatml'?)"},
      {"--no-such-flag", "unrecognised option '--no-such-flag'"},
      {"--backend-option ignore_eos", "--backend-option 'ignore_eos': expected KEY=VALUE"},
      {"--stop-token-id 300", "--stop-token-id: 300 is outside the model's vocabulary [0, 300)"},  // config.json
  };
  for (const Case& c : cases) {
    Result r = generate("--input in.jsonl --output out.jsonl " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
  }
  Result r = generate("--input missing.jsonl --output out.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot open --input 'missing.jsonl'"));
  r = generate("--input in.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--output is required"));
  const std::string cmd = "cd '" + dir_.string() + "' && env -u GRPO_PLUGIN_PATH '" GRPO_GENERATE_BINARY
                          "' --model no-such-dir --input in.jsonl --output out.jsonl 2>&1";
  const auto no_model = grpo::testing::run_command(cmd);
  EXPECT_EQ(no_model.exit_code, 2) << no_model.output;
  EXPECT_THAT(no_model.output, HasSubstr("--model 'no-such-dir': no such folder"));
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}

TEST_F(GrpoGenerateCli, RequestOverMaxModelLenFailsAloneAndTheOtherLinesAreWritten) {
  const std::string long_prompt(100, 'x');
  write("in.jsonl", "{\"prompt\": \"hi\"}\n{\"id\": \"long\", \"prompt\": \"" + long_prompt + "\"}\n{\"prompt\": \"ok\"}\n");
  Result r = generate(
      "--input in.jsonl --output out.jsonl --chat-template none --max-new-tokens 4 --backend-option max_model_len=32");
  EXPECT_EQ(r.exit_code, 6) << r.err;
  const auto out = output();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["completions"].size(), 1u);
  EXPECT_EQ(out[2]["completions"].size(), 1u);
  EXPECT_FALSE(out[1].contains("completions"));
  EXPECT_EQ(out[1]["id"], "long");
  EXPECT_EQ(out[1]["prompt_tokens"], 100);
  EXPECT_THAT(out[1]["error"].get<std::string>(), HasSubstr("the prompt has 100 tokens; max_model_len is 32"));
  EXPECT_THAT(r.err, HasSubstr("in.jsonl:2: request 'long'"));
  EXPECT_THAT(r.err, HasSubstr("1 of 3 request(s) failed"));
}

TEST_F(GrpoGenerateCli, ProgressLineAfterEachChunkAndASummaryWithBackendMetrics) {
  write("in.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\"}\n");
  Result r = generate("--input in.jsonl --output out.jsonl --max-new-tokens 3 --chunk-size 2 --backend-option ignore_eos=true");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex progress(R"(generated (\d+)/3 prompts, (\d+) tokens, [0-9.]+ tok/s, elapsed [0-9.]+s)");
  std::vector<std::string> done, tokens;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), progress), end; it != end; ++it) {
    done.push_back((*it)[1]);
    tokens.push_back((*it)[2]);
  }
  EXPECT_EQ(done, (std::vector<std::string>{"2", "3"})) << r.err;
  EXPECT_EQ(tokens, (std::vector<std::string>{"6", "9"})) << r.err;
  EXPECT_THAT(r.err, HasSubstr("prompts: 3\n"));
  EXPECT_THAT(r.err, HasSubstr("completion_tokens: 9\n"));
  EXPECT_THAT(r.err, HasSubstr("rollout/decode_tokens: "));  // the backend's metrics()
  EXPECT_THAT(r.err, HasSubstr("rollout/stop_rate: 0\n"));

  // (The fixture tokenizer has no template of its own: naming one avoids auto's fallback warning.)
  r = generate("--input in.jsonl --output out.jsonl --max-new-tokens 3 --chat-template chatml --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST_F(GrpoGenerateCli, UnknownBackendIsAPluginError) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  Result r = generate("--input in.jsonl --output out.jsonl --backend nativ");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_THAT(r.err, HasSubstr("no rollout_backend named 'nativ' (did you mean 'native'?)"));
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}

TEST_F(GrpoGenerateCli, OutputThatCannotBeWrittenIsARuntimeErrorWithoutPartialFiles) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  write("a-file", "");
  Result r = generate("--input in.jsonl --output a-file/out.jsonl --max-new-tokens 2 --quiet");
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot write --output"));
  EXPECT_THAT(files_besides({"in.jsonl", "a-file", "stderr.txt"}), ::testing::IsEmpty());
}

TEST_F(GrpoGenerateCli, StdinAndStdoutWithDash) {
  write("in.jsonl", "{\"prompt\": \"hello\"}\n");
  Result r = generate("--input - --output - --max-new-tokens 2 --quiet < in.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = json_lines(r.out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["id"], 1);
  EXPECT_EQ(out[0]["completions"].size(), 1u);
}

}  // namespace

// The shipped example configuration runs as documented (flags override its block).
TEST_F(GrpoGenerateCli, ShippedExampleConfigRuns) {
  write("in.jsonl", "{\"prompt\": \"Hello\"}\n{\"prompt\": \"2 + 2 =\"}\n");
  const Result r = generate("--config '" GRPO_SOURCE_DIR "/configs/generate.yaml' --input in.jsonl --output out.jsonl "
                            "--max-new-tokens 3 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = output();
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    ASSERT_EQ(line["completions"].size(), 4u);  // n: 4 from the file
    for (const auto& c : line["completions"]) EXPECT_LE(ids_of(c).size(), 3u);  // the flag wins
  }
}

// A chat template whose special tokens the tokenizer lacks would render a prompt the model
// never saw in training: refused up front (the demo tokenizer has chatml's tokens only).
TEST_F(GrpoGenerateCli, ChatTemplateTheTokenizerCannotEncodeIsRefused) {
  write("in.jsonl", "{\"prompt\": \"Hello\"}\n");
  const Result r = generate("--input in.jsonl --output out.jsonl --chat-template llama3");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--chat-template llama3: the chat template 'llama3' writes <|start_header_id|>"));
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
}
