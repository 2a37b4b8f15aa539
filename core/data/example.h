// One training or evaluation row after its columns are mapped (core/data/dataset.h): the
// prompt, what the verifiers compare against, and where it came from (for error messages).
// Torch-free.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/tokenizer/chat_template.h"

namespace grpo::core {

// One thing a verifier checks: a ground truth (JSON text: a string, number, list or object,
// as in the dataset) and the verifier label that selects the verifier ("" = every
// configured verifier). open-instruct rows may carry several, aligned lists of both.
struct VerificationTarget {
  std::string label;         // the row's `dataset` / `data_source` value, "" when absent
  std::string ground_truth;  // JSON text
};

struct Example {
  std::string source;     // the JSONL file
  std::size_t line = 0;   // 1-based line in `source`
  // The prompt: a chat (rendered with the chat template) or, when `messages` is empty, plain
  // text used as is (TRL's "standard" string prompt).
  std::vector<ChatMessage> messages;
  std::string text;
  std::vector<VerificationTarget> targets;  // at least one, unless DataOptions::require_ground_truth is off
  // The supervised target (grpo-sft): TRL's `completion` column or the trailing assistant
  // message of an open-instruct chat (which is then not part of `messages`); "" when absent.
  std::string completion;
  std::string metadata = "{}";               // JSON object text: the row's other columns

  // "data/train.jsonl:12" for messages.
  std::string where() const { return source + ":" + std::to_string(line); }
};

}  // namespace grpo::core
