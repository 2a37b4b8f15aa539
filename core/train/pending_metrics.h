// The update's metrics, computed on the device micro-batch by micro-batch and read back on the
// host once per optimizer step: reading each scalar as it is made (a few dozen per micro-batch)
// makes the host wait for the GPU after every backward, so the next micro-batch's kernels
// cannot be queued while the GPU works. flush() applies the recorded MetricSums calls in the
// order they were made, so the metrics are those of reading each value at once.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <string>
#include <vector>

#include "core/train/metric_sums.h"

namespace grpo::core {

class PendingMetrics {
 public:
  using Value = std::size_t;  // a recorded scalar

  // A scalar tensor of any floating or integer dtype, on any device (kept, not read).
  Value value(const torch::Tensor& scalar);
  // A value known on the host.
  Value constant(double v);

  // MetricSums::add / add_by_suffix with these values, applied at flush().
  void add(const std::string& name, Value value, Value weight, MetricSums::Kind kind = MetricSums::Kind::kMean);
  void add_by_suffix(const std::string& name, Value value, Value weight);
  // *target += value, at flush().
  void accumulate(double* target, Value value);

  // Reads every recorded tensor back in one copy per device and applies the operations.
  void flush(MetricSums& sums);

 private:
  enum class Op { kAdd, kAddBySuffix, kAccumulate };
  struct Step {
    Op op;
    std::string name;
    MetricSums::Kind kind;
    Value value, weight;
    double* target;
  };
  std::vector<torch::Tensor> tensors_;  // [value] for tensor values, undefined for constants
  std::vector<double> constants_;
  std::vector<Step> steps_;
};

}  // namespace grpo::core
