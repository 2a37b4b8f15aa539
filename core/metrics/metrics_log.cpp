#include "core/metrics/metrics_log.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/util/fs.h"

namespace grpo::core {

MetricsLog::MetricsLog(std::string path, std::int64_t keep_through_step) : path_(std::move(path)) {
  if (keep_through_step < 0) {
    atomic_write_file(path_, "");
  } else if (std::filesystem::exists(path_)) {
    std::ifstream in(path_);
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.value("step", std::int64_t{-1}) > keep_through_step) continue;
      } catch (const nlohmann::json::exception&) {
        continue;  // a line cut by a kill
      }
      kept += line + "\n";
    }
    atomic_write_file(path_, kept);
  }
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw std::runtime_error(path_ + ": cannot open for appending: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(std::int64_t step, const MetricList& metrics) {
  nlohmann::ordered_json j;
  j["step"] = step;
  for (const auto& [name, value] : metrics) {
    if (std::isfinite(value))
      j[name] = value;
    else
      j[name] = nullptr;
  }
  const std::string line = j.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

double metric_value(const MetricList& metrics, const std::string& name, double fallback) {
  for (const auto& [n, v] : metrics)
    if (n == name) return v;
  return fallback;
}

}  // namespace grpo::core
