#include "core/dist/metric_reduction.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>

#include "core/dist/process_group.h"

namespace grpo::core::dist {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T take(const std::string& in, std::size_t& pos) {
  if (pos + sizeof(T) > in.size()) throw std::runtime_error("metrics from another rank are truncated");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

}  // namespace

MetricReduction metric_reduction(const std::string& name) {
  if (name.rfind("time/", 0) == 0 || ends_with(name, "/max")) return MetricReduction::kMax;
  if (ends_with(name, "/min")) return MetricReduction::kMin;
  if (name == "eval/prompts" || name == "reward/verifier_calls" || name == "train/micro_batches" ||
      ends_with(name, "_dropped") || name.find("tokens_per_second") != std::string::npos)
    return MetricReduction::kSum;
  return MetricReduction::kMean;
}

MetricList merge_rank_metrics(const std::vector<MetricList>& per_rank, const std::vector<double>& weights) {
  if (per_rank.size() != weights.size()) throw std::invalid_argument("merge_rank_metrics: one weight per rank expected");
  struct Acc {
    double sum = 0.0, weighted = 0.0, weight = 0.0, extreme = 0.0;
    std::size_t count = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Acc> acc;
  for (std::size_t r = 0; r < per_rank.size(); ++r)
    for (const auto& [name, value] : per_rank[r]) {
      auto it = acc.find(name);
      if (it == acc.end()) {
        order.push_back(name);
        it = acc.emplace(name, Acc{}).first;
        it->second.extreme = value;
      }
      Acc& a = it->second;
      a.sum += value;
      a.weighted += value * weights[r];
      a.weight += weights[r];
      ++a.count;
      const MetricReduction kind = metric_reduction(name);
      if (kind == MetricReduction::kMax) a.extreme = std::isnan(value) || std::isnan(a.extreme) ? NAN : std::max(a.extreme, value);
      if (kind == MetricReduction::kMin) a.extreme = std::isnan(value) || std::isnan(a.extreme) ? NAN : std::min(a.extreme, value);
    }
  MetricList out;
  for (const std::string& name : order) {
    const Acc& a = acc.at(name);
    double v = a.extreme;
    switch (metric_reduction(name)) {
      case MetricReduction::kSum: v = a.sum; break;
      case MetricReduction::kMean: v = a.weight > 0 ? a.weighted / a.weight : a.sum / static_cast<double>(a.count); break;
      default: break;
    }
    out.emplace_back(name, v);
  }
  return out;
}

std::string encode_metrics(const MetricList& metrics, double weight) {
  std::string out;
  put(out, weight);
  put(out, static_cast<std::uint64_t>(metrics.size()));
  for (const auto& [name, value] : metrics) {
    put(out, static_cast<std::uint64_t>(name.size()));
    out += name;
    put(out, value);
  }
  return out;
}

MetricList decode_metrics(const std::string& bytes, double* weight) {
  std::size_t pos = 0;
  const double w = take<double>(bytes, pos);
  if (weight) *weight = w;
  const auto n = take<std::uint64_t>(bytes, pos);
  MetricList out;
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto len = take<std::uint64_t>(bytes, pos);
    if (len > bytes.size() - pos) throw std::runtime_error("metrics from another rank are truncated");
    std::string name = bytes.substr(pos, len);
    pos += len;
    out.emplace_back(std::move(name), take<double>(bytes, pos));
  }
  if (pos != bytes.size()) throw std::runtime_error("metrics from another rank have trailing bytes");
  return out;
}

MetricList reduce_metrics(Communicator& comm, const MetricList& metrics, double weight, const std::string& what) {
  const std::vector<std::string> all = comm.all_gather_bytes(encode_metrics(metrics, weight), what);
  std::vector<MetricList> per_rank;
  std::vector<double> weights(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) per_rank.push_back(decode_metrics(all[r], &weights[r]));
  return merge_rank_metrics(per_rank, weights);
}

}  // namespace grpo::core::dist
