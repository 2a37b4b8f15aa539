#include "core/algo/modes.h"

#include <stdexcept>

#include "core/util/strings.h"

namespace grpo::core {

namespace {

template <typename Enum>
Enum parse(const std::vector<std::string>& names, const std::string& name, const char* what) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<Enum>(i);
  throw std::invalid_argument(std::string("unknown ") + what + " \"" + name + "\"; expected one of " + join(names, ", ") +
                              did_you_mean(name, names));
}

}  // namespace

// Function-local statics: usable from other translation units' static initializers (the schema).
const std::vector<std::string>& loss_aggregation_names() {
  static const std::vector<std::string> names = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                                 "seq-mean-token-sum-norm"};
  return names;
}
const std::vector<std::string>& mismatch_mode_names() {
  static const std::vector<std::string> names = {"none", "token_truncate", "token_mask", "sequence_truncate",
                                                 "sequence_mask"};
  return names;
}
const std::vector<std::string>& sequence_reduction_names() {
  static const std::vector<std::string> names = {"sum", "mean"};
  return names;
}

const char* to_string(LossAggregation mode) { return loss_aggregation_names().at(static_cast<std::size_t>(mode)).c_str(); }
const char* to_string(MismatchMode mode) { return mismatch_mode_names().at(static_cast<std::size_t>(mode)).c_str(); }
const char* to_string(SequenceReduction reduction) {
  return sequence_reduction_names().at(static_cast<std::size_t>(reduction)).c_str();
}

LossAggregation parse_loss_aggregation(const std::string& name) {
  return parse<LossAggregation>(loss_aggregation_names(), name, "loss aggregation");
}
MismatchMode parse_mismatch_mode(const std::string& name) {
  return parse<MismatchMode>(mismatch_mode_names(), name, "mismatch correction mode");
}
SequenceReduction parse_sequence_reduction(const std::string& name) {
  return parse<SequenceReduction>(sequence_reduction_names(), name, "sequence reduction");
}

}  // namespace grpo::core
