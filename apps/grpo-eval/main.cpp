// grpo-eval: evaluate models on the held-out split as grpo-run's evaluation does, side by
// side. A thin main over the core library (core/app/).
#include "core/app/grpo_eval.h"

int main(int argc, char** argv) { return grpo::core::grpo_eval_main(argc, argv); }
