// The `openai` rollout_backend plugin as a run loads it, against grpo-serve on loopback (a real
// server process) and, for the failures a real server cannot be made to show on demand (no
// token ids, a transient 503), a scripted stand-in: generation equals the in-process native
// backend's, weight sync reaches the server, and a server with another tokenizer, a server
// that is down or an answer without token ids is a clear error.
#include <gtest/gtest.h>
#include <httplib.h>

#include <grpo/sdk/torch.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "core/model/checkpoint.h"
#include "core/tokenizer/tokenizer_files.h"
#include "core/util/fs.h"
#include "tests/plugins/backends/native/rollout_fixtures.h"
#include "tests/support/build_plugins.h"
#include "tests/support/error_of.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_dir.h"

using namespace grpo;
using grpo::testing::create_component;
using grpo::testing::fresh_suite_dir;
using grpo::testing::error_of;
using grpo::testing::PluginOption;
using grpo::testing::request;
using grpo::testing::rollout_model_dir;
using grpo::testing::ServeProcess;

namespace {

namespace fs = std::filesystem;

std::shared_ptr<sdk::RolloutBackend> backend(const std::string& name, std::vector<PluginOption> options) {
  return create_component<sdk::RolloutBackend>(name, options, "rollout.backend");
}

sdk::NamedTensors named_parameters(core::CausalLM& model) {
  sdk::NamedTensors out;
  for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

std::vector<sdk::GenerationRequest> workload() {
  return {request("greedy", {11, 42, 7, 199, 23, 5, 64}, 12), request("sampled", {3, 9, 27, 81}, 10, 1.0, 4, 17),
          request("other", {200, 100, 50}, 8, 0.7, 3, 5)};
}

void expect_same(const std::vector<sdk::GenerationResult>& a, const std::vector<sdk::GenerationResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].status.is_ok()) << a[i].status.message();
    ASSERT_TRUE(b[i].status.is_ok()) << b[i].status.message();
    ASSERT_EQ(a[i].samples.size(), b[i].samples.size());
    for (std::size_t k = 0; k < a[i].samples.size(); ++k) {
      const auto &x = a[i].samples[k], &y = b[i].samples[k];
      EXPECT_EQ(x.token_ids, y.token_ids) << a[i].request_id << " sample " << k;
      EXPECT_EQ(x.text, y.text);
      EXPECT_EQ(x.finish_reason, y.finish_reason);
      ASSERT_EQ(x.logprobs.size(), y.logprobs.size());
      for (std::size_t t = 0; t < x.logprobs.size(); ++t) EXPECT_NEAR(x.logprobs[t], y.logprobs[t], 1e-4);
    }
  }
}

