// grpo-sft: supervised warm start (cross-entropy on completion tokens). A thin main over the
// core library (core/app/).
#include "core/app/grpo_sft.h"

int main(int argc, char** argv) { return grpo::core::grpo_sft_main(argc, argv); }
