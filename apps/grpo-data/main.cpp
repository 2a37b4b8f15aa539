// grpo-data: write a synthetic verifiable task (train / SFT / held-out JSONL). A thin main over
// grpo_data.cpp (the grpo_cli library).
#include "apps/grpo-data/grpo_data.h"

int main(int argc, char** argv) { return grpo::cli::grpo_data_main(argc, argv); }
