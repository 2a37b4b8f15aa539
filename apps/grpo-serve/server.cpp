// grpo-serve's server (server.h). About 570 lines: the scheduler that feeds the engine, the
// streaming state of a request and the HTTP routes are one flow, kept in one place; the API's
// request and answer shapes are openai_protocol.cpp, the connections (idle and slow clients)
// connection_gate.cpp.
#include "apps/grpo-serve/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "apps/grpo-serve/connection_gate.h"
#include "apps/grpo-serve/openai_protocol.h"
#include "core/model/checkpoint.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/device_info.h"
#include "core/tokenizer/chat_template.h"
#include "grpo/sdk/utf8.h"

namespace grpo::serve {

namespace {

namespace fs = std::filesystem;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The end of the longest prefix of s[0, end) that does not stop inside a multi-byte UTF-8
// character: a streamed delta never splits one (the rest follows with the next token).
std::size_t utf8_safe_end(std::string_view s, std::size_t end) {
  for (std::size_t back = 1; back <= 3 && back <= end; ++back) {
    const auto c = static_cast<unsigned char>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    const std::size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? end - back : end;
  }
  return end;
}

// One HTTP request in flight: its engine requests (one per prompt), their results, and for a
// streamed one the server-sent events not written yet.
struct Job {
  ApiRequest api;
  std::string id;
  std::int64_t created = 0;
  ServedModel model;

  std::mutex m;
  std::condition_variable cv;
  std::vector<sdk::GenerationResult> results;
  std::size_t remaining = 0;  // prompts without a result
  bool done = false;
  std::optional<ApiError> error;

  // Streaming: per choice (prompt * n + sample), what was sent of its decoded bytes and text.
  struct Choice {
    std::size_t sent_bytes = 0, sent_text = 0;
    bool started = false;
  };
  std::vector<Choice> choices;
  std::size_t holdback = 0;  // bytes kept back: the longest stop string - 1 (it may still match)
  std::deque<std::string> events;  // SSE data payloads

  // A text delta (and/or the finish) of choice `index`, as the endpoint's chunk. Under m.
  void push_delta(std::int64_t index, const std::string& text, const char* finish) {
    Choice& c = choices[static_cast<std::size_t>(index)];
    if (api.endpoint == Endpoint::kChat) {
      if (!c.started) {
        json role = json::object();
        role["role"] = "assistant";
        role["content"] = "";
        events.push_back(chat_chunk(id, created, model, index, role, nullptr).dump(-1, ' ', false, json::error_handler_t::replace));
      }
      json delta = json::object();
      if (!text.empty()) delta["content"] = text;
      if (!text.empty() || finish) events.push_back(chat_chunk(id, created, model, index, delta, finish).dump(-1, ' ', false, json::error_handler_t::replace));
    } else if (!text.empty() || finish) {
      events.push_back(completion_chunk(id, created, model, index, text, finish).dump(-1, ' ', false, json::error_handler_t::replace));
    }
    c.started = true;
  }
};

// The engine's request feed: HTTP threads submit jobs, the engine thread takes their requests
// between decode steps and hands back tokens and results.
class Scheduler final : public native::RequestFeed {
 public:
  void submit(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(m_);
    if (closed_) throw ApiError(503, "the server is shutting down", "", "server_error");
    for (std::size_t p = 0; p < job->api.prompts.size(); ++p) queue_.push_back({job, p});
    cv_.notify_all();
  }

  // Runs `task` on the engine thread once nothing is in flight (new requests wait meanwhile);
  // returns when it ran, rethrowing its exception.
  void run_quiet(std::function<void()> task) {
    auto packaged = std::make_shared<std::packaged_task<void()>>(std::move(task));
    std::future<void> done = packaged->get_future();
    {
      std::lock_guard<std::mutex> lock(m_);
      if (closed_) throw ApiError(503, "the server is shutting down", "", "server_error");
      quiet_.push_back(packaged);
      cv_.notify_all();
    }
    done.get();
  }

  void close() {
    std::lock_guard<std::mutex> lock(m_);
    closed_ = true;
    cv_.notify_all();
  }

  // After the engine failed (an exception out of serve()): the requests it held and the queued
  // ones fail with `message`; serve() starts again with handles from 0.
  void fail_in_flight(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(m_);
      for (auto& [job, prompt] : queue_) handles_.emplace(next_handle_++, std::make_pair(job, prompt));
      queue_.clear();
    }
    for (auto& [handle, entry] : handles_) {
      Job& job = *entry.first;
      std::lock_guard<std::mutex> lock(job.m);
      if (!job.error) job.error.emplace(500, "generation failed: " + message, "", "server_error");
      finish_job(job);
    }
    handles_.clear();
    next_handle_ = 0;
  }

