// The named modes of the runtime's algorithm settings (torch-free, so the config schema can
// take its choices from here): loss aggregation and rollout/trainer mismatch correction.
#pragma once

#include <string>
#include <vector>

namespace grpo::core {

enum class LossAggregation { kTokenMean, kSeqMeanTokenMean, kSeqMeanTokenSum, kSeqMeanTokenSumNorm };
enum class MismatchMode { kNone, kTokenTruncate, kTokenMask, kSequenceTruncate, kSequenceMask };
enum class SequenceReduction { kSum, kMean };

// Names in enum order: "token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
// "seq-mean-token-sum-norm" / "none", "token_truncate", "token_mask", "sequence_truncate",
// "sequence_mask" / "sum", "mean".
const std::vector<std::string>& loss_aggregation_names();
const std::vector<std::string>& mismatch_mode_names();
const std::vector<std::string>& sequence_reduction_names();

const char* to_string(LossAggregation mode);
const char* to_string(MismatchMode mode);
const char* to_string(SequenceReduction reduction);

// Anything but a listed name throws std::invalid_argument listing the names.
LossAggregation parse_loss_aggregation(const std::string& name);
MismatchMode parse_mismatch_mode(const std::string& name);
SequenceReduction parse_sequence_reduction(const std::string& name);

}  // namespace grpo::core
