#include "core/metrics/run_metrics.h"

#include <spdlog/spdlog.h>

#include <filesystem>

namespace grpo::core {

RunMetrics::RunMetrics(const std::string& run_dir, std::int64_t resumed_step, std::int64_t total_steps,
                       std::string progress_label, std::vector<PlotPanel> panels)
    : run_dir_(run_dir),
      log_((std::filesystem::path(run_dir) / "metrics.jsonl").string(), resumed_step),
      tensorboard_(run_dir, resumed_step),
      progress_(std::move(progress_label), total_steps),
      panels_(std::move(panels)) {}

RunMetrics::~RunMetrics() = default;

void RunMetrics::write(std::int64_t step, const MetricList& metrics) {
  log_.write(step, metrics);
  tensorboard_.write_scalars(step, metrics);
}

void RunMetrics::show_progress(std::int64_t step, const std::vector<ProgressField>& fields) {
  progress_.update(step, fields);
}

std::string RunMetrics::plot_path() const { return (std::filesystem::path(run_dir_) / "curves.png").string(); }

void RunMetrics::finish() {
  if (finished_) return;
  finished_ = true;
  progress_.finish();
  try {
    write_plot(read_metric_series(log_.path()), panels_, plot_path(), std::filesystem::path(run_dir_).filename().string());
    spdlog::info("curves: {}; TensorBoard: tensorboard --logdir {}", plot_path(), run_dir_);
  } catch (const std::exception& e) {
    spdlog::warn("could not draw the curves: {}", e.what());
  }
}

const std::vector<PlotPanel>& sft_plot_panels() {
  static const std::vector<PlotPanel> panels = {
      {"Completion loss", {{"train/loss", "train"}, {"eval/loss", "held-out (eval)"}}, "nats / token"},
      {"Learning rate", {{"lr", "lr"}}, ""},
      {"Gradient norm", {{"optimizer/grad_norm", "before clipping"}}, ""},
      {"Throughput", {{"train/tokens_per_second", "tokens/s"}}, "tokens / s"},
  };
  return panels;
}

}  // namespace grpo::core

namespace grpo::core {

const std::vector<PlotPanel>& plot_panels_for(const MetricSeries& data) {
  const bool sft = data.count("train/loss") && !data.count("objective/scores");
  return sft ? sft_plot_panels() : default_training_panels();
}

}  // namespace grpo::core
