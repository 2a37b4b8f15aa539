#include "plugins/shared/openai_client/openai_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace grpo::openai {

namespace {

// Seconds as httplib's (sec, usec) pair.
std::pair<time_t, time_t> split_seconds(double s) {
  const auto whole = static_cast<time_t>(s);
  return {whole, static_cast<time_t>((s - static_cast<double>(whole)) * 1e6)};
}

bool retryable_status(int status) { return status == 408 || status == 429 || status >= 500; }

}  // namespace

std::string error_message_of(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) return (*e)["message"].get<std::string>();
      if (e->is_string()) return e->get<std::string>();
    }
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
    if (auto d = j.find("detail"); d != j.end()) return d->is_string() ? d->get<std::string>() : d->dump();
  }
  return body.size() > 300 ? body.substr(0, 300) + "..." : body;
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  std::string url = options_.base_url;
  const std::string expected = "expected http://HOST[:PORT][/PATH] or https://..., got '" + options_.base_url + "'";
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) throw std::invalid_argument(expected);
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") throw std::invalid_argument(expected);
  const auto path_start = url.find('/', scheme_end + 3);
  origin_ = url.substr(0, path_start);
  if (origin_.size() <= scheme_end + 3) throw std::invalid_argument(expected + " (no host)");
  prefix_ = path_start == std::string::npos ? "" : url.substr(path_start);
  while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
  // OpenAI SDKs take base URLs ending in /v1; our paths name /v1 themselves.
  if (prefix_.size() >= 3 && prefix_.compare(prefix_.size() - 3, 3, "/v1") == 0) prefix_.resize(prefix_.size() - 3);
  if (!(options_.connect_timeout_s > 0.0)) throw std::invalid_argument("connect_timeout_s must be > 0");
  if (!(options_.request_timeout_s > 0.0)) throw std::invalid_argument("request_timeout_s must be > 0");
  if (options_.max_retries < 0) throw std::invalid_argument("max_retries must be >= 0");
  if (options_.retry_backoff_s < 0.0) throw std::invalid_argument("retry_backoff_s must be >= 0");
}

nlohmann::json Client::post(const std::string& path, const nlohmann::json& body) const { return request("POST", path, &body); }

nlohmann::json Client::get(const std::string& path) const { return request("GET", path, nullptr); }

nlohmann::json Client::request(const char* method, const std::string& path, const nlohmann::json* body) const {
  const std::string target = prefix_ + path;
  const std::string payload = body ? body->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : std::string();
  httplib::Headers headers;
  if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
  std::string last_error;
  int last_status = 0;
  for (int attempt = 0;; ++attempt) {
    httplib::Client client(origin_);
    const auto [cs, cus] = split_seconds(options_.connect_timeout_s);
    const auto [rs, rus] = split_seconds(options_.request_timeout_s);
    client.set_connection_timeout(cs, cus);
    client.set_read_timeout(rs, rus);
    client.set_write_timeout(rs, rus);
    client.set_keep_alive(false);
    httplib::Result result = body ? client.Post(target, headers, payload, "application/json") : client.Get(target, headers);
    bool retry = false;
    if (!result) {
      last_status = 0;
      last_error = std::string(method) + " " + url(path) + ": " + httplib::to_string(result.error());
      const httplib::Error e = result.error();
      const bool not_sent = e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout ||
                            e == httplib::Error::SSLConnection;
      retry = not_sent || options_.retry_read_errors;
    } else if (result->status >= 200 && result->status < 300) {
      auto parsed = nlohmann::json::parse(result->body, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded())
        throw HttpError(std::string(method) + " " + url(path) + ": the answer is not JSON: " + error_message_of(result->body),
                        result->status, false);
      return parsed;
    } else {
      last_status = result->status;
      last_error = std::string(method) + " " + url(path) + ": HTTP " + std::to_string(result->status) + ": " +
                   error_message_of(result->body);
      retry = retryable_status(result->status);
    }
    if (!retry) throw HttpError(last_error, last_status, false);
    if (attempt >= options_.max_retries)
      throw HttpError(last_error + (options_.max_retries > 0 ? " (after " + std::to_string(options_.max_retries) + " retries)"
                                                             : std::string()),
                      last_status, true);
    const double wait = std::min(30.0, options_.retry_backoff_s * std::pow(2.0, attempt));
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
}

}  // namespace grpo::openai
