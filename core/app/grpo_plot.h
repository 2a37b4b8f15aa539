// grpo-plot: draws a run's training curves (RUN_DIR/metrics.jsonl) into a PNG
// (core/metrics/plot.h), to look at a run, running or finished, without Python.
#pragma once

namespace grpo::core {

// Exit codes of grpo-plot.
enum PlotExitCode : int {
  kPlotOk = 0,
  kPlotInternalError = 1,  // a bug
  kPlotUsage = 2,          // bad command line
  kPlotBadMetrics = 3,     // metrics.jsonl missing, unreadable, not JSONL (FILE:LINE), or without metrics
  kPlotWriteError = 5,     // the PNG could not be written (4 is the other apps' plugin error)
};

// grpo-plot RUN_DIR [--output PNG] [--title T]; prints "wrote PATH" on success.
int grpo_plot_main(int argc, char** argv);

}  // namespace grpo::core
