// The `openai` rollout backend: generation through an OpenAI-compatible server (grpo-serve,
// vLLM, SGLang, llama.cpp's server), and weight sync by writing the trainer's weights as a
// Hugging Face folder to a shared path and asking the server to reload it. Options and the
// fields each server kind is sent and read: README.md here and docs/serving.md.
//
// Why /v1/completions with token-id prompts: the trainer has already rendered and tokenized
// every prompt, and it needs the sampled token ids back (not text to re-tokenize, which does
// not round-trip), with one log-prob per token.
#include <grpo/sdk/torch.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>

#include "core/model/lora.h"
#include "core/model/model_config.h"
#include "core/model/safetensors_torch.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/fs.h"
#include "plugins/shared/openai_client/openai_client.h"

namespace {

namespace fs = std::filesystem;
namespace sdk = ::grpo::sdk;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// In every folder the backend writes: what makes weight_sync_dir safe to replace.
constexpr const char* kSyncMarker = ".grpo-openai-sync";

// What differs between servers: how they return token ids and log-probs, and how they reload.
enum class ServerKind { kGrpo, kVllm, kSglang, kLlamaCpp };

// The token ids and log-probs of one choice, from whichever fields the server filled.
void read_choice(const json& c, sdk::GeneratedSample& out, const std::string& where) {
  const json* lp = c.contains("logprobs") && c["logprobs"].is_object() ? &c["logprobs"] : nullptr;
  if (c.contains("token_ids") && c["token_ids"].is_array()) {  // grpo-serve, vLLM >= 0.10.2, SGLang (return_token_ids)
    out.token_ids = c["token_ids"].get<std::vector<std::int64_t>>();
  } else if (lp && lp->contains("content") && (*lp)["content"].is_array()) {  // llama.cpp: logprobs.content[].id
    for (const json& e : (*lp)["content"]) {
      if (!e.contains("id") || !e["id"].is_number_integer()) throw std::runtime_error(where + ": logprobs.content[] without an id");
      out.token_ids.push_back(e["id"].get<std::int64_t>());
    }
  } else if (lp && lp->contains("tokens") && (*lp)["tokens"].is_array()) {  // vLLM's return_tokens_as_token_ids: "token_id:N"
    for (const json& t : (*lp)["tokens"]) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s.rfind("token_id:", 0) != 0)
        throw std::runtime_error(where + ": the server returned no token ids (no choices[].token_ids; logprobs.tokens are text, "
                                         "not \"token_id:N\"). vLLM needs >= 0.10.2 or --return-tokens-as-token-ids; "
                                         "SGLang a release with return_token_ids");
      out.token_ids.push_back(std::stoll(s.substr(9)));
    }
  } else {
    throw std::runtime_error(where + ": the server returned no token ids (choices[].token_ids or logprobs); see docs/serving.md "
                                     "for the server versions that do");
  }
  if (lp && lp->contains("token_logprobs") && (*lp)["token_logprobs"].is_array()) {
    // A null is a NaN or infinity the server could not write as JSON: never a log-prob of 0.
    for (const json& v : (*lp)["token_logprobs"]) {
      if (!v.is_number()) throw std::runtime_error(where + ": a log-prob is " + v.dump() + ", not a number");
      out.logprobs.push_back(v.get<float>());
    }
  } else if (lp && lp->contains("content") && (*lp)["content"].is_array()) {
    for (const json& e : (*lp)["content"]) {
      if (!e.contains("logprob") || !e["logprob"].is_number())
        throw std::runtime_error(where + ": logprobs.content[] without a numeric logprob");
      out.logprobs.push_back(e["logprob"].get<float>());
    }
  } else {
    throw std::runtime_error(where + ": the server returned no log-probs (logprobs.token_logprobs or logprobs.content)");
  }
  if (out.logprobs.size() != out.token_ids.size())
    throw std::runtime_error(where + ": " + std::to_string(out.token_ids.size()) + " token ids but " +
                             std::to_string(out.logprobs.size()) + " log-probs");
  out.text = c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
  const std::string finish = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
  if (finish == "stop") out.finish_reason = sdk::FinishReason::kStop;
  else if (finish == "length") out.finish_reason = sdk::FinishReason::kLength;
  else throw std::runtime_error(where + ": finish_reason \"" + finish + "\" (expected stop or length)");
}

