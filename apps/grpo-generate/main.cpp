// grpo-generate: sample completions for a JSONL file of prompts with a rollout backend plugin.
// A thin main over core/app/.
#include "core/app/grpo_generate.h"

int main(int argc, char** argv) { return grpo::core::grpo_generate_main(argc, argv); }