  bool take(bool idle, std::vector<sdk::GenerationRequest>& incoming) override {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      if (idle && !quiet_.empty()) {
        auto tasks = std::move(quiet_);
        quiet_.clear();
        lock.unlock();
        for (auto& task : tasks) (*task)();
        lock.lock();
        continue;
      }
      if (!quiet_.empty()) return !closed_;  // let the requests in flight finish first
      if (!queue_.empty()) {
        for (auto& [job, prompt] : queue_) {
          handles_.emplace(next_handle_++, std::make_pair(job, prompt));
          incoming.push_back(job->api.prompts[prompt]);
        }
        queue_.clear();
        return !closed_;
      }
      if (!idle || closed_) return !closed_;
      cv_.wait(lock);
    }
  }

  void on_token(std::uint64_t handle, std::int64_t sample, const sdk::GeneratedSample&, std::string_view text) override {
    const auto it = handles_.find(handle);
    if (it == handles_.end()) return;
    Job& job = *it->second.first;
    if (!job.api.stream) return;
    const auto index = static_cast<std::int64_t>(it->second.second) * job.api.n + sample;
    std::lock_guard<std::mutex> lock(job.m);
    Job::Choice& c = job.choices[static_cast<std::size_t>(index)];
    const std::size_t end = utf8_safe_end(text, text.size() > job.holdback ? text.size() - job.holdback : 0);
    if (end <= c.sent_bytes) return;
    const std::string delta = sdk::to_valid_utf8(text.substr(c.sent_bytes, end - c.sent_bytes));
    c.sent_bytes = end;
    c.sent_text += delta.size();
    job.push_delta(index, delta, nullptr);
    job.cv.notify_all();
  }

  void on_result(std::uint64_t handle, sdk::GenerationResult result) override {
    auto node = handles_.extract(handle);
    if (node.empty()) return;
    Job& job = *node.mapped().first;
    const std::size_t prompt = node.mapped().second;
    std::lock_guard<std::mutex> lock(job.m);
    if (!result.status.is_ok()) {
      if (!job.error)
        job.error.emplace(result.status.code() == sdk::StatusCode::kInvalidArgument ? 400 : 500, result.status.message());
    } else if (job.api.stream) {
      for (std::size_t k = 0; k < result.samples.size(); ++k) {
        const auto index = static_cast<std::int64_t>(prompt) * job.api.n + static_cast<std::int64_t>(k);
        const Job::Choice& c = job.choices[static_cast<std::size_t>(index)];
        const std::string& text = result.samples[k].text;
        job.push_delta(index, text.size() > c.sent_text ? text.substr(c.sent_text) : std::string(),
                       finish_reason_text(result.samples[k].finish_reason));
      }
    }
    job.results[prompt] = std::move(result);
    if (--job.remaining == 0) finish_job(job);
    job.cv.notify_all();
  }

