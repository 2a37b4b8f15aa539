// Metrics accumulated over the micro-batches of a policy update (core/train/policy_update.h):
// token-weighted means, or the max / min. Names keep the order of their first add().
// Torch-free; not thread-safe (one per update).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace grpo::core {

// add(name, value, weight): a kMean entry reports sum(value * weight) / sum(weight), or the
// plain mean of the values when every weight is 0; kMax / kMin the extreme value (NaN once any
// value is NaN). A name keeps the kind of its first add().
class MetricSums {
 public:
  enum class Kind { kMean, kMax, kMin };

  void add(const std::string& name, double value, double weight, Kind kind = Kind::kMean) {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      order_.push_back(name);
      it = entries_.emplace(name, Entry{}).first;
      it->second.kind = kind;
      it->second.extreme = value;
    }
    Entry& e = it->second;
    e.weighted += value * weight;
    e.weight += weight;
    e.plain += value;
    e.count += 1;
    if (kind == Kind::kMax) e.extreme = std::isnan(value) || std::isnan(e.extreme) ? NAN : std::max(e.extreme, value);
    if (kind == Kind::kMin) e.extreme = std::isnan(value) || std::isnan(e.extreme) ? NAN : std::min(e.extreme, value);
  }

  // By name suffix: ".../max" is a max, ".../min" a min, anything else a token-weighted mean.
  void add_by_suffix(const std::string& name, double value, double weight) {
    auto ends = [&](const char* suffix) {
      const std::string s(suffix);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    add(name, value, weight, ends("/max") ? Kind::kMax : ends("/min") ? Kind::kMin : Kind::kMean);
  }

  void write(std::vector<std::pair<std::string, double>>* out) const {
    for (const std::string& name : order_) {
      const Entry& e = entries_.at(name);
      double v = e.extreme;
      if (e.kind == Kind::kMean) v = e.weight > 0 ? e.weighted / e.weight : e.plain / static_cast<double>(e.count);
      out->emplace_back(name, v);
    }
  }

 private:
  struct Entry {
    Kind kind = Kind::kMean;
    double weighted = 0.0, weight = 0.0, plain = 0.0, extreme = 0.0;
    std::int64_t count = 0;
  };
  std::vector<std::string> order_;
  std::map<std::string, Entry> entries_;
};

}  // namespace grpo::core
