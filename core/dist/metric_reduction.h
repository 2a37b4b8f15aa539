// Metrics of a data-parallel step, reduced over ranks before rank 0 logs them.
//
// A metric is reduced by what its name says it is:
//   sum   counts and throughputs: eval/prompts, reward/verifier_calls, *_dropped, train/micro_batches,
//         *tokens_per_second (the ranks' rates add up)
//   max   time/* (the slowest rank sets the pace) and */max
//   min   */min
//   mean  everything else, weighted by each rank's share (its samples): the ranks' means of
//         equal-sized shares are the mean over the global batch.
// A metric some rank did not report (e.g. a verifier none of its samples used) is reduced over
// the ranks that did. Torch-free except reduce_metrics.
#pragma once

#include <string>
#include <vector>

#include "core/metrics/metrics_log.h"

namespace grpo::core::dist {

class Communicator;

enum class MetricReduction { kMean, kSum, kMax, kMin };

MetricReduction metric_reduction(const std::string& name);

// Every rank's metrics (rank order) and weight -> one list, names in first-seen order.
MetricList merge_rank_metrics(const std::vector<MetricList>& per_rank, const std::vector<double>& weights);

// Lossless byte form of (metrics, weight) for the all-gather, and back. decode throws
// std::runtime_error on malformed bytes.
std::string encode_metrics(const MetricList& metrics, double weight);
MetricList decode_metrics(const std::string& bytes, double* weight);

// All-gathers every rank's metrics and merges them (the same result on every rank).
MetricList reduce_metrics(Communicator& comm, const MetricList& metrics, double weight, const std::string& what);

}  // namespace grpo::core::dist
