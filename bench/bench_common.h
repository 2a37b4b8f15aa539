// What the benchmarks share: timing, their small flag parser and the model shapes they run.
// Header-only; each bench is one program (`grpo_bench_*`), so these stay out of the libraries.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/model_config.h"

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
inline std::string qwen05b_config_path() { return std::string(GRPO_BENCH_CONFIG_DIR) + "/qwen2.5-0.5b/config.json"; }

}  // namespace grpo::bench