 private:
  // Under job.m: the last events of a streamed job, then done.
  static void finish_job(Job& job) {
    if (job.done) return;
    if (job.api.stream) {
      if (job.error) job.events.push_back(error_body(*job.error).dump(-1, ' ', false, json::error_handler_t::replace));
      else if (job.api.include_usage)
        job.events.push_back(usage_chunk(job.api, job.id, job.created, job.model, usage_json(job.api, job.results)).dump(-1, ' ', false, json::error_handler_t::replace));
      job.events.push_back("[DONE]");
    }
    job.done = true;
    job.cv.notify_all();
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Job>, std::size_t>> queue_;  // (job, prompt) not taken yet
  std::vector<std::shared_ptr<std::packaged_task<void()>>> quiet_;
  bool closed_ = false;
  // Engine thread only: what each engine handle belongs to.
  std::unordered_map<std::uint64_t, std::pair<std::shared_ptr<Job>, std::size_t>> handles_;
  std::uint64_t next_handle_ = 0;
};

// The fields two configurations must share for one's weights to replace the other's.
std::string config_mismatch(const core::ModelConfig& a, const core::ModelConfig& b) {
  auto differs = [](const char* name, auto x, auto y) {
    return x == y ? std::string() : std::string(name) + " " + std::to_string(y) + " (serving " + std::to_string(x) + ")";
  };
  if (a.architecture != b.architecture)
    return std::string("architecture ") + core::architecture_name(b.architecture) + " (serving " + core::architecture_name(a.architecture) + ")";
  for (const std::string& d :
       {differs("vocab_size", a.vocab_size, b.vocab_size), differs("hidden_size", a.hidden_size, b.hidden_size),
        differs("intermediate_size", a.intermediate_size, b.intermediate_size),
        differs("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers),
        differs("num_attention_heads", a.num_attention_heads, b.num_attention_heads),
        differs("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads), differs("head_dim", a.head_dim, b.head_dim),
        differs("rope_theta", a.rope_theta, b.rope_theta), differs("tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings)})
    if (!d.empty()) return d;
  return "";
}

// cpp-httplib 0.11 listens with a backlog of 5, a constant compiled into Debian's library: a
// burst of more connections (a trainer's 64 requests of one step) overflows it, and the clients
// beyond it wait for a SYN retransmit, a whole second. listen() again on the bound socket with
// the system's maximum; the socket is found among our descriptors by its port.
void widen_listen_backlog(int port) {
  for (int fd = 0; fd < 4096; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    const int bound = addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                      : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                   : -1;
    if (bound == port && ::listen(fd, SOMAXCONN) == 0) return;
  }
  spdlog::warn("could not widen the listen backlog of port {}: bursts of connections may wait a second", port);
}

}  // namespace

struct Server::Impl {
  ServeSettings settings;
  core::ModelConfig config;
  torch::Dtype dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  const core::Tokenizer* tokenizer = nullptr;  // the engine's
  std::optional<core::ChatTemplate> chat_template;
  std::optional<native::Engine> engine;
  ServedModel served;
  Scheduler scheduler;
  GatedHttpServer http;
  std::thread engine_thread;
  std::string id_prefix;
  std::atomic<std::uint64_t> next_id{0};
  std::mutex update_m;  // one weight update at a time
  std::mutex weights_m;
  std::string weights_path;
  std::int64_t weights_version = 0;
  std::atomic<std::uint64_t> requests_served{0};
  std::atomic<bool> stop_requested{false};

  std::string new_id(const char* kind) { return std::string(kind) + id_prefix + std::to_string(next_id++); }

  static void send_json(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }
  static void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_body(e)); }

  // Bearer-token check of --api-key; false (and a 401 answer) when it fails.
  bool authorized(const httplib::Request& req, httplib::Response& res) const {
    if (settings.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + settings.api_key) return true;
    send_error(res, ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'", "", "",
                             "invalid_api_key"));
    return false;
  }

  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    if (!authorized(req, res)) return;
    auto job = std::make_shared<Job>();
    job->created = unix_now();
    job->model = served;
    try {
      job->id = new_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
      job->api = endpoint == Endpoint::kChat ? parse_chat_request(req.body, served, *tokenizer, *chat_template, job->id)
                                             : parse_completion_request(req.body, served, *tokenizer, job->id);
      job->results.resize(job->api.prompts.size());
      job->remaining = job->api.prompts.size();
      job->choices.resize(job->api.prompts.size() * static_cast<std::size_t>(job->api.n));
      for (const std::string& stop : job->api.prompts[0].sampling.stop_strings)
        job->holdback = std::max(job->holdback, stop.size() - 1);
      scheduler.submit(job);
    } catch (const ApiError& e) {
      return send_error(res, e);
    } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type deep inside
      return send_error(res, ApiError(400, std::string("invalid request: ") + e.what()));
    }
    ++requests_served;
    if (job->api.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [job](std::size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(job->m);
        job->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return !job->events.empty() || job->done; });
        std::deque<std::string> out;
        out.swap(job->events);
        const bool done = job->done;
        lock.unlock();
        for (const std::string& e : out) {
          const std::string line = "data: " + e + "\n\n";
          if (!sink.write(line.data(), line.size())) return false;  // the client left
        }
        if (done) sink.done();
        return true;
      });
      return;
    }
    std::unique_lock<std::mutex> lock(job->m);
    job->cv.wait(lock, [&] { return job->done; });
    if (job->error) return send_error(res, *job->error);
    send_json(res, 200,
              endpoint == Endpoint::kChat ? chat_response(job->api, job->results, job->id, job->created, served, *tokenizer)
                                          : completion_response(job->api, job->results, job->id, job->created, served, *tokenizer));
  }

  // SGLang's /update_weights_from_disk: {"model_path": DIR} -> {"success", "message"}.
  void update_weights(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto fail = [&](int status, const std::string& message) {
      json body = json::object();
      body["success"] = false;
      body["message"] = message;
      send_json(res, status, body);
    };
    const json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("model_path") || !j["model_path"].is_string() || j["model_path"].get<std::string>().empty())
      return fail(400, "expected a JSON object {\"model_path\": \"DIR\"}");
    if (j.contains("abort_all_requests") && j["abort_all_requests"].is_boolean() && j["abort_all_requests"].get<bool>())
      return fail(400, "abort_all_requests is not supported: the update waits for the requests in flight");
    std::string path = j["model_path"].get<std::string>();
    std::error_code ec;
    if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json", ec))
      if (const auto latest = core::latest_checkpoint(path)) path = *latest;  // a run directory: its newest checkpoint
    std::lock_guard<std::mutex> one(update_m);
    const auto t0 = std::chrono::steady_clock::now();
    core::NamedTensorList tensors;
    try {
      // Read and checked here, while generation goes on.
      core::LoadedModel fresh = core::load_model(path, dtype, torch::kCPU);
      if (const std::string d = config_mismatch(config, fresh.config); !d.empty())
        return fail(400, path + "/config.json does not fit the served model: " + d);
      tensors = core::model_state_tensors(fresh.model);
    } catch (const std::exception& e) {
      return fail(400, std::string("cannot load ") + path + ": " + e.what());
    }
    try {
      scheduler.run_quiet([&] { core::load_model_weights(engine->model(), tensors, path); });
    } catch (const ApiError& e) {
      return fail(e.status(), e.what());
    } catch (const std::exception& e) {
      return fail(400, std::string("cannot load ") + path + ": " + e.what());
    }
    std::int64_t version = 0;
    {
      std::lock_guard<std::mutex> lock(weights_m);
      weights_path = path;
      version = ++weights_version;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    spdlog::info("weights updated from {} (version {}, {:.2f} s)", path, version, seconds);
    json body = json::object();
    body["success"] = true;
    body["message"] = "Succeeded to update model weights.";
    body["num_paused_requests"] = 0;
    body["weights_version"] = version;
    body["load_s"] = seconds;
    send_json(res, 200, body);
  }

  void routes() {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      json body = json::object();
      body["status"] = "ok";
      body["model"] = served.name;
      std::lock_guard<std::mutex> lock(weights_m);
      body["weights_path"] = weights_path;
      body["weights_version"] = weights_version;
      body["requests"] = requests_served.load();
      send_json(res, 200, body);
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      json card = json::object();
      card["id"] = served.name;
      card["object"] = "model";
      card["created"] = unix_now();
      card["owned_by"] = "grpo-cpp";
      card["root"] = settings.model_dir;
      card["max_model_len"] = served.max_model_len;
      json body = json::object();
      body["object"] = "list";
      body["data"] = json::array({card});
      send_json(res, 200, body);
    });
    http.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Endpoint::kCompletions); });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Endpoint::kChat); });
    // vLLM's and SGLang's /tokenize: {"prompt": TEXT} -> {"tokens", "count", "max_model_len"}; the
    // openai backend compares it with its own tokenizer.
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      const json j = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
        return send_error(res, ApiError(400, "expected a JSON object {\"prompt\": \"text\"}", "prompt"));
      core::EncodeOptions options;
      if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_boolean())
        return send_error(res, ApiError(400, "'add_special_tokens' must be true or false", "add_special_tokens"));
      options.add_special_tokens = j.value("add_special_tokens", true);
      std::vector<int> ids;
      try {
        ids = tokenizer->encode(j["prompt"].get<std::string>(), options);
      } catch (const core::TokenizerError& e) {
        return send_error(res, ApiError(400, std::string("cannot tokenize the prompt: ") + e.what(), "prompt"));
      }
      json body = json::object();
      body["tokens"] = ids;
      body["count"] = ids.size();
      body["max_model_len"] = served.max_model_len;
      send_json(res, 200, body);
    });
    http.Post("/update_weights_from_disk", [this](const httplib::Request& req, httplib::Response& res) { update_weights(req, res); });
    // Unrouted paths and handlers that set no body: an OpenAI-style error body.
    const httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req, httplib::Response& res) {
      if (res.body.empty())
        send_error(res, ApiError(res.status, res.status == 404 ? "not found: " + req.method + " " + req.path
                                                               : "HTTP " + std::to_string(res.status)));
      return httplib::Server::HandlerResponse::Handled;
    };
    http.set_error_handler(on_error);
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, "internal error: " + what, "", "server_error"));
    });
  }
};

