// grpo-plot: draws a run's training curves (RUN_DIR/metrics.jsonl) into a PNG
// (core/metrics/plot.h), to look at a run, running or finished, without Python.
#pragma once

namespace grpo::cli {

// grpo-plot RUN_DIR [--output PNG] [--title T]; prints "wrote PATH" on success. Exit codes:
// apps/cli/exit_codes.h (docs/cli.md#grpo-plot says which).
int grpo_plot_main(int argc, char** argv);

}  // namespace grpo::cli
