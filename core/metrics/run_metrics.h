// Where a run's metrics go, one place for grpo-run and grpo-sft: every step's metrics to
// RUN_DIR/metrics.jsonl and to a TensorBoard event file in RUN_DIR (scalars, so that
// `tensorboard --logdir runs/` shows every metric), a progress line on the console, and at the
// end the curves PNG (RUN_DIR/curves.png, also `grpo-plot RUN_DIR`). Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/metrics/metrics_log.h"
#include "core/metrics/plot.h"
#include "core/metrics/progress.h"
#include "core/metrics/tfevents.h"

namespace grpo::core {

class RunMetrics {
 public:
  // resumed_step >= 0: a resumed run (metrics.jsonl keeps its lines up to that step and
  // TensorBoard is told to drop later points of the killed run); -1: a fresh run.
  // `panels`: the curves of the PNG (default_training_panels() for GRPO).
  RunMetrics(const std::string& run_dir, std::int64_t resumed_step, std::int64_t total_steps, std::string progress_label,
             std::vector<PlotPanel> panels);
  ~RunMetrics();

  // One step's metrics (step 0: the baseline evaluation) to metrics.jsonl and TensorBoard.
  void write(std::int64_t step, const MetricList& metrics);
  // The progress line after `step` of total_steps.
  void show_progress(std::int64_t step, const std::vector<ProgressField>& fields);
  // Ends the progress line and writes RUN_DIR/curves.png (a failure to draw is logged, not
  // thrown: the run's results are already on disk).
  void finish();

  const std::string& metrics_path() const { return log_.path(); }
  std::string plot_path() const;

 private:
  std::string run_dir_;
  MetricsLog log_;
  TensorBoardWriter tensorboard_;
  ProgressDisplay progress_;
  std::vector<PlotPanel> panels_;
  bool finished_ = false;
};

// The panels of grpo-sft's curves: loss (train and held-out), learning rate, grad norm,
// throughput.
const std::vector<PlotPanel>& sft_plot_panels();

// The panels for a run's metrics: sft_plot_panels() for a grpo-sft run (train/loss and no
// reward), else default_training_panels(); what grpo-plot draws.
const std::vector<PlotPanel>& plot_panels_for(const MetricSeries& data);

}  // namespace grpo::core
