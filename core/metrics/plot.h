// The training-curves figure: reads RUN_DIR/metrics.jsonl and draws the main training metrics
// as a 3x2 grid of line charts into a PNG (cairo, no torch). Used by grpo-plot.
//
// Layout and mapping, so that a test (or a reader of the PNG) can find where a point lands:
//   - panel i (row-major, 3 columns x 2 rows) draws its data inside panel_plot_area(i); the
//     frame is that rectangle grown by kPlotFramePad pixels, so markers never touch it;
//   - every panel shares one x axis: nice_axis(smallest step, largest step, kPlotXTicks, 1.0)
//     over the points of every series shown in the figure (all panels, all series); when they
//     all have the same step s, over (s, s + 1);
//   - a panel's y axis is nice_axis(smallest value, largest value) over its own series;
//   - a point (step, value) lands at
//       x_px = area.x + (step - x.min) / (x.max - x.min) * area.w
//       y_px = area.y + area.h - (value - y.min) / (y.max - y.min) * area.h
//   - series k of a panel is drawn in plot_palette()[k % size]; a series gets filled circle
//     markers (radius kPlotMarkerRadius) when it has <= kPlotMarkerMaxPoints points or is an
//     eval series (its metric starts with "eval/": evaluated every N steps, so sparse).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace grpo::core {

struct PlotSeries {
  std::string metric;  // a metrics.jsonl key, e.g. "objective/scores"
  std::string label;   // the legend text
};

struct PlotPanel {
  std::string title;
  std::vector<PlotSeries> series;
  std::string y_label;  // drawn rotated beside the y axis when non-empty (a unit: "tokens")
};

// Reward, Correct rate (train sampled + held-out eval), KL to reference, Entropy, Response
// length, Policy loss: the grid's six panels in row-major order.
const std::vector<PlotPanel>& default_training_panels();

// (step, value) points per metric.
using MetricSeries = std::map<std::string, std::vector<std::pair<double, double>>>;

// Reads a metrics.jsonl file: each non-blank line a JSON object with a numeric "step" and
// numeric (or null) metrics. When a step appears on several lines (a resumed run replays
// steps) the last line for that step replaces the earlier ones entirely. Points are sorted by
// step; nulls and non-numeric values are skipped. A final line without its newline that is
// not valid JSON is ignored: the trainer may be writing it right now.
// Throws std::runtime_error:
//   "PATH: cannot open (REASON)"
//   "PATH:LINE: not valid JSON (PARSER MESSAGE)"
//   "PATH:LINE: expected a JSON object with a numeric \"step\""
//   "PATH: no metrics to plot"   (no line holds a numeric metric besides "step")
MetricSeries read_metric_series(const std::string& metrics_jsonl);

// An axis with "nice" limits: min and max are multiples of step, and step is 1, 2 or 5 times
// a power of ten.
struct AxisRange {
  double min = 0.0, max = 1.0, step = 0.2;
  // min, min + step, ..., max (each rounded to a multiple of step, so 0.30000000000000004
  // comes out as 0.3 and -0 as 0).
  std::vector<double> ticks() const;
};

// The nice axis covering [lo, hi] with about `target_intervals` intervals: raw = (hi - lo) /
// target_intervals; step = the smallest of {1, 2, 5, 10} x 10^floor(log10(raw)) that is >=
// raw, raised to `min_step` when smaller (the step axis uses 1: steps are integers);
// min = floor(lo / step) * step, max = ceil(hi / step) * step. A zero-height range (a
// constant series) is first padded by 10% of |lo| on each side (by 1 when lo is 0).
// Examples: (0, 97) -> 0..100 step 20; (0.013, 0.087) -> 0..0.1 step 0.02;
// (0.5, 0.5) -> 0.44..0.56 step 0.02. Throws std::invalid_argument for non-finite bounds,
// lo > hi or target_intervals < 1.
AxisRange nice_axis(double lo, double hi, int target_intervals = 5, double min_step = 0.0);

// A tick label, formatted alike for the whole axis: fixed-point with as many decimals as the
// step needs ("0.5", "12", "0.02", and zero as "0.0" on a 0.5-step axis) while the axis's
// largest |limit| is in [1e-3, 1e5), otherwise scientific with the digits the step needs
// ("1.2e-03", "5e-04", "1.5e+05"; zero as "0").
std::string format_tick(double value, const AxisRange& axis);

struct PanelRect {
  double x, y, w, h;  // pixels; (x, y) is the top-left corner
};

inline constexpr int kPlotWidth = 1500, kPlotHeight = 900;
inline constexpr int kPlotXTicks = 6;         // target intervals of the shared step axis
inline constexpr double kPlotFramePad = 8.0;  // frame = data area grown by this
inline constexpr double kPlotMarkerRadius = 3.5;
inline constexpr std::size_t kPlotMarkerMaxPoints = 30;

// The data area of panel `panel_index` (0..5, row-major in the 3x2 grid) in a figure of
// width x height pixels.
PanelRect panel_plot_area(int panel_index, int width = kPlotWidth, int height = kPlotHeight);

struct PlotColor {
  std::uint8_t r, g, b;
};

// The series colours (the tab10 palette's first six): blue, orange, green, red, purple, brown.
const std::vector<PlotColor>& plot_palette();

// Draws `panels` (at most six) from `data` into a kPlotWidth x kPlotHeight PNG, written
// atomically: to "PNG_PATH.tmp-<pid>", then renamed onto png_path. A panel none of whose
// metrics has a point says "no data" instead of axes. Throws std::runtime_error naming
// png_path (and cairo's status) when the PNG cannot be written; the temp file is removed and
// png_path is left as it was. The parent directory is not created.
void write_plot(const MetricSeries& data, const std::vector<PlotPanel>& panels, const std::string& png_path,
                const std::string& title);

// read_metric_series(metrics_jsonl), then write_plot with default_training_panels(). An empty
// title uses the name of the folder holding metrics_jsonl (the run dir).
void write_training_plot(const std::string& metrics_jsonl, const std::string& png_path, const std::string& title = "");

}  // namespace grpo::core