Server::Server(ServeSettings settings) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.settings = std::move(settings);
  const ServeSettings& cfg = s.settings;
  if (cfg.dtype != "float32" && cfg.dtype != "bfloat16")
    throw std::invalid_argument("--dtype: expected float32 or bfloat16, got '" + cfg.dtype + "'");
  s.dtype = cfg.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  try {
    s.device = core::parse_device(cfg.device);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--device: ") + e.what());
  }
  const auto attention = core::parse_attention_backend(cfg.attention);
  if (!attention)
    throw std::invalid_argument("--attention: expected one of " + std::string(core::attention_backend_choices()) +
                                ", got '" + cfg.attention + "'");
  core::LoadedModel loaded = core::load_model(cfg.model_dir, s.dtype, s.device);
  loaded.model->set_attention_backend(*attention);
  s.config = loaded.config;
  std::optional<core::Tokenizer> tokenizer(core::Tokenizer::load(cfg.model_dir));
  auto eos = native::eos_token_ids(loaded, tokenizer);
  s.engine.emplace(loaded.model, std::move(tokenizer), std::move(eos), cfg.engine);
  s.tokenizer = &*s.engine->tokenizer();
  // The whole KV cache now: a size the device cannot hold fails the start, not the first request.
  s.engine->cache_for(s.engine->max_model_len());
  s.chat_template.emplace(core::ChatTemplate::resolve(cfg.chat_template, *s.tokenizer));
  if (s.chat_template->fell_back())
    spdlog::warn("{} has no chat template; /v1/chat/completions renders with the built-in chatml", cfg.model_dir);
  s.served.name = cfg.served_model_name.empty() ? fs::path(cfg.model_dir).lexically_normal().filename().string()
                                                : cfg.served_model_name;
  if (s.served.name.empty() || s.served.name == ".") s.served.name = fs::absolute(cfg.model_dir).lexically_normal().filename().string();
  s.served.max_model_len = s.engine->max_model_len();
  s.served.vocab_size = loaded.config.vocab_size;
  s.weights_path = cfg.model_dir;
  std::random_device rd;
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%08x", static_cast<unsigned>(rd()));
  s.id_prefix = std::string(prefix) + "-";
  ConnectionLimits limits;
  limits.header_timeout_s = cfg.header_timeout_s;
  limits.keep_alive_timeout_s = cfg.keep_alive_timeout_s;
  limits.max_connections = cfg.max_connections;
  limits.request_threads = std::max(1, cfg.http_threads);
  s.http.set_connection_limits(limits, [](int status, const std::string& message) {
    return error_body(ApiError(status, message)).dump(-1, ' ', false, json::error_handler_t::replace);
  });
  s.http.set_payload_max_length(64ull << 20);
  s.http.set_read_timeout(60, 0);
  s.http.set_write_timeout(60, 0);
  s.routes();
}

