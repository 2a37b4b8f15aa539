// grpo-eval: evaluates one or more models on data.eval exactly as grpo-run's evaluation does
// (run_evaluation in core/train/trainer.h) and prints their metrics side by side.
#pragma once

namespace grpo::cli {

int grpo_eval_main(int argc, char** argv);

}  // namespace grpo::cli