class OpenAIBackend : public sdk::RolloutBackend {
 public:
  explicit OpenAIBackend(const sdk::ConfigView& cfg) {
    const std::string kind = cfg.get_choice("server", "grpo", {"grpo", "vllm", "sglang", "llamacpp"});
    kind_ = kind == "grpo" ? ServerKind::kGrpo : kind == "vllm" ? ServerKind::kVllm : kind == "sglang" ? ServerKind::kSglang : ServerKind::kLlamaCpp;
    grpo::openai::ClientOptions client;
    client.base_url = cfg.require_string("url");
    const std::string key_env = cfg.get_string("api_key_env", "");
    if (!key_env.empty()) {
      const char* key = std::getenv(key_env.c_str());
      if (!key || !*key) cfg.fail("api_key_env", "the environment variable " + key_env + " is not set");
      client.api_key = key;
    }
    client.request_timeout_s = cfg.get_double("timeout_s", 600.0);
    client.connect_timeout_s = std::min(10.0, client.request_timeout_s);
    client.max_retries = static_cast<int>(cfg.get_int("max_retries", 3));
    client.retry_backoff_s = cfg.get_double("retry_backoff_s", 1.0);
    // A generation that outlives timeout_s is still running on the server: sending it again
    // would double the load (grpo-serve, like vLLM, cannot take a request back).
    client.retry_read_errors = false;
    if (!(client.request_timeout_s > 0)) cfg.fail("timeout_s", "must be > 0");
    if (client.max_retries < 0) cfg.fail("max_retries", "must be >= 0");
    max_concurrency_ = cfg.get_int("max_concurrency", 64);
    if (max_concurrency_ < 1) cfg.fail("max_concurrency", "must be >= 1, got " + std::to_string(max_concurrency_));
    try {
      client_.emplace(client);
    } catch (const std::invalid_argument& e) {
      cfg.fail("url", e.what());
    }
    model_dir_ = cfg.require_string("model");
    const std::string tokenizer_path = cfg.get_string("tokenizer", model_dir_);
    try {
      config_ = grpo::core::load_model_config((fs::path(model_dir_) / "config.json").string());
    } catch (const std::exception& e) {
      cfg.fail("model", e.what());
    }
    try {
      tokenizer_.emplace(grpo::core::Tokenizer::load(tokenizer_path));
    } catch (const std::exception& e) {
      cfg.fail("tokenizer", e.what());
    }
    const std::string sync = cfg.get_choice("weight_sync", kind_ == ServerKind::kLlamaCpp ? "none" : "reload", {"reload", "none"});
    sync_ = sync == "reload";
    if (sync_ && kind_ == ServerKind::kLlamaCpp)
      cfg.fail("weight_sync", "llama.cpp's server cannot reload Hugging Face weights: use weight_sync: none (a fixed model)");
    sync_dir_ = cfg.get_string("weight_sync_dir", (fs::temp_directory_path() / ("grpo-openai-weights-" + std::to_string(::getpid()))).string());
    sync_dir_ = fs::absolute(sync_dir_).lexically_normal().string();
    if (sync_) {
      // The folder is replaced at every sync and removed at the end: never one that holds
      // anything else (the model itself, say).
      const std::string model_abs = fs::absolute(model_dir_).lexically_normal().string();
      if (sync_dir_ == model_abs || model_abs.rfind(sync_dir_ + "/", 0) == 0 || sync_dir_.rfind(model_abs + "/", 0) == 0)
        cfg.fail("weight_sync_dir", "'" + sync_dir_ + "' overlaps the model folder " + model_abs +
                                        "; it is replaced at every step: give a folder of its own");
      std::error_code ec;
      if (fs::exists(sync_dir_, ec) && !fs::is_empty(sync_dir_, ec) && !fs::exists(fs::path(sync_dir_) / kSyncMarker, ec))
        cfg.fail("weight_sync_dir", "'" + sync_dir_ + "' exists and was not written by this backend (no " + kSyncMarker +
                                        "); it is replaced at every step: give an empty or new folder");
    }

    // The server: its model name, context, and whether it tokenizes as the trainer does.
    try {
      const json models = client_->get("/v1/models");
      if (!models.contains("data") || !models["data"].is_array() || models["data"].empty())
        cfg.fail("url", client_->url("/v1/models") + " lists no model");
      served_ = cfg.get_string("served_model", models["data"][0].value("id", ""));
      bool found = false;
      for (const json& m : models["data"])
        if (m.value("id", "") == served_) {
          found = true;
          if (m.contains("max_model_len") && m["max_model_len"].is_number_integer()) max_model_len_ = m["max_model_len"].get<std::int64_t>();
        }
      if (!found) cfg.fail("served_model", "the server at " + client_->options().base_url + " does not serve '" + served_ + "' (it lists " + models["data"].dump() + ")");
      check_tokenizer(cfg);
    } catch (const grpo::openai::HttpError& e) {
      cfg.fail("url", std::string("cannot reach the server: ") + e.what());
    }
    sdk::log_info("openai rollout: " + client_->options().base_url + " serves '" + served_ + "'" +
                  (max_model_len_ > 0 ? " (max_model_len " + std::to_string(max_model_len_) + ")" : std::string()) +
                  (sync_ ? "; weights sync through " + sync_dir_ : "; no weight sync"));
  }

