// The lines of a run's metrics.jsonl, parsed (tests of grpo-run and grpo-sft).
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace grpo::testing {

inline std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Metrics that do not measure time: what two runs of the same config must agree on.
inline std::map<std::string, nlohmann::json> deterministic_metrics(const nlohmann::json& line) {
  std::map<std::string, nlohmann::json> out;
  for (auto it = line.begin(); it != line.end(); ++it) {
    const std::string& k = it.key();
    const bool seconds = k.size() > 2 && k.compare(k.size() - 2, 2, "_s") == 0;  // rollout/wall_s, ..._per_s
    if (k.rfind("time/", 0) == 0 || k.find("per_second") != std::string::npos || seconds) continue;
    out[k] = it.value();
  }
  return out;
}

}  // namespace grpo::testing
