// grpo-serve under load: a real server process (tests/support/serve_process.h) on loopback,
// driven by client threads that each send /v1/completions requests back to back with their own
// httplib::Client (keep-alive), as an OpenAI client pool would.
//
// The model: Qwen2-shaped, random weights (init std 0.02), float32, over the demo byte-level
// tokenizer (259 ids), hidden 384 and 4 layers by default: big enough that a decode step of one
// sequence costs well under a batch of 32, so continuous batching shows. The server runs with
// --ignore-eos (every request makes exactly --max-tokens tokens) and --max-num-seqs 64.
//
//   (a) 1 client for --speedup-duration seconds, then --speedup-clients (32) clients as long:
//       serve_batching_speedup = completion tokens/s with 32 clients / with 1 client;
//   (b) --clients (64) clients for --duration (60) seconds: serve_requests_per_s (answers per
//       second of the phase) and serve_p99_latency_s (request sent -> answer read).
//
// Every request carries a unique id in its prompt ("req <phase>-<client>-<k>: ...") and in its
// "user" field, and asks for return_token_ids: an answer counts only when it is a 200 whose
// prompt_token_ids are that prompt's tokens, with completion_tokens == --max-tokens and a
// response id no other answer has. serve_lost_requests counts requests without such an answer,
// serve_duplicate_answers response ids seen twice; the bench exits 1 unless both are 0.
//
// A client stops starting requests at the phase's deadline; the phase ends when its last
// request is answered, and its rates divide by that whole time.
//
//   grpo_bench_serve [--duration 60] [--clients 64] [--speedup-duration 15]
//                    [--speedup-clients 32] [--max-tokens 32] [--hidden 384] [--layers 4]
//                    [--max-num-seqs 64] [--serve-binary PATH] [--work-dir DIR] [--keep]
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/checkpoint.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_files.h"
#include "tests/support/serve_process.h"
#include "tests/support/tiny_byte_model.h"

#ifndef GRPO_SERVE_BINARY
#define GRPO_SERVE_BINARY "grpo-serve"
#endif

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using grpo::bench::arg;
using grpo::bench::Clock;
using grpo::bench::flag;
using grpo::bench::seconds_since;

struct Options {
  double duration = 60, speedup_duration = 15;
  int clients = 64, speedup_clients = 32;
  int max_tokens = 32, hidden = 384, layers = 4, max_num_seqs = 64;
  std::string serve_binary = GRPO_SERVE_BINARY, work_dir;
  bool keep = false;
};

// One request as sent and as answered.
struct Outcome {
  std::string request_id;
  int status = 0;  // 0: no HTTP answer
  std::string response_id;
  bool prompt_matches = false;
  std::int64_t completion_tokens = -1;
  double latency_s = 0;
  std::string error;  // why the answer does not count, "" when it does
};

struct Phase {
  std::string name;
  int clients = 0;
  double wall_s = 0;
  std::vector<Outcome> outcomes;
  std::int64_t completion_tokens() const {
    std::int64_t n = 0;
    for (const Outcome& o : outcomes)
      if (o.error.empty()) n += o.completion_tokens;
    return n;
  }
  std::size_t answered() const {
    return static_cast<std::size_t>(std::count_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return o.error.empty(); }));
  }
  double tokens_per_s() const { return wall_s > 0 ? static_cast<double>(completion_tokens()) / wall_s : 0.0; }
  double requests_per_s() const { return wall_s > 0 ? static_cast<double>(answered()) / wall_s : 0.0; }
  double latency_quantile(double q) const {
    std::vector<double> v;
    for (const Outcome& o : outcomes)
      if (o.error.empty()) v.push_back(o.latency_s);
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto at = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(at, v.size() - 1)];
  }
};

grpo::core::ModelConfig bench_config(const Options& opt, std::int64_t vocab, int eos) {
  grpo::core::ModelConfig c = grpo::testing::tiny_byte_model_config(vocab, eos, 2048);
  c.hidden_size = opt.hidden;
  c.num_attention_heads = std::max(1, opt.hidden / 64);
  c.num_key_value_heads = c.num_attention_heads % 2 == 0 ? 2 : 1;
  c.head_dim = opt.hidden / c.num_attention_heads;
  c.intermediate_size = opt.hidden * 8 / 3 / 64 * 64;  // about 2.7 x hidden, as Qwen2
  c.num_hidden_layers = opt.layers;
  c.rope_theta = 1e6;
  return c;
}

std::int64_t write_model(const std::string& dir, const grpo::core::Tokenizer& tokenizer, const Options& opt) {
  grpo::core::CausalLM model(bench_config(opt, tokenizer.vocab_size(), *tokenizer.token_to_id("<|endoftext|>")));
  model->init_weights(0.02, 0);
  grpo::core::SaveOptions save;
  save.tokenizer = &tokenizer;
  grpo::core::save_model(dir, model, save);
  std::int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  return params;
}

