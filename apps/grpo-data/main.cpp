// grpo-data: write a synthetic verifiable task (train / SFT / held-out JSONL). A thin main over
// the core library (core/app/).
#include "core/app/grpo_data.h"

int main(int argc, char** argv) { return grpo::core::grpo_data_main(argc, argv); }
