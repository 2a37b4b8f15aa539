// grpo-sft: the supervised warm start before GRPO (core/train/sft.h).
#pragma once

namespace grpo::cli {

int grpo_sft_main(int argc, char** argv);

}  // namespace grpo::cli