  ~OpenAIBackend() override {
    if (sync_ && wrote_) {
      std::error_code ec;
      fs::remove_all(sync_dir_, ec);
    }
  }

  std::vector<sdk::GenerationResult> generate(const std::vector<sdk::GenerationRequest>& requests) override {
    const auto t0 = Clock::now();
    std::vector<sdk::GenerationResult> results(requests.size());
    std::atomic<std::size_t> next{0};
    std::atomic<std::int64_t> failed{0}, tokens{0};
    auto work = [&] {
      for (std::size_t i = next++; i < requests.size(); i = next++) {
        results[i] = one(requests[i]);
        if (!results[i].status.is_ok()) ++failed;
        for (const auto& s : results[i].samples) tokens += static_cast<std::int64_t>(s.token_ids.size());
      }
    };
    const auto workers = static_cast<std::size_t>(std::min<std::int64_t>(max_concurrency_, static_cast<std::int64_t>(requests.size())));
    std::vector<std::thread> pool;
    for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    std::lock_guard<std::mutex> lock(m_);
    wall_s_ = seconds_since(t0);
    requests_ = static_cast<std::int64_t>(requests.size());
    failed_ = failed;
    tokens_ = tokens;
    return results;
  }

  void update_weights(const sdk::NamedTensors& weights) override {
    if (!sync_) return;
    const auto t0 = Clock::now();
    if (base_.empty()) {  // every parameter of the folder: a LoRA run sends only the ones it changes
      for (auto& [name, tensor] : grpo::core::load_checkpoint_tensors(model_dir_)) base_.emplace(name, tensor);
    }
    for (const auto& [name, tensor] : weights) {
      auto it = base_.find(name);
      if (it == base_.end()) {
        if (config_.tie_word_embeddings && name == "lm_head.weight") continue;
        throw std::invalid_argument("update_weights: '" + name + "' is not a tensor of " + model_dir_);
      }
      if (tensor.sizes() != it->second.sizes())
        throw std::invalid_argument("update_weights: '" + name + "' has another shape than in " + model_dir_);
    }
    for (const auto& [name, tensor] : weights)
      if (auto it = base_.find(name); it != base_.end()) it->second = tensor.detach().to(torch::kCPU, it->second.scalar_type()).contiguous();
    // The folder the server reads: config.json (+ generation_config.json) and the weights,
    // written into a staging folder that then replaces the old one, so a server never reads
    // a half-written checkpoint.
    const std::string staging = sync_dir_ + ".staging";
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::create_directories(staging);
    grpo::core::NamedTensorList list(base_.begin(), base_.end());
    grpo::core::save_checkpoint_tensors(staging, list, 5'000'000'000ULL);
    for (const char* file : {"config.json", "generation_config.json"})
      if (fs::exists(fs::path(model_dir_) / file)) fs::copy_file(fs::path(model_dir_) / file, fs::path(staging) / file);
    grpo::core::atomic_write_file((fs::path(staging) / kSyncMarker).string(), "written by the openai rollout backend\n");
    grpo::core::replace_directory(staging, sync_dir_);
    wrote_ = true;
    const double write_s = seconds_since(t0);
    const auto t1 = Clock::now();
    reload();
    std::lock_guard<std::mutex> lock(m_);
    sync_write_s_ = write_s;
    sync_reload_s_ = seconds_since(t1);
    ++syncs_;
  }

  std::vector<sdk::Metric> metrics() const override {
    std::lock_guard<std::mutex> lock(m_);
    std::vector<sdk::Metric> out;
    auto add = [&](const char* name, double v) { out.push_back({name, at::scalar_tensor(v, at::kDouble)}); };
    add("rollout/wall_s", wall_s_);
    add("rollout/http_requests", static_cast<double>(requests_));
    add("rollout/failed_requests", static_cast<double>(failed_));
    add("rollout/completion_tokens", static_cast<double>(tokens_));
    add("rollout/tokens_per_s", wall_s_ > 0 ? static_cast<double>(tokens_) / wall_s_ : 0.0);
    if (sync_) {
      add("rollout/weight_sync_write_s", sync_write_s_);
      add("rollout/weight_sync_reload_s", sync_reload_s_);
      add("rollout/weight_syncs", static_cast<double>(syncs_));
    }
    return out;
  }

 private:
  // The server's tokenizer must be ours: the prompts go as token ids and the samples come back
  // as token ids, so a different vocabulary silently trains on nonsense.
  void check_tokenizer(const sdk::ConfigView& cfg) {
    const std::string probe = "Hello, world! 12345 + 678 = ?\n\tüñïçødé 数学 <tool_call>{\"a\": 1}</tool_call>";
    json body = json::object();
    if (kind_ == ServerKind::kLlamaCpp) {
      body["content"] = probe;
      body["add_special"] = false;
    } else {
      body["model"] = served_;
      body["prompt"] = probe;
      body["add_special_tokens"] = false;
    }
    json answer;
    try {
      answer = client_->post("/tokenize", body);
    } catch (const grpo::openai::HttpError& e) {
      if (e.status() == 404) {
        sdk::log_warn("openai rollout: the server has no /tokenize; its tokenizer could not be compared with the trainer's");
        return;
      }
      throw;
    }
    if (!answer.contains("tokens") || !answer["tokens"].is_array())
      cfg.fail("url", client_->url("/tokenize") + " answered without \"tokens\": " + answer.dump().substr(0, 200));
    std::vector<std::int64_t> theirs;
    for (const json& t : answer["tokens"]) theirs.push_back(t.is_number_integer() ? t.get<std::int64_t>() : -1);
    const std::vector<int> ours_int = tokenizer_->encode(probe);
    const std::vector<std::int64_t> ours(ours_int.begin(), ours_int.end());
    if (theirs != ours) {
      std::size_t at = 0;
      while (at < ours.size() && at < theirs.size() && ours[at] == theirs[at]) ++at;
      cfg.fail("url", "the server's model '" + served_ + "' tokenizes differently from the trainer's tokenizer (" +
                          (cfg.has("tokenizer") ? cfg.get_string("tokenizer", "") : model_dir_) + "): a probe text gives " +
                          std::to_string(theirs.size()) + " tokens there and " + std::to_string(ours.size()) +
                          " here, first difference at token " + std::to_string(at) +
                          ". Serve the same model (or its checkpoint) that model.path names");
    }
  }

  sdk::GenerationResult one(const sdk::GenerationRequest& r) {
    sdk::GenerationResult result;
    result.request_id = r.id;
    const auto problems = sdk::sampling_problems(r.sampling, r.n);
    if (!problems.empty()) {
      result.status = sdk::Status::invalid_argument("request '" + r.id + "': " + problems.front().field + " " + problems.front().message);
      return result;
    }
    json body = json::object();
    body["model"] = served_;
    body["prompt"] = r.prompt_ids;
    body["n"] = r.n;
    // The rest of the context at most, as the native engine; a prompt that fills it is the
    // server's to refuse (with its own message).
    body["max_tokens"] = max_model_len_ > 0 ? std::max<std::int64_t>(1, std::min<std::int64_t>(r.sampling.max_new_tokens,
                                                                                             max_model_len_ - static_cast<std::int64_t>(r.prompt_ids.size())))
                                            : r.sampling.max_new_tokens;
    body["temperature"] = r.sampling.temperature;
    body["top_p"] = r.sampling.top_p;
    if (r.sampling.top_k > 0) body["top_k"] = r.sampling.top_k;
    if (r.sampling.min_p > 0) body["min_p"] = r.sampling.min_p;
    if (r.seed) body["seed"] = static_cast<std::int64_t>(*r.seed & 0x7FFFFFFFFFFFFFFFULL);
    if (!r.sampling.stop_strings.empty()) body["stop"] = r.sampling.stop_strings;
    if (!r.sampling.stop_token_ids.empty()) body["stop_token_ids"] = r.sampling.stop_token_ids;
    body["logprobs"] = kind_ == ServerKind::kLlamaCpp ? 1 : 0;  // llama.cpp returns none for 0
    if (kind_ != ServerKind::kLlamaCpp) {
      body["return_token_ids"] = true;
      body["add_special_tokens"] = false;
      body["skip_special_tokens"] = true;
    }
    try {
      const json answer = client_->post("/v1/completions", body);
      // llama.cpp answers n > 1 with a list of completion objects, one choice each.
      json choices = json::array();
      for (const json& part : answer.is_array() ? answer : json::array({answer})) {
        if (!part.is_object() || !part.contains("choices") || !part["choices"].is_array())
          throw std::runtime_error("the answer has no choices: " + answer.dump().substr(0, 200));
        for (const json& c : part["choices"]) choices.push_back(c);
      }
      if (static_cast<std::int64_t>(choices.size()) != r.n)
        throw std::runtime_error(std::to_string(choices.size()) + " choices for n = " + std::to_string(r.n));
      result.samples.resize(static_cast<std::size_t>(r.n));
      std::vector<bool> seen(result.samples.size(), false);
      for (std::size_t i = 0; i < choices.size(); ++i) {
        const json& c = choices[i];
        const std::int64_t index = c.contains("index") && c["index"].is_number_integer() ? c["index"].get<std::int64_t>() : static_cast<std::int64_t>(i);
        if (index < 0 || index >= r.n || seen[static_cast<std::size_t>(index)])
          throw std::runtime_error("choice index " + std::to_string(index) + " is out of range or repeated");
        seen[static_cast<std::size_t>(index)] = true;
        sdk::GeneratedSample& s = result.samples[static_cast<std::size_t>(index)];
        read_choice(c, s, "choices[" + std::to_string(i) + "]");
        for (std::int64_t id : s.token_ids)
          if (id < 0 || id >= config_.vocab_size)
            throw std::runtime_error("token id " + std::to_string(id) + " is outside the trainer's vocabulary [0, " +
                                     std::to_string(config_.vocab_size) + "): the server serves another model");
      }
    } catch (const std::exception& e) {
      result.samples.clear();
      result.status = sdk::Status::internal("request '" + r.id + "': " + client_->url("/v1/completions") + ": " + e.what());
    }
    return result;
  }

  void reload() {
    json body = json::object();
    try {
      if (kind_ == ServerKind::kVllm) {
        // vLLM (VLLM_SERVER_DEV_MODE=1): pause generation, reload in the workers, drop the prefix
        // cache (it holds KV of the old weights), resume.
        client_->post("/pause?mode=wait", json::object());
        try {
          json rpc = json::object();
          rpc["method"] = "reload_weights";
          rpc["kwargs"] = json::object({{"weights_path", sync_dir_}});
          client_->post("/collective_rpc", rpc);
          client_->post("/reset_prefix_cache", json::object());
        } catch (...) {
          try {  // never leave the server paused
            client_->post("/resume", json::object());
          } catch (...) {
          }
          throw;
        }
        client_->post("/resume", json::object());
        return;
      }
      body["model_path"] = sync_dir_;  // grpo-serve and SGLang
      const json answer = client_->post("/update_weights_from_disk", body);
      if (answer.contains("success") && answer["success"].is_boolean() && !answer["success"].get<bool>())
        throw std::runtime_error("the server refused the weights: " + answer.value("message", answer.dump()));
      // SGLang renames the served model to the loaded path: ask again what to call it.
      if (kind_ == ServerKind::kSglang) {
        const json models = client_->get("/v1/models");
        if (models.contains("data") && models["data"].is_array() && models["data"].size() == 1)
          served_ = models["data"][0].value("id", served_);
      }
    } catch (const grpo::openai::HttpError& e) {
      throw std::runtime_error(std::string("weight sync: ") + e.what());
    }
  }

  ServerKind kind_ = ServerKind::kGrpo;
  std::optional<grpo::openai::Client> client_;
  std::int64_t max_concurrency_ = 64;
  std::string model_dir_, served_, sync_dir_;
  std::int64_t max_model_len_ = 0;
  grpo::core::ModelConfig config_;
  std::optional<grpo::core::Tokenizer> tokenizer_;
  bool sync_ = true, wrote_ = false;
  std::map<std::string, torch::Tensor> base_;  // the weights the server gets, by name

  mutable std::mutex m_;  // the figures below
  double wall_s_ = 0, sync_write_s_ = 0, sync_reload_s_ = 0;
  std::int64_t requests_ = 0, failed_ = 0, tokens_ = 0, syncs_ = 0;
};

}  // namespace

GRPO_PLUGIN("openai", "1.0.0", "Rollouts through an OpenAI-compatible server (grpo-serve, vLLM, SGLang, llama.cpp)") {
  registrar.add_rollout_backend<OpenAIBackend>("openai", "an OpenAI-compatible HTTP server; weight sync through a shared folder");
}
