// grpo-serve run as a user runs it: a real process on a free loopback port (ServeProcess),
// spoken to over HTTP with httplib::Client, on tiny random Qwen2 models (hidden 64, 2 layers)
// over the demo byte-level tokenizer, so completions hold arbitrary bytes.
//
// The expected shapes come from the published OpenAI API reference, written down here as the
// independent source (https://platform.openai.com/docs/api-reference/completions/object,
// .../chat/object, .../chat/streaming; cross-checked against clients generated from OpenAI's
// OpenAPI document: CreateCompletionResponse, ChatCompletionTokenLogprob, ChatCompletionChunk):
//
//   completion object     {id, object: "text_completion", created, model, choices, usage}
//     choices[i]          {text, index, logprobs, finish_reason: "stop" | "length" | ...}
//     logprobs            null, or {tokens[], token_logprobs[], top_logprobs, text_offset[]}
//     usage               {prompt_tokens, completion_tokens, total_tokens}
//   chat completion       {id, object: "chat.completion", created, model, choices, usage}
//     choices[i]          {index, message: {role: "assistant", content}, logprobs, finish_reason}
//     logprobs            null, or {content: [{token, logprob, bytes: int[] | null, top_logprobs: []}]}
//   chat chunk            {id, object: "chat.completion.chunk", created, model, choices}
//     choices[i]          {index, delta: {role?, content?}, logprobs, finish_reason: null until the last}
//   streaming             server-sent events "data: {chunk}", ended by "data: [DONE]"; with
//                         stream_options.include_usage a last chunk with "choices": [] and usage
//                         (completions stream text_completion objects the same way)
//   models list           {object: "list", data: [{id, object: "model", created, owned_by}]}
//   error                 {error: {message, type, param, code}}
//
// grpo-generate (the native plugin) is the reference for greedy answers; the engine's seeded
// sampling is deterministic per sample stream, so a seeded request gives the same answer alone,
// among concurrent ones, streamed or not.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/model/checkpoint.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/run_command.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_dir.h"
#include "tests/support/tiny_byte_model.h"
#include "grpo/sdk/utf8.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using grpo::testing::ServeProcess;

constexpr const char* kModelName = "tiny";
constexpr int kMaxModelLen = 64;

// ---- fixtures on disk ---------------------------------------------------------------------

const grpo::core::Tokenizer& byte_tokenizer() {
  static const grpo::core::Tokenizer tokenizer =
      grpo::core::Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  return tokenizer;
}

// A random Qwen2 (hidden 64, 2 layers, tied embeddings) over the byte-level tokenizer (259 ids),
// init std 0.2 so that its distributions are far from uniform; `hidden` 32 gives another shape.
void write_model(const std::string& dir, std::uint64_t seed, std::int64_t hidden = 64) {
  const auto& tokenizer = byte_tokenizer();
  auto config = grpo::testing::tiny_byte_model_config(tokenizer.vocab_size(), *tokenizer.token_to_id("<|endoftext|>"), 128);
  if (hidden != config.hidden_size) {
    config.hidden_size = hidden;
    config.intermediate_size = 2 * hidden;
    config.head_dim = hidden / config.num_attention_heads;
  }
  grpo::core::CausalLM model(config);
  model->init_weights(0.2, seed);
  grpo::core::SaveOptions options;
  options.tokenizer = &tokenizer;
  options.chat_templates =
      std::vector<grpo::core::NamedChatTemplate>{{"default", grpo::core::chat_template_jinja("chatml")}};
  grpo::core::save_model(dir, model, options);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- HTTP ---------------------------------------------------------------------------------

struct Reply {
  int status = 0;  // 0: no answer (connection failed)
  std::string body;
  json j;  // the body parsed, or discarded
};

class Api {
 public:
  Api(int port, std::string key = "", bool keep_alive = false) : client_("127.0.0.1", port), key_(std::move(key)) {
    client_.set_read_timeout(120, 0);
    client_.set_connection_timeout(10, 0);
    client_.set_keep_alive(keep_alive);
  }
  Reply get(const std::string& path) { return wrap(client_.Get(path, headers())); }
  Reply post(const std::string& path, const std::string& body) {
    return wrap(client_.Post(path, headers(), body, "application/json"));
  }
  Reply post(const std::string& path, const json& body) { return post(path, body.dump()); }

 private:
  httplib::Headers headers() const {
    if (key_.empty()) return {};
    return {{"Authorization", "Bearer " + key_}};
  }
  static Reply wrap(const httplib::Result& r) {
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.body = r->body;
    out.j = json::parse(out.body, nullptr, /*allow_exceptions=*/false);
    return out;
  }
  httplib::Client client_;
  std::string key_;
};

// A loopback TCP connection driven by hand: a client that sends part of a request and stops
// (slow or half-open). Reads are bounded by a timeout, so a test fails instead of hanging when
// the server never answers or never closes.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return connected_ && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // Open, with nothing from the server: no byte and no end of stream to read.
  bool open_and_silent() const {
    char b = 0;
    return connected_ && ::recv(fd_, &b, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  struct Received {
    std::string bytes;
    bool closed = false;  // the server closed the connection (false: still open at the timeout)
  };
  // What the server sends until it closes the connection, waiting at most `timeout_s`.
  Received read_until_closed(double timeout_s) const {
    Received r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (connected_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        r.closed = true;
        break;
      }
      r.bytes.append(buf, static_cast<std::size_t>(n));
    }
    return r;
  }
  struct Sent {
    std::size_t bytes = 0;
    bool closed = false;  // the server closed the connection (false: `max_bytes` or the timeout came first)
  };
  // Sends `chunk` again and again, without blocking past `timeout_s`, until the server closes
  // the connection or `max_bytes` are sent.
  Sent send_until_closed(const std::string& chunk, std::size_t max_bytes, double timeout_s) const {
    Sent s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (connected_ && s.bytes < max_bytes && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::send(fd_, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) s.bytes += static_cast<std::size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return s.closed = true, s;
    }
    return s;
  }

 private:
  int fd_;
  bool connected_ = false;
};

// The body of a raw HTTP answer, parsed (discarded when it is not JSON).
json raw_body(const std::string& answer) {
  const std::size_t at = answer.find("\r\n\r\n");
  return json::parse(at == std::string::npos ? std::string() : answer.substr(at + 4), nullptr, /*allow_exceptions=*/false);
}

// The server-sent events of a streamed answer: every payload but the last [DONE].
struct Stream {
  std::vector<json> chunks;
  bool ended_with_done = false;
  std::string problem;  // "" when every event was well-formed
};

Stream parse_sse(const std::string& body) {
  Stream s;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      s.problem = "an event without its blank line: " + body.substr(pos);
      break;
    }
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) {
      s.problem = "an event that is not 'data: ...': " + event;
      break;
    }
    const std::string data = event.substr(6);
    if (s.ended_with_done) {
      s.problem = "an event after [DONE]: " + data;
      break;
    }
    if (data == "[DONE]") {
      s.ended_with_done = true;
      continue;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded()) {
      s.problem = "an event that is not JSON: " + data;
      break;
    }
    s.chunks.push_back(std::move(j));
  }
  return s;
}

