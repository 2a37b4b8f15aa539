// One tool call of a multi-turn sample, as the tool rollout (core/tools/tool_rollout.h) records
// it and the trainer keeps it with the sample (core/train/rollout_batch.h) for metrics and
// samples.jsonl. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace grpo::core {

struct ToolCallRecord {
  std::string tool;          // "" for a call that names no tool
  std::string arguments;     // JSON text ("" for a malformed call)
  std::string observation;   // the tool's text (or the error), before wrapping
  bool is_error = false;     // malformed, failed, threw or timed out
  bool malformed = false;    // never reached a tool
  bool timed_out = false;
  double seconds = 0.0;
  std::int64_t observation_tokens = 0;  // tokens appended after the turn (on the turn's first call)
};

}  // namespace grpo::core
