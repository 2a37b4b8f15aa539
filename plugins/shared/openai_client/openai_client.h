// A client for OpenAI-compatible HTTP servers (vLLM, SGLang, llama.cpp's server, grpo-serve),
// shared by the `openai` rollout backend and the `llm_judge` verifier. Torch-free: the judge
// is a reward plugin, which never links LibTorch.
//
// What it adds over cpp-httplib's client:
//   - one base URL (http[s]://host[:port][/prefix]) and paths under it, e.g. "/v1/completions";
//   - a bearer token (api_key), JSON bodies in and out;
//   - retries with exponential backoff for the failures that retrying can fix: no connection,
//     a dropped connection or time-out, 408, 429 and 5xx; other 4xx answers are the caller's
//     mistake and fail at once;
//   - errors that say which server, which path and what it answered (the OpenAI error body's
//     message when there is one).
//
// Thread-safety: a Client is immutable after construction; every call opens its own connection,
// so any number of threads may call it at once.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace grpo::openai {

struct ClientOptions {
  std::string base_url;             // http://127.0.0.1:8000 (a trailing "/v1" is dropped: paths name it)
  std::string api_key;              // "Authorization: Bearer KEY" when not empty
  double connect_timeout_s = 5.0;   // per connection attempt
  double request_timeout_s = 120.0; // per read or write on the socket: bounds a silent server
  int max_retries = 3;              // after the first attempt
  double retry_backoff_s = 0.5;     // before retry k: backoff * 2^(k-1), at most 30 s
  // A read or write error after the request went out (a time-out waiting for the answer, a
  // dropped connection) may mean the server is still working on it: retrying a long generation
  // then doubles the server's load. false: only failures to connect and retryable statuses are
  // retried.
  bool retry_read_errors = true;
};

// An answer that was not 2xx after the retries, or no answer at all (status 0).
class HttpError : public std::runtime_error {
 public:
  HttpError(const std::string& message, int status, bool retryable)
      : std::runtime_error(message), status_(status), retryable_(retryable) {}
  int status() const { return status_; }        // the HTTP status, 0 when no response came
  bool retryable() const { return retryable_; }  // a failure a later attempt might not have

 private:
  int status_;
  bool retryable_;
};

class Client {
 public:
  // Throws std::invalid_argument when base_url is not http(s)://HOST[:PORT][/PATH], or a
  // time-out is not > 0, or max_retries < 0.
  explicit Client(ClientOptions options);

  // POST `body` as JSON to base path + `path`; the parsed JSON answer. Throws HttpError.
  nlohmann::json post(const std::string& path, const nlohmann::json& body) const;
  // GET base path + `path`; the parsed JSON answer. Throws HttpError.
  nlohmann::json get(const std::string& path) const;

  const ClientOptions& options() const { return options_; }
  std::string url(const std::string& path) const { return origin_ + prefix_ + path; }

 private:
  nlohmann::json request(const char* method, const std::string& path, const nlohmann::json* body) const;

  ClientOptions options_;
  std::string origin_;  // scheme://host:port
  std::string prefix_;  // "" or "/something" (no trailing slash)
};

// The message of an OpenAI-style error body ({"error": {"message": ...}}, or vLLM's
// {"object": "error", "message": ...}); the body itself (cut to 300 bytes) otherwise.
std::string error_message_of(const std::string& body);

}  // namespace grpo::openai