// Per choice index: the concatenated deltas, and the finish reason with where it came.
struct StreamedChoice {
  std::string text;
  json finish_reason;         // of the last chunk
  int chunks = 0;
  int chunks_with_finish = 0;  // chunks whose finish_reason is not null
  bool role_first = false;     // chat: the first chunk's delta.role is "assistant"
};

std::map<std::int64_t, StreamedChoice> collect(const Stream& s, bool chat, json* usage_chunk) {
  std::map<std::int64_t, StreamedChoice> out;
  for (const json& c : s.chunks) {
    if (c.contains("usage") && c["choices"].empty()) {
      if (usage_chunk) *usage_chunk = c;
      continue;
    }
    for (const json& choice : c["choices"]) {
      StreamedChoice& sc = out[choice["index"].get<std::int64_t>()];
      if (chat) {
        const json& delta = choice["delta"];
        if (sc.chunks == 0) sc.role_first = delta.value("role", "") == "assistant";
        if (delta.contains("content") && delta["content"].is_string()) sc.text += delta["content"].get<std::string>();
      } else {
        sc.text += choice["text"].get<std::string>();
      }
      ++sc.chunks;
      sc.finish_reason = choice["finish_reason"];
      if (!choice["finish_reason"].is_null()) ++sc.chunks_with_finish;
    }
  }
  return out;
}

std::vector<std::int64_t> ids(const json& j) { return j.get<std::vector<std::int64_t>>(); }

// ---- grpo-generate, the reference for greedy answers -------------------------------------

struct Generated {
  std::vector<std::int64_t> token_ids;
  std::string text, finish_reason;
};

std::vector<Generated> grpo_generate(const std::string& model, const std::vector<std::string>& prompts, int max_tokens,
                                     const std::string& work_dir) {
  const fs::path in = fs::path(work_dir) / "generate.in.jsonl", out = fs::path(work_dir) / "generate.out.jsonl";
  {
    std::ofstream f(in, std::ios::binary);
    for (const std::string& p : prompts) f << json{{"prompt", p}}.dump() << "\n";
  }
  const std::string cmd = "env -u GRPO_PLUGIN_PATH '" GRPO_GENERATE_BINARY "' --model '" + model + "' --input '" + in.string() +
                          "' --output '" + out.string() + "' --chat-template none --temperature 0 --max-new-tokens " +
                          std::to_string(max_tokens) + " --plugin-path '" GRPO_PLUGIN_BUILD_DIR "' --quiet 2>&1";
  const auto run = grpo::testing::run_command(cmd);
  EXPECT_EQ(run.exit_code, 0) << cmd << "\n" << run.output;
  std::vector<Generated> result;
  std::istringstream lines(read_text(out));
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    const json& c = j["completions"].at(0);
    result.push_back({ids(c["token_ids"]), c["text"].get<std::string>(), c["finish_reason"].get<std::string>()});
  }
  EXPECT_EQ(result.size(), prompts.size()) << run.output;
  return result;
}

// A greedy, token-id-exact completion request (what grpo-generate --chat-template none does).
json greedy_request(const json& prompt, int max_tokens) {
  return {{"model", kModelName},      {"prompt", prompt},          {"max_tokens", max_tokens},
          {"temperature", 0},         {"add_special_tokens", false}, {"return_token_ids", true}};
}

const std::vector<std::string>& greedy_prompts() {
  static const std::vector<std::string> p = {"hello", "The cat sat on", "12+34=", "caf\xC3\xA9 \xE2\x82\xAC 5"};
  return p;
}

// The OpenAI error object: 4xx, message non-empty, type a string, param/code present.
void expect_error(const Reply& r, int status, const std::string& param, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.j.is_object() && r.j.contains("error")) << r.body;
  const json& e = r.j["error"];
  ASSERT_TRUE(e.is_object()) << r.body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(e.contains(k)) << k << " in " << r.body;
  ASSERT_TRUE(e["message"].is_string()) << r.body;
  EXPECT_FALSE(e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  if (!param.empty()) EXPECT_EQ(e["param"], param) << r.body;
}

void expect_error_status(const Reply& r, int status) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_TRUE(r.j.is_object() && r.j.contains("error")) << r.body;
}

// ---- a server shared by a suite (a start costs seconds): Suite names its folder and options --

template <class Suite>
class SharedServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    try {
      dir_ = grpo::testing::fresh_suite_dir(Suite::kFolder);
      model_ = dir_ + "/model";
      write_model(model_, 1);
      server_ = std::make_unique<ServeProcess>(GRPO_SERVE_BINARY, model_, dir_, Suite::server_options());
    } catch (const std::exception& e) {
      setup_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    if (server_) {
      const int code = server_->stop();
      EXPECT_EQ(code, 0) << server_->log();
    }
    server_.reset();
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) fs::remove_all(dir_);
  }
  void SetUp() override { ASSERT_TRUE(server_) << "grpo-serve did not start: " << setup_error_; }
  void TearDown() override {
    if (HasFailure() && server_) std::cerr << "grpo-serve log:\n" << server_->log() << "\n";
  }
  Api api() const { return Api(server_->port()); }

  static inline std::string dir_, model_, setup_error_;
  static inline std::unique_ptr<ServeProcess> server_;
};

// ---- the shared server: model A, max_model_len 64, 8 decode slots --------------------------

class GrpoServeApi : public SharedServer<GrpoServeApi> {
 public:
  static constexpr const char* kFolder = "serve/api";
  static std::vector<std::string> server_options() {
    return {"--served-model-name", kModelName, "--max-model-len", std::to_string(kMaxModelLen), "--max-num-seqs", "8",
            "--log-level", "warn"};
  }
};