// One grpo-serve for the suite: the qwen2 fixture with its tokenizer, raw log-probs (the native
// backend's default), and the native backend on the same folder to compare with.
class OpenAIBackendAgainstGrpoServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fresh_suite_dir("openai-backend"));
    server_ = new ServeProcess(GRPO_SERVE_BINARY, rollout_model_dir("qwen2"), *dir_, {"--logprobs-mode", "raw"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static std::string* dir_;
  static ServeProcess* server_;
};
std::string* OpenAIBackendAgainstGrpoServe::dir_ = nullptr;
ServeProcess* OpenAIBackendAgainstGrpoServe::server_ = nullptr;

TEST_F(OpenAIBackendAgainstGrpoServe, GenerationEqualsTheNativeBackend) {
  const std::string model = rollout_model_dir("qwen2");
  auto remote = backend("openai", {{"url", server_->url(), true}, {"model", model, true}, {"weight_sync", "none", true}});
  auto local = backend("native", {{"model", model, true}});
  const auto results = remote->generate(workload());
  expect_same(results, local->generate(workload()));
  std::map<std::string, double> m;
  for (const auto& x : remote->metrics()) m[x.name] = x.value.item<double>();
  double tokens = 0;
  for (const auto& r : results)
    for (const auto& s : r.samples) tokens += static_cast<double>(s.token_ids.size());
  EXPECT_EQ(m.at("rollout/http_requests"), 3);
  EXPECT_EQ(m.at("rollout/failed_requests"), 0);
  EXPECT_EQ(m.at("rollout/completion_tokens"), tokens);
}

TEST_F(OpenAIBackendAgainstGrpoServe, WeightSyncReachesTheServer) {
  const std::string model = rollout_model_dir("qwen2");
  auto remote = backend("openai", {{"url", server_->url(), true}, {"model", model, true},
                                   {"weight_sync_dir", *dir_ + "/sync", true}});
  auto local = backend("native", {{"model", model, true}});
  core::LoadedModel trainer = core::load_model(model);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model->parameters()) p.mul_(1.3);
  }
  const auto before = remote->generate(workload());
  remote->update_weights(named_parameters(trainer.model));
  local->update_weights(named_parameters(trainer.model));
  const auto after = remote->generate(workload());
  expect_same(after, local->generate(workload()));
  EXPECT_NE(before[0].samples[0].token_ids, after[0].samples[0].token_ids) << "the scaled weights should change the answer";
  // A subset (a LoRA run's merged weights): the other tensors keep the last synced values.
  {
    torch::NoGradGuard no_grad;
    trainer.model->named_parameters()["model.layers.0.mlp.down_proj.weight"].mul_(-1.0);
  }
  sdk::NamedTensors subset{{"model.layers.0.mlp.down_proj.weight", trainer.model->named_parameters()["model.layers.0.mlp.down_proj.weight"]}};
  remote->update_weights(subset);
  local->update_weights(subset);
  expect_same(remote->generate(workload()), local->generate(workload()));
  httplib::Client client(server_->url());
  const auto health = nlohmann::json::parse(client.Get("/health")->body);
  EXPECT_GE(health.at("weights_version").get<int>(), 2) << health.dump();
  EXPECT_EQ(health.at("weights_path").get<std::string>(), fs::absolute(*dir_ + "/sync").string());
  // A tensor the model does not have: refused before anything is written.
  EXPECT_THROW(remote->update_weights({{"model.no_such.weight", torch::zeros({2})}}), std::invalid_argument);
}

TEST_F(OpenAIBackendAgainstGrpoServe, ARequestTheServerRefusesFailsAlone) {
  const std::string model = rollout_model_dir("qwen2");
  auto remote = backend("openai", {{"url", server_->url(), true}, {"model", model, true}, {"weight_sync", "none", true}});
  auto requests = workload();
  requests[1].prompt_ids.assign(5000, 7);  // longer than the server's max_model_len
  const auto results = remote->generate(requests);
  EXPECT_TRUE(results[0].status.is_ok());
  EXPECT_FALSE(results[1].status.is_ok());
  EXPECT_NE(results[1].status.message().find("maximum context length"), std::string::npos) << results[1].status.message();
  EXPECT_TRUE(results[2].status.is_ok());
}

TEST_F(OpenAIBackendAgainstGrpoServe, WeightSyncNeverReplacesAFolderItDidNotWrite) {
  // The folder is replaced at every step: the model folder itself, or a folder with someone
  // else's files, is refused before anything is written.
  const std::string model = rollout_model_dir("qwen2");
  std::string message = error_of([&] {
    backend("openai", {{"url", server_->url(), true}, {"model", model, true}, {"weight_sync_dir", model, true}});
  });
  EXPECT_NE(message.find("overlaps the model folder"), std::string::npos) << message;
  const std::string theirs = *dir_ + "/someone-elses";
  fs::create_directories(theirs);
  core::atomic_write_file(theirs + "/notes.txt", "keep me\n");
  message = error_of([&] {
    backend("openai", {{"url", server_->url(), true}, {"model", model, true}, {"weight_sync_dir", theirs, true}});
  });
  EXPECT_NE(message.find("was not written by this backend"), std::string::npos) << message;
  EXPECT_TRUE(fs::exists(theirs + "/notes.txt"));
}

