// grpo-run: train a policy with GRPO. A thin main over grpo_run.cpp (the grpo_cli library).
#include "apps/grpo-run/grpo_run.h"

int main(int argc, char** argv) { return grpo::cli::grpo_run_main(argc, argv); }
