#include "core/algo/algorithm_settings.h"

#include <sstream>
#include <stdexcept>

#include "core/config/config_access.h"
#include "grpo/sdk/config_view.h"

namespace grpo::core {

AlgorithmSettings algorithm_settings(const sdk::ConfigValue& root) {
  AlgorithmSettings s;
  const sdk::ConfigView algorithm(find_config_node(root, {"algorithm"}), "algorithm");
  // Fallbacks: the member defaults (a validated configuration holds every key).
  s.kl.kl_coef = algorithm.get_double("kl_coef", s.kl.kl_coef);
  s.kl.kl_in_reward = algorithm.get_bool("kl_in_reward", s.kl.kl_in_reward);
  const sdk::ConfigValue* coef_node = find_config_node(root, {"algorithm", "kl_coef"});
  try {
    validate(s.kl);
  } catch (const std::invalid_argument& e) {
    fail_at_key(coef_node, "algorithm.kl_coef", e.what());
  }
  const sdk::ConfigValue* estimator = find_config_node(root, {"algorithm", "kl_estimator"});
  if (s.kl.kl_coef != 0.0 && (!estimator || estimator->is_null()))
    fail_at_key(coef_node, "algorithm.kl_coef",
         "a KL coefficient of " + (std::ostringstream() << s.kl.kl_coef).str() +
             " needs an algorithm.kl_estimator (k1, k2, k3 or k4); set kl_coef: 0 for no KL term");

  const sdk::ConfigValue* aggregation_node = find_config_node(root, {"algorithm", "loss_aggregation"});
  try {
    s.loss_aggregation = parse_loss_aggregation(algorithm.get_string("loss_aggregation", to_string(s.loss_aggregation)));
  } catch (const std::invalid_argument& e) {
    fail_at_key(aggregation_node, "algorithm.loss_aggregation", e.what());
  }

  const sdk::ConfigView mismatch = algorithm.child("mismatch_correction");
  const sdk::ConfigValue* mismatch_node = find_config_node(root, {"algorithm", "mismatch_correction"});
  try {
    s.mismatch.mode = parse_mismatch_mode(mismatch.get_string("mode", to_string(s.mismatch.mode)));
    s.mismatch.sequence_reduction = parse_sequence_reduction(mismatch.get_string("sequence_reduction", to_string(s.mismatch.sequence_reduction)));
    s.mismatch.max = mismatch.get_double("max", s.mismatch.max);
    s.mismatch.min = mismatch.get_double("min", s.mismatch.min);
    s.mismatch.log_ratio_clamp = mismatch.get_double("log_ratio_clamp", s.mismatch.log_ratio_clamp);
    validate(s.mismatch);
  } catch (const std::invalid_argument& e) {
    fail_at_key(mismatch_node, "algorithm.mismatch_correction", e.what());
  }
  return s;
}

std::string describe(const AlgorithmSettings& s) {
  std::ostringstream out;
  out << "loss " << to_string(s.loss_aggregation) << ", ";
  if (!needs_reference_model(s.kl))
    out << "no KL term (no reference model)";
  else
    out << "KL " << s.kl.kl_coef << (s.kl.kl_in_reward ? " in the reward" : " in the loss") << " (reference model loaded)";
  out << ", mismatch correction " << to_string(s.mismatch.mode);
  if (s.mismatch.mode != MismatchMode::kNone) out << " (min " << s.mismatch.min << ", max " << s.mismatch.max << ")";
  return out.str();
}

}  // namespace grpo::core
