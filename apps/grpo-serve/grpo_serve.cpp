#include "apps/grpo-serve/grpo_serve.h"

#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <pthread.h>
#include <thread>
#include <utility>

#include "apps/cli/app_common.h"
#include "apps/cli/exit_codes.h"
#include "apps/grpo-serve/server.h"
#include "core/model/checkpoint_dirs.h"
#include "core/model/lora.h"
#include "core/model/model_config.h"
#include "core/runtime/logging.h"
#include "core/runtime/threads.h"
#include "core/util/fs.h"
#include "grpo/sdk/config_view.h"

namespace grpo::cli {

namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

using core::configure_compute_threads;
using core::init_console_logging;

constexpr const char* kApp = "grpo-serve";

constexpr const char* kUsage = R"(Usage: grpo-serve --model DIR [--host 127.0.0.1] [--port 8000] [options]

Serves a model with an OpenAI-compatible HTTP API (docs/serving.md): /v1/models,
/v1/completions, /v1/chat/completions (streaming with server-sent events), /tokenize, /health,
and /update_weights_from_disk, which loads a checkpoint folder in place. Requests are batched
continuously on the native engine. DIR is a Hugging Face model folder, a checkpoint, or a run
directory of grpo-sft / grpo-run (its newest checkpoint). It listens on loopback unless --host
says otherwise; with --api-key (or GRPO_SERVE_API_KEY) every /v1 request needs
"Authorization: Bearer KEY". Ctrl-C stops it after answering the requests in flight.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk, "stopped by SIGINT or SIGTERM after answering the requests in flight"},
       {kExitInternal},
       {kExitUsage},
       {kExitConfig, "the model folder, its tokenizer or chat template, or an engine option is invalid"},
       {kExitRuntime, "the address cannot be bound (the port is in use) or --port-file cannot be written"}});
  return text;
}

struct Options {
  std::string model, host = "127.0.0.1", api_key, served_name, dtype = "float32", device = "cpu",
                     chat_template = "auto", logprobs = "raw", port_file, log_level = "info", attention = "auto",
                     decode_steps = "auto";
  int port = 8000, http_threads = 128, max_connections = 1024;
  double header_timeout = 10, keep_alive_timeout = 5;
  // The engine's options with the engine's defaults (engine.h): the flags write here; the seed is
  // read signed so that a negative one is an error, not a wrapped-around value.
  native::EngineOptions engine;
  std::int64_t seed = static_cast<std::int64_t>(native::EngineOptions{}.seed);
};

// DIR itself, or the newest checkpoint of a run directory.
std::string model_folder(const std::string& given) {
  if (!fs::is_directory(given)) throw sdk::ConfigError("--model '" + given + "': no such folder");
  if (fs::exists(fs::path(given) / "config.json")) return given;
  const auto latest = core::latest_checkpoint(given);
  if (latest && fs::exists(fs::path(*latest) / "config.json")) {
    spdlog::info("--model {} is a run directory; serving its newest checkpoint {}", given, *latest);
    return *latest;
  }
  if (fs::exists(fs::path(given) / core::kAdapterConfigFile) || (latest && fs::exists(fs::path(*latest) / core::kAdapterConfigFile)))
    throw sdk::ConfigError("--model '" + given +
                           "' is a LoRA adapter (or a LoRA run): write a merged model folder with grpo-export --merge "
                           "and serve that (docs/lora.md)");
  throw sdk::ConfigError("--model '" + given + "': no config.json, and no complete checkpoint under " +
                         core::checkpoint_root(given) + " (expected a Hugging Face model folder or a run directory)");
}