TEST_F(GrpoServeApi, ModelsListNamesTheServedModel) {
  Api c = api();
  const Reply r = c.get("/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j["object"], "list");
  ASSERT_TRUE(r.j["data"].is_array());
  ASSERT_EQ(r.j["data"].size(), 1u);
  const json& card = r.j["data"][0];
  EXPECT_EQ(card["id"], kModelName);
  EXPECT_EQ(card["object"], "model");
  EXPECT_TRUE(card["created"].is_number_integer());
  EXPECT_GT(card["created"].get<std::int64_t>(), 1600000000);
  EXPECT_TRUE(card["owned_by"].is_string());

  const Reply health = c.get("/health");
  ASSERT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.j["weights_version"], 0);

  // /tokenize: the server's tokens are the tokenizer's (byte-level: one per byte).
  const Reply tok = c.post("/tokenize", json{{"prompt", "caf\xC3\xA9"}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  const std::vector<int> expected = byte_tokenizer().encode("caf\xC3\xA9");
  EXPECT_EQ(tok.j["tokens"].get<std::vector<int>>(), expected);
  EXPECT_EQ(tok.j["count"], expected.size());
  EXPECT_EQ(tok.j["max_model_len"], kMaxModelLen);
  expect_error_status(c.post("/tokenize", json{{"text", "x"}}), 400);
}

TEST_F(GrpoServeApi, CompletionHasTheOpenAIShapeAndConsistentUsage) {
  Api c = api();
  const Reply r = c.post("/v1/completions", json{{"model", kModelName}, {"prompt", "Once upon"}, {"max_tokens", 12},
                                                  {"seed", 3}, {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& j = r.j;
  ASSERT_TRUE(j["id"].is_string());
  EXPECT_FALSE(j["id"].get<std::string>().empty());
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], kModelName);
  ASSERT_TRUE(j["choices"].is_array());
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& ch = j["choices"][0];
  for (const char* k : {"text", "index", "logprobs", "finish_reason"}) EXPECT_TRUE(ch.contains(k)) << k;
  EXPECT_TRUE(ch["text"].is_string());
  EXPECT_EQ(ch["index"], 0);
  EXPECT_TRUE(ch["logprobs"].is_null());  // not asked for
  const std::string finish = ch["finish_reason"].get<std::string>();
  const auto completion = ids(ch["token_ids"]);
  const auto prompt = ids(ch["prompt_token_ids"]);
  EXPECT_TRUE(finish == "length" ? completion.size() == 12u : finish == "stop" && completion.size() <= 12u) << r.body;
  EXPECT_EQ(prompt.size(), 9u);  // "Once upon", one byte per token (add_special_tokens adds none here)

  const json& u = j["usage"];
  EXPECT_EQ(u["prompt_tokens"], prompt.size());
  EXPECT_EQ(u["completion_tokens"], completion.size());
  EXPECT_EQ(u["total_tokens"], prompt.size() + completion.size());

  // Two answers get two ids.
  const Reply again = c.post("/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 2}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_NE(again.j["id"], j["id"]);
}

TEST_F(GrpoServeApi, ChatCompletionHasTheOpenAIShape) {
  Api c = api();
  const json messages = json::array({json{{"role", "system"}, {"content", "Be brief."}}, json{{"role", "user"}, {"content", "Hi!"}}});
  const Reply r = c.post("/v1/chat/completions",
                         json{{"model", kModelName}, {"messages", messages}, {"max_tokens", 10}, {"seed", 5}, {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& j = r.j;
  EXPECT_TRUE(j["id"].is_string());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], kModelName);
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& ch = j["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_TRUE(ch["message"]["content"].is_string());
  EXPECT_TRUE(ch.contains("logprobs") && ch["logprobs"].is_null());
  EXPECT_TRUE(ch["finish_reason"] == "stop" || ch["finish_reason"] == "length") << r.body;
  // The prompt is the chatml rendering of the messages, with the generation prompt.
  const std::string rendered = grpo::core::render_chat("chatml", {{"system", "Be brief."}, {"user", "Hi!"}}, true);
  const std::vector<int> expected_prompt = byte_tokenizer().encode(rendered);
  const auto prompt = ids(ch["prompt_token_ids"]);
  EXPECT_EQ(prompt, std::vector<std::int64_t>(expected_prompt.begin(), expected_prompt.end()));
  const auto completion = ids(ch["token_ids"]);
  EXPECT_LE(completion.size(), 10u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], completion.size());
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + completion.size());

  // n = 3: choices 0, 1, 2.
  const Reply three = c.post("/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 4}, {"n", 3}});
  ASSERT_EQ(three.status, 200) << three.body;
  ASSERT_EQ(three.j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(three.j["choices"][i]["index"], i);
}

TEST_F(GrpoServeApi, LogprobsHaveTheOpenAIShapes) {
  Api c = api();
  const Reply r = c.post("/v1/completions", json{{"prompt", "abc"}, {"max_tokens", 8}, {"logprobs", 0}, {"seed", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::size_t n = r.j["usage"]["completion_tokens"].get<std::size_t>();
  ASSERT_GT(n, 0u) << r.body;
  const json& lp = r.j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  EXPECT_TRUE(lp.contains("top_logprobs"));
  std::int64_t last_offset = -1;
  for (std::size_t t = 0; t < n; ++t) {
    EXPECT_TRUE(lp["tokens"][t].is_string());
    ASSERT_TRUE(lp["token_logprobs"][t].is_number());
    EXPECT_LE(lp["token_logprobs"][t].get<double>(), 0.0);
    EXPECT_GE(lp["text_offset"][t].get<std::int64_t>(), last_offset);
    last_offset = lp["text_offset"][t].get<std::int64_t>();
  }

  const Reply chat = c.post("/v1/chat/completions", json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                                                         {"max_tokens", 6}, {"logprobs", true}, {"seed", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const std::size_t m = chat.j["usage"]["completion_tokens"].get<std::size_t>();
  ASSERT_GT(m, 0u) << chat.body;
  const json& content = chat.j["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << chat.body;
  ASSERT_EQ(content.size(), m);
  for (const json& e : content) {
    EXPECT_TRUE(e["token"].is_string()) << e;
    ASSERT_TRUE(e["logprob"].is_number()) << e;
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_TRUE(e["bytes"].is_array()) << e;
    // bytes are the token's own bytes (OpenAI: "useful where characters are represented by
    // multiple tokens"): a byte-level piece may be part of a character, which `token` shows as
    // U+FFFD.
    std::string from_bytes;
    for (const json& b : e["bytes"]) from_bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(grpo::sdk::to_valid_utf8(from_bytes), e["token"].get<std::string>());
    EXPECT_TRUE(e["top_logprobs"].is_array()) << e;
  }
}

TEST_F(GrpoServeApi, NChoicesAreIndexedAcrossPrompts) {
  Api c = api();
  const Reply three = c.post("/v1/completions", json{{"prompt", "ab"}, {"max_tokens", 4}, {"n", 3}, {"seed", 4}});
  ASSERT_EQ(three.status, 200) << three.body;
  ASSERT_EQ(three.j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(three.j["choices"][i]["index"], i);

  const Reply four = c.post("/v1/completions", json{{"prompt", json::array({"first", "second!"})}, {"max_tokens", 5},
                                                    {"n", 2}, {"seed", 4}, {"return_token_ids", true}});
  ASSERT_EQ(four.status, 200) << four.body;
  ASSERT_EQ(four.j["choices"].size(), 4u);
  std::size_t prompt_tokens = 0, completion_tokens = 0;
  for (int i = 0; i < 4; ++i) {
    const json& ch = four.j["choices"][i];
    EXPECT_EQ(ch["index"], i);
    // Choices 0-1 answer "first" (5 tokens), 2-3 "second!" (7).
    EXPECT_EQ(ch["prompt_token_ids"].size(), i < 2 ? 5u : 7u);
    completion_tokens += ch["token_ids"].size();
  }
  prompt_tokens = 5 + 7;  // once per prompt, as vLLM counts it
  EXPECT_EQ(four.j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(four.j["usage"]["completion_tokens"], completion_tokens);
  EXPECT_EQ(four.j["usage"]["total_tokens"], prompt_tokens + completion_tokens);
}

TEST_F(GrpoServeApi, GreedyCompletionsEqualGrpoGenerateTokenForToken) {
  constexpr int kTokens = 16;
  const auto reference = grpo_generate(model_, greedy_prompts(), kTokens, dir_);
  ASSERT_EQ(reference.size(), greedy_prompts().size());
  Api c = api();
  // One request per prompt...
  for (std::size_t i = 0; i < greedy_prompts().size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const Reply r = c.post("/v1/completions", greedy_request(greedy_prompts()[i], kTokens));
    ASSERT_EQ(r.status, 200) << r.body;
    const json& ch = r.j["choices"][0];
    EXPECT_EQ(ids(ch["token_ids"]), reference[i].token_ids);
    EXPECT_EQ(ch["text"], reference[i].text);
    EXPECT_EQ(ch["finish_reason"], reference[i].finish_reason);
  }
  // A prompt given as token ids is the same prompt.
  {
    const std::vector<int> tokens = byte_tokenizer().encode(greedy_prompts()[1]);
    const Reply r = c.post("/v1/completions", greedy_request(json(tokens), kTokens));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ids(r.j["choices"][0]["token_ids"]), reference[1].token_ids);
    EXPECT_EQ(ids(r.j["choices"][0]["prompt_token_ids"]), std::vector<std::int64_t>(tokens.begin(), tokens.end()));
  }
  // ... and all of them in one request (decoded together).
  const Reply all = c.post("/v1/completions", greedy_request(greedy_prompts(), kTokens));
  ASSERT_EQ(all.status, 200) << all.body;
  ASSERT_EQ(all.j["choices"].size(), reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) {
    EXPECT_EQ(ids(all.j["choices"][i]["token_ids"]), reference[i].token_ids) << i;
    EXPECT_EQ(all.j["choices"][i]["text"], reference[i].text) << i;
  }
}

TEST_F(GrpoServeApi, StreamedCompletionEqualsTheNonStreamedOne) {
  Api c = api();
  const json request = {{"model", kModelName}, {"prompt", json::array({"Stream me", "and me"})}, {"max_tokens", 24},
                        {"temperature", 1.0},   {"seed", 11},                                   {"n", 2}};
  const Reply plain = c.post("/v1/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  json streamed_request = request;
  streamed_request["stream"] = true;
  streamed_request["stream_options"] = {{"include_usage", true}};
  const Reply streamed = c.post("/v1/completions", streamed_request);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const Stream s = parse_sse(streamed.body);
  ASSERT_EQ(s.problem, "") << streamed.body;
  EXPECT_TRUE(s.ended_with_done) << streamed.body;
  json usage;
  const auto choices = collect(s, false, &usage);
  ASSERT_EQ(choices.size(), 4u) << streamed.body;
  bool any_non_ascii = false;
  for (const json& ch : plain.j["choices"]) {
    const std::int64_t i = ch["index"];
    SCOPED_TRACE("choice " + std::to_string(i));
    const StreamedChoice& sc = choices.at(i);
    EXPECT_EQ(sc.text, ch["text"].get<std::string>());
    EXPECT_EQ(sc.finish_reason, ch["finish_reason"]);
    EXPECT_EQ(sc.chunks_with_finish, 1);
    for (unsigned char b : ch["text"].get<std::string>()) any_non_ascii |= b >= 0x80;
  }
  EXPECT_TRUE(any_non_ascii) << "the random model's text should hold non-ASCII bytes: " << plain.body;
  for (const json& chunk : s.chunks) {
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_EQ(chunk["model"], kModelName);
    EXPECT_TRUE(chunk["id"].is_string());
  }
  // The finish reason comes on each choice's last chunk (checked via chunks_with_finish and the
  // last chunk's value above); the usage chunk is the last before [DONE].
  ASSERT_TRUE(usage.is_object()) << streamed.body;
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], plain.j["usage"]);
  EXPECT_EQ(s.chunks.back(), usage);
}

TEST_F(GrpoServeApi, StreamedChatEqualsTheNonStreamedOne) {
  Api c = api();
  const json request = {{"messages", json::array({json{{"role", "user"}, {"content", "Tell me something"}}})},
                        {"max_tokens", 24},
                        {"temperature", 1.0},
                        {"seed", 21},
                        {"n", 2}};
  const Reply plain = c.post("/v1/chat/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  json streamed_request = request;
  streamed_request["stream"] = true;
  streamed_request["stream_options"] = {{"include_usage", true}};
  const Reply streamed = c.post("/v1/chat/completions", streamed_request);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const Stream s = parse_sse(streamed.body);
  ASSERT_EQ(s.problem, "") << streamed.body;
  EXPECT_TRUE(s.ended_with_done);
  json usage;
  const auto choices = collect(s, true, &usage);
  ASSERT_EQ(choices.size(), 2u) << streamed.body;
  for (const json& ch : plain.j["choices"]) {
    const std::int64_t i = ch["index"];
    SCOPED_TRACE("choice " + std::to_string(i));
    const StreamedChoice& sc = choices.at(i);
    EXPECT_TRUE(sc.role_first);
    EXPECT_EQ(sc.text, ch["message"]["content"].get<std::string>());
    EXPECT_EQ(sc.finish_reason, ch["finish_reason"]);
    EXPECT_EQ(sc.chunks_with_finish, 1);
  }
  for (const json& chunk : s.chunks) EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  ASSERT_TRUE(usage.is_object()) << streamed.body;
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], plain.j["usage"]);
  EXPECT_EQ(s.chunks.back(), usage);
}

TEST_F(GrpoServeApi, StreamWithStopStringEqualsTheNonStreamedText) {
  Api c = api();
  json request = {{"prompt", "Where does it stop"}, {"max_tokens", 32}, {"temperature", 1.0}, {"seed", 7}};
  const Reply free_run = c.post("/v1/completions", request);
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  const std::string full = free_run.j["choices"][0]["text"];
  // Stop strings that occur in the free run: a printable ASCII byte, and two in a row, first
  // seen past the start (so the cut leaves text before it).
  std::string one, two;
  for (std::size_t i = 2; i < full.size(); ++i) {
    const auto printable = [&](std::size_t k) { return full[k] > 0x20 && full[k] < 0x7f; };
    if (one.empty() && printable(i)) one = full.substr(i, 1);
    if (two.empty() && i + 1 < full.size() && printable(i) && printable(i + 1)) two = full.substr(i, 2);
  }
  ASSERT_FALSE(one.empty()) << "no printable byte to stop at in " << free_run.body;
  std::vector<std::string> stops{one};
  if (!two.empty()) stops.push_back(two);
  for (const std::string& stop : stops) {
    SCOPED_TRACE("stop \"" + stop + "\"");
    request["stop"] = json::array({stop});
    request.erase("stream");
    const Reply plain = c.post("/v1/completions", request);
    ASSERT_EQ(plain.status, 200) << plain.body;
    const std::string text = plain.j["choices"][0]["text"];
    EXPECT_EQ(text, full.substr(0, full.find(stop))) << "the text ends before the stop string";
    EXPECT_EQ(plain.j["choices"][0]["finish_reason"], "stop");

    request["stream"] = true;
    const Reply streamed = c.post("/v1/completions", request);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    const Stream s = parse_sse(streamed.body);
    ASSERT_EQ(s.problem, "");
    EXPECT_TRUE(s.ended_with_done);
    const auto choices = collect(s, false, nullptr);
    ASSERT_EQ(choices.size(), 1u) << streamed.body;
    EXPECT_EQ(choices.at(0).text, text) << streamed.body;
    EXPECT_EQ(choices.at(0).finish_reason, "stop");

    // The same through chat (the template's prompt differs; streamed == non-streamed still).
    json chat = {{"messages", json::array({json{{"role", "user"}, {"content", "Where does it stop"}}})},
                 {"max_tokens", 20}, {"temperature", 1.0}, {"seed", 7}, {"stop", json::array({stop})}};
    const Reply chat_plain = c.post("/v1/chat/completions", chat);
    ASSERT_EQ(chat_plain.status, 200) << chat_plain.body;
    chat["stream"] = true;
    const Reply chat_streamed = c.post("/v1/chat/completions", chat);
    ASSERT_EQ(chat_streamed.status, 200);
    const auto chat_choices = collect(parse_sse(chat_streamed.body), true, nullptr);
    ASSERT_EQ(chat_choices.size(), 1u) << chat_streamed.body;
    const std::string chat_text = chat_plain.j["choices"][0]["message"]["content"];
    EXPECT_EQ(chat_text.find(stop), std::string::npos);
    EXPECT_EQ(chat_choices.at(0).text, chat_text) << chat_streamed.body;
  }
}

TEST_F(GrpoServeApi, AClientLeavingMidStreamDoesNotDisturbServing) {
  httplib::Client client("127.0.0.1", server_->port());
  client.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = json{{"prompt", "leave early"}, {"max_tokens", 40}, {"stream", true}, {"seed", 1}}.dump();
  int pieces = 0;
  req.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) { return ++pieces < 2; };
  const httplib::Result left = client.send(req);
  EXPECT_FALSE(left) << "the receiver cancelled: no complete answer";
  EXPECT_GE(pieces, 1);
  Api c = api();
  for (int i = 0; i < 3; ++i) {
    const Reply r = c.post("/v1/completions", json{{"prompt", "still here"}, {"max_tokens", 4}, {"stream", i == 1}});
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

TEST_F(GrpoServeApi, BadRequestsGetOpenAIErrorsAndServingGoesOn) {
  Api c = api();
  const json good = {{"model", kModelName}, {"prompt", "ok"}, {"max_tokens", 3}};
  auto with = [&](const char* key, const json& value) {
    json j = good;
    j[key] = value;
    return j;
  };
  auto still_serving = [&](const std::string& after) {
    const Reply r = c.post("/v1/completions", good);
    EXPECT_EQ(r.status, 200) << "after " << after << ": " << r.body;
  };

  expect_error(c.post("/v1/completions", std::string("{\"prompt\": \"x\", ")), 400, "", "malformed JSON");
  still_serving("malformed JSON");
  expect_error(c.post("/v1/chat/completions", std::string("not json")), 400, "", "malformed chat JSON");
  still_serving("malformed chat JSON");

  const Reply unknown_model = c.post("/v1/completions", with("model", "gpt-4"));
  expect_error(unknown_model, 404, "model", "unknown model");
  EXPECT_EQ(unknown_model.j["error"]["code"], "model_not_found");
  still_serving("unknown model");

  expect_error(c.post("/v1/completions", with("n", 0)), 400, "n", "n = 0");
  still_serving("n = 0");
  expect_error(c.post("/v1/completions", with("max_tokens", kMaxModelLen)), 400, "max_tokens", "max_tokens past the context");
  still_serving("max_tokens past the context");
  expect_error(c.post("/v1/chat/completions", json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})},
                                                   {"max_tokens", kMaxModelLen}}),
               400, "max_tokens", "chat max_tokens past the context");
  expect_error(c.post("/v1/completions", with("temperature", -1)), 400, "temperature", "temperature -1");
  still_serving("temperature -1");
  expect_error(c.post("/v1/completions", with("prompt", json::array({1, 2, 100000}))), 400, "prompt",
               "a token id outside the vocabulary");
  still_serving("a token id outside the vocabulary");
  expect_error(c.post("/v1/completions", with("prompt", json::array({1, -1}))), 400, "prompt", "a negative token id");
  expect_error(c.post("/v1/completions", with("max_tokens", "many")), 400, "max_tokens", "max_tokens a string");
  expect_error(c.post("/v1/chat/completions", json{{"messages", json::array()}}), 400, "messages", "no messages");
  // Sampling the engine does not implement is refused, not silently ignored; neutral values pass.
  expect_error(c.post("/v1/completions", with("presence_penalty", 0.5)), 400, "presence_penalty", "a presence penalty");
  expect_error(c.post("/v1/completions", with("logit_bias", json{{"5", 10}})), 400, "logit_bias", "a logit bias");
  expect_error(c.post("/v1/completions", with("stop_token_ids", json::array({100000}))), 400, "stop_token_ids",
               "a stop token id outside the vocabulary");
  EXPECT_EQ(c.post("/v1/completions", with("frequency_penalty", 0)).status, 200);
  expect_error(c.post("/v1/chat/completions",
                      json{{"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", 5}}})}}})}}),
               400, "", "a content part whose type is not a string");
  still_serving("unsupported sampling fields");
  // The same errors on a streamed request come as an HTTP error, not a stream.
  json streamed = with("n", 0);
  streamed["stream"] = true;
  expect_error(c.post("/v1/completions", streamed), 400, "n", "n = 0, streamed");

  const Reply unknown_path = c.post("/v1/embeddings", good);
  expect_error(unknown_path, 404, "", "unknown path");
  expect_error(c.get("/v2/models"), 404, "", "unknown GET path");
  still_serving("unknown path");
}

