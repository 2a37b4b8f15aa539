// metrics.jsonl of a run: one JSON object per training step, {"step": N, "name": value, ...},
// appended and flushed as each step ends (a crash loses at most the step in progress).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace grpo::core {

using MetricList = std::vector<std::pair<std::string, double>>;

class MetricsLog {
 public:
  // Opens `path` for appending. keep_through_step >= 0 first drops every line of a step after
  // it (a resumed run rewrites what the killed run logged past its checkpoint; the rewrite is
  // atomic). -1 truncates the file (a fresh run).
  MetricsLog(std::string path, std::int64_t keep_through_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Non-finite values are written as null.
  void write(std::int64_t step, const MetricList& metrics);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The value of `name` in `metrics`, or `fallback`.
double metric_value(const MetricList& metrics, const std::string& name, double fallback = 0.0);

}  // namespace grpo::core
