#include "core/train/pending_metrics.h"

#include <map>

namespace grpo::core {

PendingMetrics::Value PendingMetrics::value(const torch::Tensor& scalar) {
  tensors_.push_back(scalar.detach().reshape({}).to(torch::kDouble));
  constants_.push_back(0.0);
  return tensors_.size() - 1;
}

PendingMetrics::Value PendingMetrics::constant(double v) {
  tensors_.emplace_back();
  constants_.push_back(v);
  return tensors_.size() - 1;
}

void PendingMetrics::add(const std::string& name, Value value, Value weight, MetricSums::Kind kind) {
  steps_.push_back({Op::kAdd, name, kind, value, weight, nullptr});
}

void PendingMetrics::add_by_suffix(const std::string& name, Value value, Value weight) {
  steps_.push_back({Op::kAddBySuffix, name, MetricSums::Kind::kMean, value, weight, nullptr});
}

void PendingMetrics::accumulate(double* target, Value value) {
  steps_.push_back({Op::kAccumulate, "", MetricSums::Kind::kMean, value, 0, target});
}

void PendingMetrics::flush(MetricSums& sums) {
  // One stack and one copy per device (all on the policy's, in practice).
  std::map<std::string, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].defined()) by_device[tensors_[i].device().str()].push_back(i);
  std::vector<double> values = constants_;
  for (const auto& [device, indices] : by_device) {
    std::vector<torch::Tensor> parts;
    parts.reserve(indices.size());
    for (std::size_t i : indices) parts.push_back(tensors_[i]);
    const torch::Tensor host = torch::stack(parts).to(torch::kCPU).contiguous();
    const double* data = host.data_ptr<double>();
    for (std::size_t k = 0; k < indices.size(); ++k) values[indices[k]] = data[k];
  }
  for (const Step& s : steps_) {
    switch (s.op) {
      case Op::kAdd: sums.add(s.name, values[s.value], values[s.weight], s.kind); break;
      case Op::kAddBySuffix: sums.add_by_suffix(s.name, values[s.value], values[s.weight]); break;
      case Op::kAccumulate: *s.target += values[s.value]; break;
    }
  }
  tensors_.clear();
  constants_.clear();
  steps_.clear();
}

}  // namespace grpo::core