// Runs `clients` threads for `duration_s`, each sending requests back to back.
Phase run_phase(const std::string& name, int port, int clients, double duration_s, const Options& opt,
                const grpo::core::Tokenizer& tokenizer) {
  Phase phase;
  phase.name = name;
  phase.clients = clients;
  std::vector<std::vector<Outcome>> per_client(static_cast<std::size_t>(clients));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_read_timeout(600, 0);
      client.set_connection_timeout(30, 0);
      ++ready;
      while (!go.load()) std::this_thread::yield();
      const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration_s));
      for (int k = 0; Clock::now() < deadline; ++k) {
        Outcome o;
        o.request_id = name + "-" + std::to_string(c) + "-" + std::to_string(k);
        const std::string prompt = "req " + o.request_id + ": write on";
        const json body = {{"prompt", prompt},       {"max_tokens", opt.max_tokens},     {"temperature", 1.0},
                           {"seed", c * 100000 + k}, {"user", o.request_id},             {"return_token_ids", true},
                           {"add_special_tokens", false}};
        const auto t0 = Clock::now();
        const httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
        o.latency_s = seconds_since(t0);
        if (!r) {
          o.error = "no answer: " + httplib::to_string(r.error()) + " after " + std::to_string(o.latency_s) + " s";
        } else {
          o.status = r->status;
          const json j = json::parse(r->body, nullptr, false);
          if (r->status != 200) {
            o.error = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300);
          } else if (!j.is_object() || !j.contains("choices") || j["choices"].size() != 1) {
            o.error = "not a one-choice completion: " + r->body.substr(0, 300);
          } else {
            o.response_id = j.value("id", "");
            o.completion_tokens = j["usage"].value("completion_tokens", -1);
            grpo::core::EncodeOptions plain;
            plain.add_special_tokens = false;
            const std::vector<int> expected = tokenizer.encode(prompt, plain);
            const json& got = j["choices"][0]["prompt_token_ids"];
            o.prompt_matches = got.is_array() && got.get<std::vector<int>>() == expected;
            if (!o.prompt_matches) o.error = "the answer's prompt is another request's";
            else if (o.completion_tokens != opt.max_tokens)
              o.error = "completion_tokens " + std::to_string(o.completion_tokens) + " != " + std::to_string(opt.max_tokens);
            else if (o.response_id.empty()) o.error = "no response id";
          }
        }
        per_client[static_cast<std::size_t>(c)].push_back(std::move(o));
      }
    });
  }
  while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  phase.wall_s = seconds_since(start);
  for (auto& v : per_client)
    for (auto& o : v) phase.outcomes.push_back(std::move(o));
  return phase;
}

int usage(const char* message) {
  std::fprintf(stderr, "grpo_bench_serve: %s\n", message);
  return 2;
}

}  // namespace

