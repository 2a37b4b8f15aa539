// The llm_judge verifier through grpo-serve (a real server process on loopback, a real model
// forward): a fixed set of completions scores the same every time, and a server that is down or
// too slow yields an error (the host's 0) with the reason, in bounded time.
//
// The judge model is built by hand so that its answers are known without running it: an "echo"
// model whose greedy next token is always the current token. Every attention and MLP output
// projection is zero, so the residual stream is the token's embedding; the embeddings are
// one-hot rows (hidden >= vocab) tied to the LM head, so after the final RMSNorm the logits are
// sqrt(hidden) for the current token and 0 for every other. Asked "...7", it answers "7777".
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/plugins/verifiers/verifier_test_util.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_dir.h"
#include "tests/support/tiny_byte_model.h"

namespace {

using namespace grpo::testing::verifier_tests;  // make, details, json, Option
using grpo::testing::fresh_suite_dir;
using grpo::testing::ServeProcess;

std::string echo_model(const std::string& dir) {
  using namespace grpo::core;
  const Tokenizer tokenizer = Tokenizer::from_json(make_byte_level_tokenizer_json());
  const int eos = *tokenizer.token_to_id("<|endoftext|>");
  ModelConfig c = grpo::testing::tiny_byte_model_config(tokenizer.vocab_size(), eos, 256);
  c.hidden_size = 272;  // >= vocab (259): one-hot embeddings; 8 heads of 34 (rotary needs even)
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 34;
  c.intermediate_size = 16;
  c.num_hidden_layers = 1;
  CausalLM model(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    if (name.find("norm") != std::string::npos) p.value().fill_(1.0);
    else p.value().zero_();
  }
  auto embed = model->named_parameters()["model.embed_tokens.weight"];
  for (std::int64_t t = 0; t < c.vocab_size; ++t) embed[t][t] = 1.0;
  SaveOptions options;
  options.tokenizer = &tokenizer;
  options.chat_templates = std::vector<NamedChatTemplate>{{"default", chat_template_jinja("none")}};
  save_model(dir, model, options);
  return dir;
}

class JudgeThroughGrpoServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fresh_suite_dir("llm-judge-serve"));
    server_ = new ServeProcess(GRPO_SERVE_BINARY, echo_model(*dir_ + "/echo"), *dir_, {"--served-model-name", "echo"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  // The completions endpoint: the rubric is the completion itself, so the echo model answers
  // its last character, repeated.
  static std::vector<Option> options(const std::string& url, std::vector<Option> more = {}) {
    std::vector<Option> o{{"url", url, true}, {"model", "echo", true}, {"endpoint", "completions", true},
                          {"rubric", "{completion}", true}, {"score_pattern", "([0-9])", true}, {"max_tokens", "4"},
                          {"max_score", "9"}, {"timeout_s", "10"}, {"max_retries", "0"}};
    o.insert(o.end(), more.begin(), more.end());
    return o;
  }
  static std::string* dir_;
  static ServeProcess* server_;
};
std::string* JudgeThroughGrpoServe::dir_ = nullptr;
ServeProcess* JudgeThroughGrpoServe::server_ = nullptr;

TEST_F(JudgeThroughGrpoServe, ScoresAFixedSetDeterministically) {
  // Hand-computed: the judge answers the completion's last digit four times; the last match is
  // that digit d, and the reward is d / 9.
  const std::vector<std::pair<std::string, double>> set{
      {"the answer is 9", 1.0}, {"x = 0", 0.0}, {"3 + 4 = 7", 7.0 / 9.0}, {"about 45", 5.0 / 9.0}, {"1", 1.0 / 9.0}};
  // Two judges (no shared cache) and two rounds each: every score is the hand-computed one.
  for (int round = 0; round < 2; ++round) {
    const auto judge = make("llm_judge", options(server_->url(), {{"cache", "false"}}));
    for (const auto& [completion, expected] : set) {
      const auto r = run(*judge, completion);
      EXPECT_NEAR(r.score, expected, 1e-9) << completion << ": " << r.details;
      const json d = details(r);
      EXPECT_EQ(d["judge_output"].get<std::string>(), std::string(4, completion.back())) << r.details;
    }
  }
}

TEST_F(JudgeThroughGrpoServe, ChatEndpointThroughTheServersTemplate) {
  // The served template is `none`: the messages' contents concatenated, so again the last
  // character is echoed.
  const auto judge = make("llm_judge", {{"url", server_->url(), true}, {"model", "echo", true}, {"rubric", "{completion}", true},
                                        {"score_pattern", "([0-9])", true}, {"max_tokens", "3"}, {"max_score", "9"}});
  const auto r = run(*judge, "grade: 6");
  EXPECT_NEAR(r.score, 6.0 / 9.0, 1e-9) << r.details;
}

TEST_F(JudgeThroughGrpoServe, AnswerWithoutAScoreIsAnErrorWithTheAnswer) {
  const auto judge = make("llm_judge", options(server_->url()));
  try {
    run(*judge, "no digits here");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("eeee"), std::string::npos) << e.what();
  }
}

TEST_F(JudgeThroughGrpoServe, ServerDownIsAnErrorNamingTheUrlNotAHang) {
  // A port that was free a moment ago: nothing listens there.
  const std::string dir = fresh_suite_dir("llm-judge-down");
  std::string url;
  {
    ServeProcess gone(GRPO_SERVE_BINARY, *dir_ + "/echo", dir, {"--served-model-name", "echo"});
    url = gone.url();
  }
  const auto judge = make("llm_judge", options(url, {{"max_retries", "1"}, {"retry_backoff_s", "0.1"}}));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run(*judge, "7");
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

TEST_F(JudgeThroughGrpoServe, SlowServerTimesOutWithTheReason) {
  // A judge answer of 200 tokens from a model whose max_model_len allows it takes longer than
  // a read time-out of a few milliseconds.
  const auto judge = make("llm_judge", options(server_->url(), {{"timeout_s", "0.005"}, {"max_tokens", "200"}, {"cache", "false"}}));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run(*judge, "long answer 7");
    FAIL() << "expected a time-out";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("time"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // The server goes on serving.
  const auto ok = make("llm_judge", options(server_->url()));
  EXPECT_NEAR(run(*ok, "7").score, 7.0 / 9.0, 1e-9);
}

}  // namespace
