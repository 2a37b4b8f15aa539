// grpo-verify: scores a JSONL file of completions offline with the configured verifier plugins,
// the reward path of the trainer run from the outside (docs/cli.md#grpo-verify).
#pragma once

namespace grpo::cli {

int grpo_verify_main(int argc, char** argv);

}  // namespace grpo::cli
