// grpo-eval: evaluate models on the held-out split as grpo-run's evaluation does, side by side. A
// thin main over grpo_eval.cpp (the grpo_cli library).
#include "apps/grpo-eval/grpo_eval.h"

int main(int argc, char** argv) { return grpo::cli::grpo_eval_main(argc, argv); }