Server::~Server() {
  if (impl_ && impl_->engine_thread.joinable()) {
    impl_->scheduler.close();
    impl_->engine_thread.join();
  }
}

const std::string& Server::served_model_name() const { return impl_->served.name; }

void Server::run(const std::function<void(int)>& on_listening) {
  Impl& s = *impl_;
  const ServeSettings& cfg = s.settings;
  const int port = cfg.port == 0 ? s.http.bind_to_any_port(cfg.host) : (s.http.bind_to_port(cfg.host, cfg.port) ? cfg.port : -1);
  if (port < 0) throw std::runtime_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + " (in use, or not an address of this host)");
  widen_listen_backlog(port);
  s.engine_thread = std::thread([&s] {
    for (;;) {
      try {
        s.engine->serve(s.scheduler);
        return;
      } catch (const std::exception& e) {
        // The requests in flight and those waiting fail (a failure before the first take()
        // would otherwise leave them waiting for ever); a pause keeps a persistent failure
        // from spinning.
        spdlog::error("generation failed: {}; the requests in flight get an error and serving goes on", e.what());
        s.scheduler.fail_in_flight(e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
  });
  on_listening(port);
  if (!s.stop_requested) s.http.listen_after_bind();
  s.scheduler.close();
  s.engine_thread.join();
}

void Server::stop() {
  // httplib's stop() does nothing before listen_after_bind() runs: keep asking until it took.
  impl_->stop_requested = true;
  for (int i = 0; i < 100 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  impl_->http.stop();
}

}  // namespace grpo::serve
