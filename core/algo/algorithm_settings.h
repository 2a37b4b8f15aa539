// The runtime's own algorithm settings — every algorithm.* key that is not a component:
// KL coefficient and placement, loss aggregation, mismatch correction — read from a validated
// configuration and checked across keys, with errors that name the key's file and line.
#pragma once

#include <string>

#include "core/algo/kl_penalty.h"
#include "core/algo/loss_aggregation.h"
#include "core/algo/mismatch_correction.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {

struct AlgorithmSettings {
  KlSettings kl;
  LossAggregation loss_aggregation = LossAggregation::kTokenMean;
  MismatchCorrectionOptions mismatch;
};

// Throws sdk::ConfigError, e.g. "run.yaml:4:12: algorithm.kl_coef: 0.05 needs an
// algorithm.kl_estimator (k1, k2, k3 or k4)".
AlgorithmSettings algorithm_settings(const sdk::ConfigValue& root);

// One line for logs and --validate: "loss token-mean, KL 0.04 in the loss (reference model
// loaded), mismatch correction none".
std::string describe(const AlgorithmSettings& settings);

}  // namespace grpo::core
