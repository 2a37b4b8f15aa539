// Verifier throughput, the way the trainer's reward path calls the plugins: one verifier
// instance shared by a pool of threads, each thread calling verify() on its share of a
// workload. Workloads are JSONL files in grpo-verify's input format ({"completion",
// "ground_truth", "verifier"}), made by bench/verifiers/make_inputs.py from the public test
// fixtures:
//   math.jsonl    MATH-500 reference solutions vs their answers (the `math` verifier)
//   gsm8k.jsonl   GSM8K test reference solutions vs their final numbers (`gsm8k`)
//   ifeval.jsonl  real model responses to the IFEval prompts, with their instruction lists
//   code.jsonl    HumanEval canonical solutions with their tests (one sandboxed program each)
// Each workload runs on 1 thread, then on every core (side by side, in this run), for at
// least --seconds each (whole passes over the file). Ends with `name: value` lines:
// verdicts/s (programs/s for code) at 1 thread and at N threads, and the scaling ratio.
//
//   grpo_bench_verifiers [--seconds S] [--only math|gsm8k|ifeval|code] [--data DIR]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plugin/plugin_registry.h"
#include "core/plugin/search_path.h"
#include "grpo/sdk/verifier.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Line {
  std::string completion, ground_truth, dataset, prompt;
};

std::vector<Line> read_workload(const std::string& path, std::string* verifier) {
  std::ifstream in(path);
  if (!in) return {};
  std::vector<Line> lines;
  std::string text;
  for (std::size_t n = 1; std::getline(in, text); ++n) {
    if (text.empty()) continue;
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("completion") || !j.contains("verifier")) {
      std::fprintf(stderr, "bench_verifiers: %s:%zu: expected {\"completion\", \"ground_truth\", \"verifier\"}\n",
                   path.c_str(), n);
      std::exit(1);
    }
    *verifier = j["verifier"].get<std::string>();
    lines.push_back({j["completion"].get<std::string>(), j.value("ground_truth", json()).dump(), *verifier,
                     j.value("prompt", std::string())});
  }
  return lines;
}

struct Run {
  double per_s = 0.0, mean_score = 0.0;
  std::size_t calls = 0;
};

Run measure(const grpo::sdk::Verifier& v, const std::vector<Line>& lines, unsigned threads, double min_seconds) {
  std::atomic<std::size_t> calls{0};
  std::atomic<bool> stop{false};
  std::vector<double> score_sum(threads, 0.0);
  std::vector<std::size_t> score_n(threads, 0);
  const auto t0 = Clock::now();
  auto worker = [&](unsigned t) {
    // Whole passes: thread t takes lines t, t + threads, ... of each pass.
    while (!stop.load()) {
      for (std::size_t i = t; i < lines.size(); i += threads) {
        grpo::sdk::VerifierInput in;
        in.prompt = lines[i].prompt;
        in.completion = lines[i].completion;
        in.ground_truth = lines[i].ground_truth;
        in.dataset = lines[i].dataset;
        in.metadata = "{}";
        const grpo::sdk::VerifierResult r = v.verify(in);
        score_sum[t] += r.score;
        ++score_n[t];
        calls.fetch_add(1);
      }
      if (std::chrono::duration<double>(Clock::now() - t0).count() >= min_seconds) stop.store(true);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  Run r;
  r.calls = calls.load();
  r.per_s = static_cast<double>(r.calls) / seconds;
  double sum = 0.0;
  std::size_t n = 0;
  for (unsigned t = 0; t < threads; ++t) sum += score_sum[t], n += score_n[t];
  r.mean_score = n ? sum / static_cast<double>(n) : 0.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3.0;
  std::string only, data_dir = GRPO_BENCH_DATA_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--data" && i + 1 < argc) data_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: grpo_bench_verifiers [--seconds S] [--only math|gsm8k|ifeval|code] [--data DIR]\n");
      return 2;
    }
  }
  grpo::core::PluginSearchPath sp;
  sp.explicit_dirs = {GRPO_PLUGIN_BUILD_DIR};
  sp.use_environment = false;
  sp.use_install_dir = false;
  grpo::core::PluginRegistry registry(sp);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  struct Workload {
    std::string name, unit;
  };
  const std::vector<Workload> workloads = {{"math", "verdicts"}, {"gsm8k", "verdicts"}, {"ifeval", "verdicts"}, {"code", "programs"}};
  std::vector<std::pair<std::string, double>> headline;
  for (const Workload& w : workloads) {
    if (!only.empty() && only != w.name) continue;
    const std::string path = data_dir + "/" + w.name + ".jsonl";
    std::string verifier_name;
    const std::vector<Line> lines = read_workload(path, &verifier_name);
    if (lines.empty()) {
      std::fprintf(stderr, "bench_verifiers: %s is missing or empty (bench/verifiers/make_inputs.py makes it): skipped\n",
                   path.c_str());
      continue;
    }
    std::shared_ptr<grpo::sdk::Verifier> v = registry.create_verifier(verifier_name, nullptr, w.name);
    const Run one = measure(*v, lines, 1, seconds);
    const Run all = measure(*v, lines, cores, seconds);
    std::printf("%-7s %5zu lines  1 thread: %9.1f %s/s (mean score %.4f)   %u threads: %9.1f %s/s  scaling %.2fx\n",
                w.name.c_str(), lines.size(), one.per_s, w.unit.c_str(), one.mean_score, cores, all.per_s,
                w.unit.c_str(), all.per_s / one.per_s);
    headline.push_back({w.name + "_" + w.unit + "_per_s_1_thread", one.per_s});
    headline.push_back({w.name + "_" + w.unit + "_per_s_" + std::to_string(cores) + "_threads", all.per_s});
    headline.push_back({w.name + "_mean_score", all.mean_score});
  }
  for (const auto& [name, value] : headline) std::printf("%s: %.4g\n", name.c_str(), value);
  return 0;
}
