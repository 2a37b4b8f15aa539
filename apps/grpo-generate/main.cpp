// grpo-generate: sample completions for a JSONL file of prompts with a rollout backend plugin. A
// thin main over grpo_generate.cpp (the grpo_cli library).
#include "apps/grpo-generate/grpo_generate.h"

int main(int argc, char** argv) { return grpo::cli::grpo_generate_main(argc, argv); }