TEST_F(GrpoServeApi, ConcurrentSeededRequestsEqualTheSameRequestsAlone) {
  constexpr int kClients = 16;
  auto request = [](int i) {
    return json{{"prompt", "client " + std::to_string(i) + " says"}, {"max_tokens", 12 + i % 5}, {"temperature", 1.0},
                {"seed", 1000 + i}, {"return_token_ids", true}};
  };
  // One at a time first...
  std::vector<json> alone(kClients);
  {
    Api c = api();
    for (int i = 0; i < kClients; ++i) {
      const Reply r = c.post("/v1/completions", request(i));
      ASSERT_EQ(r.status, 200) << r.body;
      alone[i] = r.j["choices"][0];
    }
  }
  // ... then all together (8 decode slots: they batch, and some queue). The connections are
  // opened one by one first (keep-alive), so that the requests, not the connects, arrive together.
  std::vector<std::unique_ptr<Api>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Api>(server_->port(), "", /*keep_alive=*/true));
    ASSERT_EQ(clients.back()->get("/health").status, 200);
  }
  std::vector<Reply> together(kClients);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kClients) std::this_thread::yield();
      together[i] = clients[i]->post("/v1/completions", request(i));
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> response_ids;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    ASSERT_EQ(together[i].status, 200) << together[i].body;
    const json& ch = together[i].j["choices"][0];
    EXPECT_EQ(ch["token_ids"], alone[i]["token_ids"]);
    EXPECT_EQ(ch["text"], alone[i]["text"]);
    EXPECT_EQ(ch["finish_reason"], alone[i]["finish_reason"]);
    response_ids.insert(together[i].j["id"].get<std::string>());
  }
  EXPECT_EQ(response_ids.size(), static_cast<std::size_t>(kClients));
  // Different seeds sample differently (the requests are not all one answer).
  std::set<json> distinct;
  for (const json& a : alone) distinct.insert(a["token_ids"]);
  EXPECT_GT(distinct.size(), 1u);
}