int run(const Options& opt) {
  init_console_logging(opt.log_level);
  serve::ServeSettings s;
  s.model_dir = model_folder(opt.model);
  // Default name: the folder given (a run directory keeps its name across its checkpoints).
  s.served_model_name = opt.served_name.empty() ? fs::absolute(opt.model).lexically_normal().filename().string() : opt.served_name;
  if (s.served_model_name.empty()) s.served_model_name = fs::absolute(opt.model).lexically_normal().parent_path().filename().string();
  s.host = opt.host;
  s.port = opt.port;
  s.api_key = opt.api_key;
  if (s.api_key.empty())
    if (const char* env = std::getenv("GRPO_SERVE_API_KEY")) s.api_key = env;
  s.dtype = opt.dtype;
  s.device = opt.device;
  s.attention = opt.attention;
  s.chat_template = opt.chat_template;
  s.http_threads = opt.http_threads;
  s.header_timeout_s = opt.header_timeout;
  s.keep_alive_timeout_s = opt.keep_alive_timeout;
  s.max_connections = opt.max_connections;
  s.engine = opt.engine;
  s.engine.seed = static_cast<std::uint64_t>(opt.seed);
  const auto decode_steps = native::parse_decode_steps(opt.decode_steps);
  if (!decode_steps)
    throw std::invalid_argument("--decode-steps: expected auto, dynamic, bucketed or graphs, got '" + opt.decode_steps + "'");
  s.engine.decode_steps = *decode_steps;
  s.engine.logprobs_mode = *native::parse_logprobs_mode(opt.logprobs);  // checked with the flags
  core::ModelConfig config;
  try {
    config = core::load_model_config((fs::path(s.model_dir) / "config.json").string());
  } catch (const std::exception& e) {
    throw sdk::ConfigError(std::string("--model: ") + e.what());
  }
  // The slot cache holds max_num_seqs x max_model_len tokens: a model's full context (32k and
  // more) would take gigabytes for nothing on most workloads.
  s.engine.max_model_len = opt.engine.max_model_len > 0 ? opt.engine.max_model_len : std::min<std::int64_t>(config.max_position_embeddings, 8192);
  if (opt.engine.max_model_len == 0 && s.engine.max_model_len < config.max_position_embeddings)
    spdlog::info("max_model_len {} (the model allows {}; raise it with --max-model-len)", s.engine.max_model_len,
                 config.max_position_embeddings);
  if (s.engine.max_model_len > config.max_position_embeddings)
    throw std::invalid_argument("--max-model-len " + std::to_string(s.engine.max_model_len) + " exceeds the model's " +
                                "max_position_embeddings " + std::to_string(config.max_position_embeddings));

  // Every thread started from here on inherits the blocked signals; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  configure_compute_threads("grpo-serve compute threads");
  std::optional<serve::Server> server;
  try {
    server.emplace(s);
  } catch (const core::TokenizerError& e) {
    throw sdk::ConfigError(std::string("--model: tokenizer: ") + e.what());
  } catch (const core::CheckpointError& e) {
    throw sdk::ConfigError(std::string("--model: ") + e.what());
  }
  spdlog::info("serving {} as '{}': {} x {} tokens of KV cache, max_num_seqs {}, {} HTTP threads, at most {} connections{}",
               s.model_dir, server->served_model_name(), s.engine.max_num_seqs, s.engine.max_model_len, s.engine.max_num_seqs,
               s.http_threads, s.max_connections, s.api_key.empty() ? "" : ", API key required");
  std::atomic<bool> finished{false};  // run() returned: the waiter is only being woken to exit
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (finished) return;
    spdlog::info("signal {}: stopping after the requests in flight", sig);
    server->stop();
  });
  int bound = 0;
  try {
    server->run([&](int port) {
      bound = port;
      if (!opt.port_file.empty()) core::atomic_write_file(opt.port_file, std::to_string(port) + "\n");
      std::cerr << kApp << ": listening on http://" << s.host << ":" << port << std::endl;
    });
  } catch (const std::exception& e) {
    finished = true;
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    throw AppError(kExitRuntime, e.what());
  }
  finished = true;
  if (waiter.joinable()) {
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter when run() ended otherwise
    waiter.join();
  }
  (void)bound;
  return kExitOk;
}

}  // namespace