TEST(OpenAIBackend, AServerWithAnotherTokenizerIsAConfigurationError) {
  // The same weights served with the byte-level tokenizer without merges: "Hello" is five
  // tokens there and fewer with the trainer's merges.
  const std::string dir = fresh_suite_dir("openai-other-tokenizer");
  const std::string model = rollout_model_dir("qwen2");
  const std::string other = dir + "/other";
  fs::create_directories(other);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(model) / f, fs::path(other) / f);
  core::atomic_write_file(other + "/tokenizer.json", core::make_byte_level_tokenizer_json());
  ServeProcess server(GRPO_SERVE_BINARY, other, dir);
  const std::string message = error_of([&] { backend("openai", {{"url", server.url(), true}, {"model", model, true}}); });
  EXPECT_NE(message.find("tokenizes differently"), std::string::npos) << message;
  EXPECT_NE(message.find("rollout.backend.url"), std::string::npos) << message;
}

TEST(OpenAIBackend, AServerThatIsDownIsAConfigurationErrorNamingTheUrl) {
  const std::string dir = fresh_suite_dir("openai-down");
  std::string url;
  {
    ServeProcess gone(GRPO_SERVE_BINARY, rollout_model_dir("qwen2"), dir);
    url = gone.url();
  }
  const std::string message = error_of([&] {
    backend("openai", {{"url", url, true}, {"model", rollout_model_dir("qwen2"), true}, {"max_retries", "1"}, {"retry_backoff_s", "0.1"}});
  });
  EXPECT_NE(message.find("cannot reach the server"), std::string::npos) << message;
  EXPECT_NE(message.find(url), std::string::npos) << message;
}

// A stand-in for servers whose answers a test cannot provoke from grpo-serve.
class StandIn {
 public:
  explicit StandIn(std::function<void(const httplib::Request&, httplib::Response&)> completions) {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "m", "object": "model"}]})", "application/json");
    });
    server_.Post("/v1/completions", [this, completions](const httplib::Request& req, httplib::Response& res) {
      ++calls;
      completions(req, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~StandIn() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::atomic<int> calls{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(OpenAIBackend, AnAnswerWithoutTokenIdsFailsWithTheReason) {
  // An older vLLM ignores return_token_ids and answers text and log-probs only.
  StandIn server([](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"choices": [{"index": 0, "text": "hi", "finish_reason": "stop",
                        "logprobs": {"tokens": ["h", "i"], "token_logprobs": [-0.1, -0.2]}}]})",
                    "application/json");
  });
  auto remote = backend("openai", {{"url", server.url(), true}, {"model", rollout_model_dir("qwen2"), true}, {"weight_sync", "none", true}});
  const auto results = remote->generate({request("a", {1, 2, 3}, 4)});
  ASSERT_FALSE(results[0].status.is_ok());
  EXPECT_NE(results[0].status.message().find("no token ids"), std::string::npos) << results[0].status.message();
}

TEST(OpenAIBackend, TransientServerErrorsAreRetried) {
  std::atomic<int> seen{0};
  StandIn server([&](const httplib::Request& req, httplib::Response& res) {
    if (seen++ == 0) {
      res.status = 503;
      res.set_content(R"({"error": {"message": "warming up"}})", "application/json");
      return;
    }
    const auto body = nlohmann::json::parse(req.body);
    EXPECT_EQ(body.at("prompt"), nlohmann::json({1, 2, 3}));
    EXPECT_EQ(body.at("return_token_ids"), true);
    res.set_content(R"({"choices": [{"index": 0, "text": "", "finish_reason": "length", "token_ids": [5, 6],
                        "logprobs": {"token_logprobs": [-0.5, -0.25]}}]})",
                    "application/json");
  });
  auto remote = backend("openai", {{"url", server.url(), true}, {"model", rollout_model_dir("qwen2"), true},
                                   {"weight_sync", "none", true}, {"retry_backoff_s", "0.05"}});
  const auto results = remote->generate({request("a", {1, 2, 3}, 2)});
  ASSERT_TRUE(results[0].status.is_ok()) << results[0].status.message();
  EXPECT_EQ(results[0].samples[0].token_ids, (std::vector<std::int64_t>{5, 6}));
  EXPECT_FLOAT_EQ(results[0].samples[0].logprobs[1], -0.25f);
  EXPECT_EQ(results[0].samples[0].finish_reason, sdk::FinishReason::kLength);
  EXPECT_EQ(server.calls.load(), 2);
}

}  // namespace