// Issue 41: connections that send a request line and one header and then nothing must not
// starve the other clients. Each used to hold one of the 128 HTTP threads for the 60 s read
// timeout, so the 129th client waited a minute. The client's timeouts bound the test.
TEST_F(GrpoServeApi, IdleHalfOpenConnectionsDoNotDelayOtherClients) {
  constexpr int kIdle = 200;
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server_->port()));
    ASSERT_TRUE(idle.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n")) << "idle connection " << i;
  }
  httplib::Client client("127.0.0.1", server_->port());
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(2, 0);
  client.set_write_timeout(2, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const httplib::Result r =
      client.Post("/v1/completions", json{{"prompt", "still served"}, {"max_tokens", 4}}.dump(), "application/json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r) << "no answer with " << kIdle << " idle connections open: " << httplib::to_string(r.error()) << " after "
                 << seconds << " s";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_LT(seconds, 2.0);
  // The premise held: the idle connections were still open (inside the header timeout), not dropped.
  int open = 0;
  for (const auto& c : idle) open += c->open_and_silent() ? 1 : 0;
  EXPECT_EQ(open, kIdle);
}

// ---- servers of their own -----------------------------------------------------------------

TEST(GrpoServeAuth, ApiKeyGuardsTheApiButNotHealth) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/auth");
  write_model(dir + "/model", 1);
  ServeProcess server(GRPO_SERVE_BINARY, dir + "/model", dir,
                      {"--api-key", "sesame", "--served-model-name", kModelName, "--log-level", "warn"});
  const json good = {{"prompt", "ok"}, {"max_tokens", 2}};
  {
    Api none(server.port());
    const Reply models = none.get("/v1/models");
    expect_error(models, 401, "", "no key");
    EXPECT_EQ(models.j["error"]["type"], "authentication_error");
    expect_error(none.post("/v1/completions", good), 401, "", "no key, completions");
    EXPECT_EQ(none.get("/health").status, 200);  // open without the key
  }
  {
    Api wrong(server.port(), "open");
    expect_error(wrong.get("/v1/models"), 401, "", "wrong key");
    expect_error(wrong.post("/v1/completions", good), 401, "", "wrong key, completions");
    expect_error(wrong.post("/v1/chat/completions", json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})}}),
                 401, "", "wrong key, chat");
    expect_error(wrong.post("/update_weights_from_disk", json{{"model_path", dir + "/model"}}), 401, "",
                 "wrong key, weight update");
    EXPECT_EQ(wrong.get("/health").status, 200);
  }
  {
    Api right(server.port(), "sesame");
    EXPECT_EQ(right.get("/v1/models").status, 200);
    const Reply r = right.post("/v1/completions", good);
    EXPECT_EQ(r.status, 200) << r.body;
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
  fs::remove_all(dir);
}