int grpo_serve_main(int argc, char** argv) {
  Options opt;  // its engine options are EngineOptions{}'s defaults until the flags are read
  const auto with_default = [](const char* what, std::int64_t value) {
    return std::string(what) + " (default " + std::to_string(value) + ")";
  };
  po::options_description desc(kUsage);
  bool show_help = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("model,m", po::value(&opt.model)->value_name("DIR"), "model folder, checkpoint or run directory; required")
    ("host", po::value(&opt.host)->value_name("ADDR"), "address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)")
    ("port", po::value(&opt.port)->value_name("PORT"), "TCP port (default 8000; 0 = any free port, printed and written to --port-file)")
    ("port-file", po::value(&opt.port_file)->value_name("FILE"), "write the bound port here once listening (for scripts and tests)")
    ("api-key", po::value(&opt.api_key)->value_name("KEY"), "require 'Authorization: Bearer KEY' (default: the GRPO_SERVE_API_KEY variable; none)")
    ("served-model-name", po::value(&opt.served_name)->value_name("NAME"), "the model name requests use (default: the folder's name)")
    ("dtype", po::value(&opt.dtype)->value_name("T"), "float32 (default) or bfloat16")
    ("device", po::value(&opt.device)->value_name("DEV"), "cpu (default), cuda or cuda:N")
    ("attention", po::value(&opt.attention)->value_name("B"), "attention kernel: auto (default), eager, sdpa or flash_varlen (docs/gpu.md)")
    ("decode-steps", po::value(&opt.decode_steps)->value_name("S"), "decode steps: auto (default: CUDA graphs on CUDA), dynamic, bucketed or graphs (docs/rollout.md)")
    ("max-num-seqs", po::value(&opt.engine.max_num_seqs)->value_name("N"), with_default("sequences decoded together", opt.engine.max_num_seqs).c_str())
    ("max-model-len", po::value(&opt.engine.max_model_len)->value_name("N"), "prompt + completion tokens (default: the model's, at most 8192)")
    ("max-num-batched-tokens", po::value(&opt.engine.max_num_batched_tokens)->value_name("N"), with_default("prompt tokens per prefill forward", opt.engine.max_num_batched_tokens).c_str())
    ("chat-template", po::value(&opt.chat_template)->value_name("NAME|PATH"), "auto (default: the model's own), chatml, llama3 or a Jinja file")
    ("logprobs-mode", po::value(&opt.logprobs)->value_name("MODE"), "raw (default, as vLLM: log_softmax of the logits), scaled (after temperature) or processed (after top-k/top-p/min-p)")
    ("seed", po::value(&opt.seed)->value_name("SEED"), with_default("base of the random streams of requests without a seed", opt.seed).c_str())
    ("ignore-eos", po::bool_switch(&opt.engine.ignore_eos), "EOS does not end a completion (benchmarks)")
    ("http-threads", po::value(&opt.http_threads)->value_name("N"), "requests handled at once (default 128; idle connections take none)")
    ("header-timeout", po::value(&opt.header_timeout)->value_name("S"), "seconds for a request's headers to arrive, from its first byte or the connect; then 408 (default 10)")
    ("keep-alive-timeout", po::value(&opt.keep_alive_timeout)->value_name("S"), "seconds an idle connection is kept between requests (default 5)")
    ("max-connections", po::value(&opt.max_connections)->value_name("N"), "open connections; the ones beyond get 503 (default 1024)")
    ("log-level", po::value(&opt.log_level)->value_name("LEVEL"), "trace, debug, info (default), warn or error");
  // clang-format on
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << exit_codes();
      return kExitOk;
    }
    if (opt.model.empty()) throw po::error("--model is required");
    if (opt.port < 0 || opt.port > 65535) throw po::error("--port must be in [0, 65535], got " + std::to_string(opt.port));
    if (const auto problem = native::engine_options_problem(opt.engine)) {  // the flag is the key, dashed
      std::string flag = "--" + problem->key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      throw po::error(flag + " " + problem->message);
    }
    if (opt.http_threads < 1) throw po::error("--http-threads must be >= 1");
    // An upper bound too: a value meant in milliseconds (10000) would keep idle clients for hours.
    for (const auto& [name, seconds] :
         {std::pair{"--header-timeout", opt.header_timeout}, std::pair{"--keep-alive-timeout", opt.keep_alive_timeout}})
      if (!(seconds > 0 && seconds <= 3600)) {
        std::ostringstream message;
        message << name << " must be in (0, 3600] seconds, got " << seconds;
        throw po::error(message.str());
      }
    if (opt.max_connections < 1) throw po::error("--max-connections must be >= 1, got " + std::to_string(opt.max_connections));
    if (!native::parse_logprobs_mode(opt.logprobs))
      throw po::error("--logprobs-mode must be raw, scaled or processed, got '" + opt.logprobs + "'");
    if (opt.seed < 0) throw po::error("--seed must be >= 0");
  } catch (const po::error& e) {
    return report_usage_error(kApp, e.what());
  }
  return run_app_guarded(kApp, [&] { return run(opt); });
}

}  // namespace grpo::cli
