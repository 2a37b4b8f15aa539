// grpo-run: train a policy with GRPO. A thin main over the core library (core/app/).
#include "core/app/grpo_run.h"

int main(int argc, char** argv) { return grpo::core::grpo_run_main(argc, argv); }