// Long because it is the benchmark's script, read top to bottom: flags, the server, the timed
// client runs side by side, the `name: value` lines.
int main(int argc, char** argv) {
  Options opt;
  if (const char* v = flag(argc, argv, "--duration")) opt.duration = std::atof(v);
  if (const char* v = flag(argc, argv, "--speedup-duration")) opt.speedup_duration = std::atof(v);
  opt.clients = static_cast<int>(arg(argc, argv, "--clients", opt.clients));
  opt.speedup_clients = static_cast<int>(arg(argc, argv, "--speedup-clients", opt.speedup_clients));
  opt.max_tokens = static_cast<int>(arg(argc, argv, "--max-tokens", opt.max_tokens));
  opt.hidden = static_cast<int>(arg(argc, argv, "--hidden", opt.hidden));
  opt.layers = static_cast<int>(arg(argc, argv, "--layers", opt.layers));
  opt.max_num_seqs = static_cast<int>(arg(argc, argv, "--max-num-seqs", opt.max_num_seqs));
  if (const char* v = flag(argc, argv, "--serve-binary")) opt.serve_binary = v;
  if (const char* v = flag(argc, argv, "--work-dir")) opt.work_dir = v;
  opt.keep = grpo::bench::has_flag(argc, argv, "--keep");
  if (opt.duration <= 0 || opt.speedup_duration <= 0) return usage("--duration and --speedup-duration must be > 0");
  if (opt.clients < 1 || opt.speedup_clients < 1) return usage("--clients and --speedup-clients must be >= 1");
  if (opt.max_tokens < 1) return usage("--max-tokens must be >= 1");
  if (opt.hidden < 64 || opt.hidden % 64 != 0) return usage("--hidden must be a multiple of 64");
  if (opt.layers < 1 || opt.max_num_seqs < 1) return usage("--layers and --max-num-seqs must be >= 1");
  if (!fs::exists(opt.serve_binary)) return usage(("no grpo-serve at " + opt.serve_binary + " (--serve-binary)").c_str());
  if (opt.work_dir.empty())
    opt.work_dir = (fs::temp_directory_path() / ("grpo_bench_serve_" + std::to_string(::getpid()))).string();
  fs::remove_all(opt.work_dir);
  fs::create_directories(opt.work_dir);

  const grpo::core::Tokenizer tokenizer = grpo::core::Tokenizer::from_json(grpo::core::make_byte_level_tokenizer_json());
  const std::string model_dir = opt.work_dir + "/model";
  const std::int64_t params = write_model(model_dir, tokenizer, opt);
  const auto config = bench_config(opt, tokenizer.vocab_size(), 0);
  std::printf("grpo-serve: %s\n", opt.serve_binary.c_str());
  std::printf("model: Qwen2-shaped, random weights (init std 0.02), float32: hidden %lld, %lld layers, %lld heads / %lld KV "
              "heads, intermediate %lld, byte-level vocab %lld; %.1fM parameters\n",
              static_cast<long long>(config.hidden_size), static_cast<long long>(config.num_hidden_layers),
              static_cast<long long>(config.num_attention_heads), static_cast<long long>(config.num_key_value_heads),
              static_cast<long long>(config.intermediate_size), static_cast<long long>(config.vocab_size),
              static_cast<double>(params) / 1e6);
  std::printf("server: --ignore-eos --max-num-seqs %d --max-model-len 256; requests: max_tokens %d, temperature 1, "
              "a ~25-byte prompt\n",
              opt.max_num_seqs, opt.max_tokens);
  std::fflush(stdout);

  std::unique_ptr<grpo::testing::ServeProcess> server;
  try {
    server = std::make_unique<grpo::testing::ServeProcess>(
        opt.serve_binary, model_dir, opt.work_dir,
        std::vector<std::string>{"--ignore-eos", "--max-num-seqs", std::to_string(opt.max_num_seqs), "--max-model-len", "256",
                                 "--http-threads", std::to_string(std::max(128, opt.clients + 16)), "--log-level", "warn"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grpo_bench_serve: %s\n", e.what());
    return 1;
  }
  // Warm-up (first allocations, the KV cache): not measured.
  run_phase("warmup", server->port(), 4, 1.0, opt, tokenizer);

  std::vector<Phase> phases;
  phases.push_back(run_phase("one", server->port(), 1, opt.speedup_duration, opt, tokenizer));
  phases.push_back(run_phase("many", server->port(), opt.speedup_clients, opt.speedup_duration, opt, tokenizer));
  phases.push_back(run_phase("load", server->port(), opt.clients, opt.duration, opt, tokenizer));
  const int stop_code = server->stop();

  // Every request: exactly one counted answer; every response id once.
  std::int64_t lost = 0, duplicates = 0, requests = 0;
  std::unordered_map<std::string, int> response_ids;
  std::map<std::string, int> errors;
  for (const Phase& p : phases) {
    for (const Outcome& o : p.outcomes) {
      ++requests;
      if (!o.error.empty()) {
        ++lost;
        if (errors[o.error]++ < 3) std::fprintf(stderr, "request %s: %s\n", o.request_id.c_str(), o.error.c_str());
      }
      if (!o.response_id.empty() && ++response_ids[o.response_id] == 2) ++duplicates;
    }
  }

  const Phase &one = phases[0], &many = phases[1], &load = phases[2];
  for (const Phase& p : phases)
    std::printf("%-4s %3d clients: %5zu requests in %6.2f s, %8.1f completion tokens/s, %6.2f requests/s, latency p50 %.3f s, "
                "p99 %.3f s\n",
                p.name.c_str(), p.clients, p.outcomes.size(), p.wall_s, p.tokens_per_s(), p.requests_per_s(),
                p.latency_quantile(0.5), p.latency_quantile(0.99));
  std::printf("cpu: %s\n", grpo::bench::cpu_model_name().c_str());
  std::printf("cpu_cores: %u\n", std::thread::hardware_concurrency());
  std::printf("serve_tokens_per_s_1_client: %.1f\n", one.tokens_per_s());
  std::printf("serve_tokens_per_s_%d_clients: %.1f\n", many.clients, many.tokens_per_s());
  std::printf("serve_tokens_per_s_%d_clients: %.1f\n", load.clients, load.tokens_per_s());
  std::printf("serve_requests: %lld\n", static_cast<long long>(requests));
  std::printf("serve_exit_code: %d\n", stop_code);
  std::printf("serve_lost_requests: %lld\n", static_cast<long long>(lost));
  std::printf("serve_duplicate_answers: %lld\n", static_cast<long long>(duplicates));
  std::printf("serve_requests_per_s: %.2f\n", load.requests_per_s());
  std::printf("serve_p99_latency_s: %.3f\n", load.latency_quantile(0.99));
  std::printf("serve_batching_speedup: %.2f\n", one.tokens_per_s() > 0 ? many.tokens_per_s() / one.tokens_per_s() : 0.0);
  std::fflush(stdout);
  if (lost != 0 || duplicates != 0 || stop_code != 0) {
    std::fprintf(stderr, "grpo_bench_serve: %lld lost requests, %lld duplicate answers, grpo-serve exit code %d (its log: %s/serve.log)\n",
                 static_cast<long long>(lost), static_cast<long long>(duplicates), stop_code, opt.work_dir.c_str());
    return 1;
  }
  if (!opt.keep) fs::remove_all(opt.work_dir);
  return 0;
}
