// grpo-data: writes the synthetic verifiable tasks of core/data/synthetic_tasks.h (train, SFT
// and held-out JSONL splits) for the quickstart demo.
#pragma once

namespace grpo::cli {

int grpo_data_main(int argc, char** argv);

}  // namespace grpo::cli
