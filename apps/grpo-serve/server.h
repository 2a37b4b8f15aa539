// grpo-serve's server: an OpenAI-compatible HTTP front (cpp-httplib) over the native engine.
//
//   HTTP threads (a pool)          engine thread
//   parse + tokenize a request --> Scheduler queue --> Engine::serve(): continuous batching
//   wait, or stream events     <-- per-token deltas / results
//
// Weight updates (/update_weights_from_disk): the folder is read and checked on the HTTP thread
// while generation goes on; the scheduler then stops admitting requests, lets the ones in flight
// finish, copies the new weights in and resumes. A folder that does not load, or does not fit
// the served architecture, changes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "plugins/backends/native/engine.h"

namespace grpo::serve {

struct ServeSettings {
  std::string model_dir;          // a model folder (a run directory is resolved by the caller)
  std::string served_model_name;  // "" = the folder's name
  std::string host = "127.0.0.1";
  int port = 8000;                // 0 = any free port
  std::string api_key;            // "" = no authentication
  std::string dtype = "float32";  // float32 | bfloat16
  std::string device = "cpu";
  std::string attention = "auto";  // core/model/attention/backend.h
  std::string chat_template = "auto";
  native::EngineOptions engine;   // max_num_seqs, max_model_len, logprobs mode, seed, ...
  int http_threads = 128;         // requests handled at once (each waits for its answer); idle connections take none
  // Slow and idle clients (connection_gate.h): a request's headers must arrive within
  // header_timeout_s (else 408), an idle connection closes after keep_alive_timeout_s, and the
  // connections beyond max_connections get 503.
  double header_timeout_s = 10;
  double keep_alive_timeout_s = 5;
  int max_connections = 1024;
};

class Server {
 public:
  // Loads the model, the tokenizer and the chat template; throws std::invalid_argument /
  // sdk::ConfigError naming what is wrong.
  explicit Server(ServeSettings settings);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, calls `on_listening(port)`, and serves until stop(). Throws std::runtime_error when
  // the address cannot be bound.
  void run(const std::function<void(int port)>& on_listening);
  // Stops serving: run() returns once the requests in flight are answered. Any thread.
  void stop();

  const std::string& served_model_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grpo::serve