TEST(GrpoServeWeights, UpdateFromDiskSwapsWeightsAndRefusesBadCheckpoints) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/weights");
  const std::string a = dir + "/model-a", b = dir + "/model-b", other_shape = dir + "/model-hidden32",
                    truncated = dir + "/model-truncated";
  write_model(a, 1);
  write_model(b, 2);
  write_model(other_shape, 3, /*hidden=*/32);
  fs::create_directories(truncated);
  fs::copy_file(b + "/config.json", truncated + "/config.json");
  {
    const std::string bytes = read_text(b + "/model.safetensors");
    std::ofstream(truncated + "/model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  constexpr int kTokens = 12;
  const std::vector<std::string> prompts = {"weights?", "xyz"};
  const auto answers_a = grpo_generate(a, prompts, kTokens, dir);
  const auto answers_b = grpo_generate(b, prompts, kTokens, dir);
  ASSERT_EQ(answers_a.size(), prompts.size());
  ASSERT_EQ(answers_b.size(), prompts.size());
  ASSERT_NE(answers_a[0].token_ids, answers_b[0].token_ids) << "models A and B should answer differently";

  ServeProcess server(GRPO_SERVE_BINARY, a, dir, {"--served-model-name", kModelName, "--log-level", "warn"});
  Api c(server.port());
  auto expect_answers = [&](const std::vector<Generated>& expected, const std::string& when) {
    SCOPED_TRACE(when);
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const Reply r = c.post("/v1/completions", greedy_request(prompts[i], kTokens));
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(ids(r.j["choices"][0]["token_ids"]), expected[i].token_ids) << "prompt " << i;
    }
  };
  auto health_version = [&] { return c.get("/health").j["weights_version"]; };

  expect_answers(answers_a, "model A");
  Reply up = c.post("/update_weights_from_disk", json{{"model_path", b}});
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(up.j["success"], true) << up.body;
  EXPECT_TRUE(up.j["message"].is_string());
  EXPECT_EQ(up.j["weights_version"], 1);
  EXPECT_EQ(health_version(), 1);
  expect_answers(answers_b, "after updating to B");

  for (const auto& [path, what] : std::vector<std::pair<std::string, std::string>>{
           {truncated, "a truncated model.safetensors"},
           {other_shape, "a config.json of another shape"},
           {dir + "/no-such-folder", "a folder that does not exist"}}) {
    SCOPED_TRACE(what);
    const Reply bad = c.post("/update_weights_from_disk", json{{"model_path", path}});
    EXPECT_EQ(bad.status, 400) << bad.body;
    ASSERT_TRUE(bad.j.is_object()) << bad.body;
    EXPECT_EQ(bad.j["success"], false) << bad.body;
    EXPECT_FALSE(bad.j.value("message", "").empty()) << bad.body;
    EXPECT_EQ(health_version(), 1);
    expect_answers(answers_b, "after refusing " + what);
  }
  const Reply no_path = c.post("/update_weights_from_disk", std::string("{\"path\": 1}"));
  EXPECT_EQ(no_path.status, 400) << no_path.body;
  EXPECT_EQ(no_path.j["success"], false);

  // And back to A: version 2.
  up = c.post("/update_weights_from_disk", json{{"model_path", a}});
  ASSERT_EQ(up.status, 200) << up.body;
  EXPECT_EQ(up.j["weights_version"], 2);
  expect_answers(answers_a, "after updating back to A");
  EXPECT_EQ(server.stop(), 0) << server.log();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(GrpoServeLifecycle, SigtermAnswersTheRequestInFlightAndExitsZero) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/sigterm");
  write_model(dir + "/model", 1);
  ServeProcess server(GRPO_SERVE_BINARY, dir + "/model", dir, {"--ignore-eos", "--max-model-len", "128", "--log-level", "warn"});
  Api c(server.port());
  ASSERT_EQ(c.post("/v1/completions", json{{"prompt", "warm up"}, {"max_tokens", 2}}).status, 200);
  Reply in_flight;
  std::thread t([&] {
    Api mine(server.port());
    in_flight = mine.post("/v1/completions", json{{"prompt", "long"}, {"max_tokens", 120}});
  });
  // Wait until the server has taken the request, then stop it.
  for (int i = 0; i < 400 && c.get("/health").j.value("requests", 0) < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const int code = server.stop();
  t.join();
  EXPECT_EQ(code, 0) << server.log();
  EXPECT_EQ(in_flight.status, 200) << in_flight.body;
  if (in_flight.status == 200) EXPECT_EQ(in_flight.j["usage"]["completion_tokens"], 120);
  // Stopped: nothing answers any more.
  EXPECT_EQ(Api(server.port()).get("/health").status, 0);
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// ---- slow and idle clients: a server with short connection limits -------------------------

class GrpoServeSlowClients : public SharedServer<GrpoServeSlowClients> {
 public:
  static constexpr const char* kFolder = "serve/slow-clients";
  static std::vector<std::string> server_options() {
    return {"--header-timeout", "1", "--keep-alive-timeout", "1", "--log-level", "warn"};
  }
};

TEST_F(GrpoServeSlowClients, HeadersNotCompleteWithinTheHeaderTimeoutGet408AndAClose) {
  RawConnection c(server_->port());
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"));
  const RawConnection::Received r = c.read_until_closed(30);
  EXPECT_TRUE(r.closed) << r.bytes;
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 408 ", 0), 0u) << r.bytes;
  EXPECT_TRUE(raw_body(r.bytes).contains("error")) << r.bytes;
}

TEST_F(GrpoServeSlowClients, IdleConnectionsAreClosedWithoutAnAnswer) {
  RawConnection silent(server_->port());  // connects and never sends
  const RawConnection::Received nothing = silent.read_until_closed(30);
  EXPECT_TRUE(nothing.closed);
  EXPECT_EQ(nothing.bytes, "");
  // A keep-alive connection after its answer: closed once idle for the keep-alive timeout.
  RawConnection kept(server_->port());
  ASSERT_TRUE(kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const RawConnection::Received one = kept.read_until_closed(30);
  EXPECT_TRUE(one.closed) << one.bytes;
  EXPECT_EQ(one.bytes.rfind("HTTP/1.1 200 ", 0), 0u) << one.bytes;
  EXPECT_EQ(one.bytes.find("HTTP/1.1", 1), std::string::npos) << "one answer only: " << one.bytes;
}

// httplib's Keep-Alive header states the server's keep-alive timeout, not httplib's own 5 s.
TEST_F(GrpoServeSlowClients, TheKeepAliveHeaderStatesTheKeepAliveTimeout) {
  RawConnection kept(server_->port());
  ASSERT_TRUE(kept.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  const RawConnection::Received r = kept.read_until_closed(30);
  ASSERT_EQ(r.bytes.rfind("HTTP/1.1 200 ", 0), 0u) << r.bytes;
  EXPECT_NE(r.bytes.find("\r\nKeep-Alive: timeout=1, "), std::string::npos) << r.bytes;
}

// The header timeout bounds the headers only: a body that takes longer to arrive is read.
TEST_F(GrpoServeSlowClients, ABodySlowerThanTheHeaderTimeoutIsStillRead) {
  const std::string body = json{{"prompt", "slow upload"}, {"max_tokens", 3}}.dump();
  RawConnection c(server_->port());
  ASSERT_TRUE(c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body.substr(0, 5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(c.send(body.substr(5)));
  const RawConnection::Received r = c.read_until_closed(60);
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 200 ", 0), 0u) << r.bytes;
  EXPECT_EQ(raw_body(r.bytes)["usage"]["completion_tokens"], 3) << r.bytes;
}

TEST(GrpoServeConnections, ConnectionsBeyondMaxConnectionsGet503UntilSomeClose) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/max-connections");
  write_model(dir + "/model", 1);
  ServeProcess server(GRPO_SERVE_BINARY, dir + "/model", dir, {"--max-connections", "2", "--log-level", "warn"});
  {
    RawConnection a(server.port()), b(server.port());  // open, sending nothing: both count
    ASSERT_TRUE(a.connected() && b.connected());
    const Reply refused = Api(server.port()).get("/health");
    expect_error(refused, 503, "", "a third connection");
  }
  // Once those two are gone, the server answers again (it notices the closes asynchronously).
  Reply ok;
  for (int i = 0; i < 100 && ok.status != 200; ++i) {
    ok = Api(server.port()).get("/health");
    if (ok.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(server.stop(), 0) << server.log();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// A refused client that keeps uploading after its 503 is closed once it has sent about 1 MiB
// more (not drained for the whole linger time), and the one thread that watches connections
// goes on meanwhile: another connection's header timeout fires on time.
TEST(GrpoServeConnections, ARefusedClientThatKeepsSendingIsCutOffAndStallsNobody) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/refused-upload");
  write_model(dir + "/model", 1);
  ServeProcess server(GRPO_SERVE_BINARY, dir + "/model", dir,
                      {"--max-connections", "1", "--header-timeout", "1", "--log-level", "warn"});
  RawConnection holder(server.port()), uploader(server.port());  // holder takes the one slot
  ASSERT_TRUE(holder.connected() && uploader.connected());
  ASSERT_TRUE(uploader.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\n"));
  RawConnection::Sent sent;
  std::thread upload([&] { sent = uploader.send_until_closed(std::string(64 << 10, 'x'), std::size_t{1} << 30, 20); });
  RawConnection late(server.port());
  ASSERT_TRUE(late.send("GET /health HTTP/1.1\r\nHost: x\r\n"));  // never completes its headers
  const auto t0 = std::chrono::steady_clock::now();
  const RawConnection::Received r = late.read_until_closed(10);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  upload.join();
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 408 ", 0), 0u) << r.bytes;
  EXPECT_LT(seconds, 4.0) << "the header timeout is 1 s";
  EXPECT_TRUE(sent.closed) << sent.bytes << " bytes sent";
  // 1 MiB drained, plus what the two socket buffers held (a few MiB on loopback).
  EXPECT_LT(sent.bytes, std::size_t{32} << 20);
  EXPECT_EQ(server.stop(), 0) << server.log();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// An open-file limit that cannot be raised to fit --max-connections lowers it: the connections
// beyond get 503 instead of exhausting the descriptors the server needs itself.
TEST(GrpoServeConnections, ALowOpenFileLimitLowersMaxConnections) {
  const std::string dir = grpo::testing::fresh_suite_dir("serve/open-file-limit");
  write_model(dir + "/model", 1);
  const std::string wrapper = dir + "/grpo-serve-ulimit.sh";  // 322 = 2 connections + the 320 reserved
  std::ofstream(wrapper) << "#!/bin/sh\nulimit -n 322 || exit 99\nexec '" GRPO_SERVE_BINARY "' \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  ServeProcess server(wrapper, dir + "/model", dir, {"--log-level", "warn"});
  {
    RawConnection a(server.port()), b(server.port());  // open, sending nothing: both count
    ASSERT_TRUE(a.connected() && b.connected());
    expect_error(Api(server.port()).get("/health"), 503, "", "a third connection");
  }
  // Logged when listening starts (after the port file): read once a connection was answered.
  EXPECT_NE(server.log().find("the open-file limit 322 is below the 1344 that --max-connections 1024 needs: at most 2 "
                              "connections are open at once"),
            std::string::npos)
      << server.log();
  EXPECT_EQ(server.stop(), 0) << server.log();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(GrpoServeConnections, BadConnectionLimitsAreUsageErrors) {
  for (const std::string& bad : {"--header-timeout 0", "--keep-alive-timeout -1", "--max-connections 0", "--header-timeout x"}) {
    SCOPED_TRACE(bad);
    const auto run = grpo::testing::run_command("'" GRPO_SERVE_BINARY "' --model /nonexistent " + bad + " 2>&1");
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find(bad.substr(0, bad.find(' '))), std::string::npos) << run.output;
    EXPECT_EQ(run.output.find("unrecognised"), std::string::npos) << run.output;
  }
}

}  // namespace
