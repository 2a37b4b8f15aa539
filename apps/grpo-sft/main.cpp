// grpo-sft: supervised warm start (cross-entropy on completion tokens). A thin main over
// grpo_sft.cpp (the grpo_cli library).
#include "apps/grpo-sft/grpo_sft.h"

int main(int argc, char** argv) { return grpo::cli::grpo_sft_main(argc, argv); }
