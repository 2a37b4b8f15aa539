// What the benchmarks share: timing, their small flag parser and the model shapes they run.
// Header-only; each bench is one program (`grpo_bench_*`), so these stay out of the libraries.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "core/model/model_config.h"
#include "core/runtime/threads.h"

#ifndef GRPO_BENCH_CONFIG_DIR
#define GRPO_BENCH_CONFIG_DIR "bench/configs"
#endif

namespace grpo::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The value after `--name`, or null.
inline const char* flag(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return nullptr;
}

inline bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

inline std::int64_t arg(int argc, char** argv, const char* name, std::int64_t fallback) {
  const char* v = flag(argc, argv, name);
  return v ? std::atoll(v) : fallback;
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Qwen2.5-0.5B's config.json (bench/configs/qwen2.5-0.5b/), the real-scale shape the precision
// and rollout benches run with random weights.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// /proc/cpuinfo's model name: every benchmark figure says which CPU it came from.
inline std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    auto name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "unknown";
}

// Peak resident memory (VmHWM) in MiB, and its reset (Linux >= 4.0; harmless elsewhere).
inline double peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0.0;
}

// Resident memory now (VmRSS) in MiB.
inline double current_rss_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0.0;
}

inline void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

// Re-executes this program with `args --variant NAME` (a variant measured in a process of its
// own, so that its peak RSS is its own) and returns the child's line starting with
// "variant_result ". Exits the benchmark when the child fails or prints no such line.
inline std::string run_variant_process(const std::string& args, const std::string& variant) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();  // popen's shell is not us
  const std::string command = self + " " + args + " --variant " + variant;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    std::fprintf(stderr, "cannot run %s\n", command.c_str());
    std::exit(1);
  }
  std::string result;
  char line[512];
  while (std::fgets(line, sizeof line, pipe))
    if (std::strncmp(line, "variant_result ", 15) == 0) result = line;
  const int status = ::pclose(pipe);
  if (result.empty() || status != 0) {
    std::fprintf(stderr, "variant %s failed (status %d)\n", variant.c_str(), status);
    std::exit(1);
  }
  return result;
}

// The benchmark's intra-op threads: --threads N when given (> 0), else the runtime's own choice
// (core/runtime/threads.h), logged under `who`. Returns the count.
inline int choose_threads(std::int64_t threads_flag, const std::string& who) {
  if (threads_flag > 0) {
    at::set_num_threads(static_cast<int>(threads_flag));
    return static_cast<int>(threads_flag);
  }
  return grpo::core::configure_compute_threads(who);
}

inline std::string qwen05b_config_path() { return std::string(GRPO_BENCH_CONFIG_DIR) + "/qwen2.5-0.5b/config.json"; }

}  // namespace grpo::bench
