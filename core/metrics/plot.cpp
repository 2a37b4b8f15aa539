#include "core/metrics/plot.h"

#include <cairo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace grpo::core {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kFont = "DejaVu Sans";
constexpr int kColumns = 3, kRows = 2;
// The figure title's band, and the margins of a grid cell around its data area: room for the
// panel title above, the y tick labels (and the rotated unit) on the left, the x tick labels
// and "step" below.
constexpr double kTitleBand = 56.0;
constexpr double kCellLeft = 92.0, kCellRight = 30.0, kCellTop = 46.0, kCellBottom = 62.0;
constexpr double kTickFontSize = 11.5, kPanelTitleSize = 15.0, kFigureTitleSize = 20.0, kLegendFontSize = 11.5;

struct Rgb {
  double r, g, b;
};
constexpr Rgb kInk{0.15, 0.15, 0.15}, kTickInk{0.30, 0.30, 0.30}, kFrame{0.55, 0.55, 0.55}, kGrid{0.91, 0.91, 0.91},
    kFaint{0.60, 0.60, 0.60};

void set_rgb(cairo_t* cr, const Rgb& c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }
void set_rgb(cairo_t* cr, const PlotColor& c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

void set_font(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double text_width(cairo_t* cr, const std::string& text) {
  cairo_text_extents_t ext;
  cairo_text_extents(cr, text.c_str(), &ext);
  return ext.x_advance;
}

// Draws `text` with its baseline at y; align: 0 left, 0.5 centred, 1 right of x.
void draw_text(cairo_t* cr, const std::string& text, double x, double y, double align) {
  cairo_move_to(cr, x - align * text_width(cr, text), y);
  cairo_show_text(cr, text.c_str());
}

// The vertical offset that centres a line of the current font on y (cap height / 2).
double middle_offset(cairo_t* cr) {
  cairo_text_extents_t ext;
  cairo_text_extents(cr, "0", &ext);
  return -ext.y_bearing / 2.0;
}

// Hairlines on pixel centres stay one pixel wide and crisp instead of two grey ones.
double crisp(double v) { return std::floor(v) + 0.5; }

bool is_eval_metric(const std::string& metric) { return metric.rfind("eval/", 0) == 0; }

const std::vector<std::pair<double, double>>* points_of(const MetricSeries& data, const std::string& metric) {
  auto it = data.find(metric);
  return it == data.end() || it->second.empty() ? nullptr : &it->second;
}

bool panel_has_data(const MetricSeries& data, const PlotPanel& panel) {
  return std::any_of(panel.series.begin(), panel.series.end(),
                     [&](const PlotSeries& s) { return points_of(data, s.metric) != nullptr; });
}

struct Mapping {
  PanelRect area;
  AxisRange x, y;
  double px(double step) const { return area.x + (step - x.min) / (x.max - x.min) * area.w; }
  double py(double value) const { return area.y + area.h - (value - y.min) / (y.max - y.min) * area.h; }
};

void draw_marker(cairo_t* cr, double x, double y) {
  cairo_new_sub_path(cr);
  cairo_arc(cr, x, y, kPlotMarkerRadius, 0.0, 2.0 * M_PI);
  cairo_fill(cr);
}

bool wants_markers(const PlotSeries& series, std::size_t points) {
  return points <= kPlotMarkerMaxPoints || is_eval_metric(series.metric);
}

void draw_series(cairo_t* cr, const Mapping& m, const PlotSeries& series,
                 const std::vector<std::pair<double, double>>& points, const PlotColor& colour) {
  set_rgb(cr, colour);
  // Thousands of noisy steps at 2 px merge into a solid band; a thinner line keeps the trend legible.
  cairo_set_line_width(cr, points.size() > 300 ? 1.2 : 2.0);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  cairo_new_path(cr);
  for (const auto& [step, value] : points) cairo_line_to(cr, m.px(step), m.py(value));
  cairo_stroke(cr);
  if (wants_markers(series, points.size()))
    for (const auto& [step, value] : points) draw_marker(cr, m.px(step), m.py(value));
}

// The legend goes in the corner of the frame that covers the fewest data points.
void draw_legend(cairo_t* cr, const Mapping& m, const MetricSeries& data, const PlotPanel& panel) {
  set_font(cr, kLegendFontSize);
  constexpr double kSample = 22.0, kGap = 6.0, kPad = 7.0, kRowHeight = 17.0;
  std::vector<std::string> labels;
  double widest = 0.0;
  for (const PlotSeries& s : panel.series) {
    labels.push_back(points_of(data, s.metric) ? s.label : s.label + " (no data)");
    widest = std::max(widest, text_width(cr, labels.back()));
  }
  const double w = kPad + kSample + kGap + widest + kPad, h = kPad + kRowHeight * labels.size() + kPad - 4.0;
  const double inset = 4.0;
  const double left = m.area.x - kPlotFramePad + inset, right = m.area.x + m.area.w + kPlotFramePad - inset - w;
  const double top = m.area.y - kPlotFramePad + inset, bottom = m.area.y + m.area.h + kPlotFramePad - inset - h;
  const std::pair<double, double> corners[] = {{right, top}, {left, top}, {right, bottom}, {left, bottom}};
  std::size_t best = 0, best_hits = std::numeric_limits<std::size_t>::max();
  for (std::size_t c = 0; c < 4; ++c) {
    const auto [cx, cy] = corners[c];
    std::size_t hits = 0;
    for (const PlotSeries& s : panel.series)
      if (const auto* pts = points_of(data, s.metric))
        for (std::size_t i = 0; i < pts->size(); ++i) {
          // Sample each segment too, so a line crossing the box counts even between points.
          const auto& [x0, y0] = (*pts)[i];
          const auto& [x1, y1] = (*pts)[i + 1 < pts->size() ? i + 1 : i];
          for (int k = 0; k < 4; ++k) {
            const double t = k / 4.0, x = m.px(x0 + t * (x1 - x0)), y = m.py(y0 + t * (y1 - y0));
            hits += x >= cx - 4 && x <= cx + w + 4 && y >= cy - 4 && y <= cy + h + 4;
          }
        }
    if (hits < best_hits) best = c, best_hits = hits;
  }
  const auto [bx, by] = corners[best];
  cairo_rectangle(cr, bx, by, w, h);
  cairo_set_source_rgba(cr, 1.0, 1.0, 1.0, 0.88);
  cairo_fill_preserve(cr);
  set_rgb(cr, kGrid);
  cairo_set_line_width(cr, 1.0);
  cairo_stroke(cr);
  const double mid = middle_offset(cr);
  for (std::size_t k = 0; k < panel.series.size(); ++k) {
    const double row_y = by + kPad + kRowHeight * k + kRowHeight / 2.0 - 2.0;
    const PlotColor& colour = plot_palette()[k % plot_palette().size()];
    set_rgb(cr, colour);
    cairo_set_line_width(cr, 2.0);
    cairo_move_to(cr, bx + kPad, row_y);
    cairo_line_to(cr, bx + kPad + kSample, row_y);
    cairo_stroke(cr);
    const auto* pts = points_of(data, panel.series[k].metric);
    if (pts && wants_markers(panel.series[k], pts->size())) draw_marker(cr, bx + kPad + kSample / 2.0, row_y);
    set_rgb(cr, kInk);
    draw_text(cr, labels[k], bx + kPad + kSample + kGap, row_y + mid, 0.0);
  }
}

void draw_panel(cairo_t* cr, int index, const PlotPanel& panel, const MetricSeries& data, const AxisRange& x_axis,
                int width, int height) {
  const PanelRect area = panel_plot_area(index, width, height);
  const PanelRect frame{area.x - kPlotFramePad, area.y - kPlotFramePad, area.w + 2 * kPlotFramePad,
                        area.h + 2 * kPlotFramePad};
  set_font(cr, kPanelTitleSize, true);
  set_rgb(cr, kInk);
  draw_text(cr, panel.title, frame.x + frame.w / 2.0, frame.y - 12.0, 0.5);

  if (!panel_has_data(data, panel)) {
    // A faint outline keeps the grid's rhythm; no ticks, so nothing reads as a zero-valued curve.
    set_rgb(cr, kGrid);
    cairo_set_line_width(cr, 1.0);
    cairo_rectangle(cr, crisp(frame.x), crisp(frame.y), std::round(frame.w), std::round(frame.h));
    cairo_stroke(cr);
    set_font(cr, 14.0);
    set_rgb(cr, kFaint);
    draw_text(cr, "no data", frame.x + frame.w / 2.0, frame.y + frame.h / 2.0 + middle_offset(cr), 0.5);
    return;
  }

  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const PlotSeries& s : panel.series)
    if (const auto* pts = points_of(data, s.metric))
      for (const auto& point : *pts) lo = std::min(lo, point.second), hi = std::max(hi, point.second);
  const Mapping m{area, x_axis, nice_axis(lo, hi)};

  // Grid, frame, ticks and their labels.
  cairo_set_line_width(cr, 1.0);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_BUTT);
  set_rgb(cr, kGrid);
  for (double t : m.x.ticks()) {
    cairo_move_to(cr, crisp(m.px(t)), frame.y);
    cairo_line_to(cr, crisp(m.px(t)), frame.y + frame.h);
  }
  for (double t : m.y.ticks()) {
    cairo_move_to(cr, frame.x, crisp(m.py(t)));
    cairo_line_to(cr, frame.x + frame.w, crisp(m.py(t)));
  }
  cairo_stroke(cr);
  set_rgb(cr, kFrame);
  cairo_rectangle(cr, crisp(frame.x), crisp(frame.y), std::round(frame.w), std::round(frame.h));
  for (double t : m.x.ticks()) {
    cairo_move_to(cr, crisp(m.px(t)), crisp(frame.y + frame.h));
    cairo_line_to(cr, crisp(m.px(t)), crisp(frame.y + frame.h) + 4.0);
  }
  for (double t : m.y.ticks()) {
    cairo_move_to(cr, crisp(frame.x), crisp(m.py(t)));
    cairo_line_to(cr, crisp(frame.x) - 4.0, crisp(m.py(t)));
  }
  cairo_stroke(cr);

  set_font(cr, kTickFontSize);
  set_rgb(cr, kTickInk);
  const double mid = middle_offset(cr);
  for (double t : m.x.ticks()) draw_text(cr, format_tick(t, m.x), m.px(t), frame.y + frame.h + 19.0, 0.5);
  for (double t : m.y.ticks()) draw_text(cr, format_tick(t, m.y), frame.x - 8.0, m.py(t) + mid, 1.0);
  set_font(cr, 12.5);
  set_rgb(cr, kInk);
  draw_text(cr, "step", frame.x + frame.w / 2.0, frame.y + frame.h + 40.0, 0.5);
  if (!panel.y_label.empty()) {
    cairo_save(cr);
    const double cell_x = area.x - kCellLeft;
    cairo_move_to(cr, cell_x + 20.0, frame.y + frame.h / 2.0 + text_width(cr, panel.y_label) / 2.0);
    cairo_rotate(cr, -M_PI / 2.0);
    cairo_show_text(cr, panel.y_label.c_str());
    cairo_restore(cr);
  }

  // The curves, clipped to the frame (a point exactly on the axis limit keeps its marker whole).
  cairo_save(cr);
  cairo_rectangle(cr, frame.x, frame.y, frame.w, frame.h);
  cairo_clip(cr);
  for (std::size_t k = 0; k < panel.series.size(); ++k)
    if (const auto* pts = points_of(data, panel.series[k].metric))
      draw_series(cr, m, panel.series[k], *pts, plot_palette()[k % plot_palette().size()]);
  cairo_restore(cr);

  if (panel.series.size() >= 2) draw_legend(cr, m, data, panel);
}

// nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 15: ..." as
// "column 15: ...": the id adds nothing and its line is always 1 (one line is parsed at a time).
std::string parse_error_text(std::string what) {
  if (const auto close = what.find("] "); !what.empty() && what[0] == '[' && close != std::string::npos)
    what.erase(0, close + 2);
  if (const auto column = what.find("column ");
      what.rfind("parse error at line ", 0) == 0 && column != std::string::npos)
    what.erase(0, column);
  return what;
}

}  // namespace

const std::vector<PlotPanel>& default_training_panels() {
  static const std::vector<PlotPanel> panels = {
      {"Reward", {{"objective/scores", "reward"}}, ""},
      {"Correct rate",
       {{"objective/verifiable_correct_rate", "train (sampled)"}, {"eval/verifiable_correct_rate", "held-out (eval)"}},
       ""},
      {"KL to reference", {{"objective/kl", "KL"}}, ""},
      {"Entropy", {{"objective/entropy", "entropy"}}, ""},
      {"Response length", {{"val/sequence_lengths", "mean length"}}, "tokens"},
      {"Policy loss", {{"loss/policy_avg", "policy loss"}}, ""},
  };
  return panels;
}

const std::vector<PlotColor>& plot_palette() {
  static const std::vector<PlotColor> palette = {
      {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189}, {140, 86, 75},
  };
  return palette;
}

MetricSeries read_metric_series(const std::string& metrics_jsonl) {
  std::error_code ec;
  if (fs::is_directory(metrics_jsonl, ec))
    throw std::runtime_error(metrics_jsonl + ": cannot open (it is a directory)");
  std::ifstream in(metrics_jsonl, std::ios::binary);
  if (!in) throw std::runtime_error(metrics_jsonl + ": cannot open (" + std::strerror(errno) + ")");

  std::map<double, json> by_step;  // a later line for the same step replaces the earlier one
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    const bool complete = !in.eof();  // getline hit the newline, not the end of the file
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = metrics_jsonl + ":" + std::to_string(line) + ": ";
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      if (!complete) break;  // the writer's current line, not yet finished
      throw std::runtime_error(where + "not valid JSON (" + parse_error_text(e.what()) + ")");
    }
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number() || !std::isfinite(j["step"].get<double>()))
      throw std::runtime_error(where + "expected a JSON object with a numeric \"step\"");
    const double step = j["step"].get<double>();
    by_step[step] = std::move(j);
  }
  if (in.bad()) throw std::runtime_error(metrics_jsonl + ": cannot read (" + std::strerror(errno) + ")");

  MetricSeries series;
  for (const auto& [step, record] : by_step)
    for (const auto& [name, value] : record.items())
      if (name != "step" && value.is_number() && std::isfinite(value.get<double>()))
        series[name].emplace_back(step, value.get<double>());
  if (series.empty()) throw std::runtime_error(metrics_jsonl + ": no metrics to plot");
  return series;
}

std::vector<double> AxisRange::ticks() const {
  const long n = std::lround((max - min) / step);
  if (n < 0 || n > 1000) throw std::logic_error("AxisRange::ticks: more than 1000 ticks");
  std::vector<double> out;
  for (long i = 0; i <= n; ++i) {
    double t = std::round(min / step + static_cast<double>(i)) * step;
    if (std::fabs(t) < step * 1e-9) t = 0.0;  // no "-0"
    out.push_back(t);
  }
  return out;
}

AxisRange nice_axis(double lo, double hi, int target_intervals, double min_step) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || target_intervals < 1)
    throw std::invalid_argument("nice_axis: needs finite lo <= hi and target_intervals >= 1");
  // A range this thin relative to its values is a constant series (and would underflow the step).
  if (hi - lo <= 1e-12 * std::max(std::fabs(lo), std::fabs(hi))) {
    const double pad = lo != 0.0 ? std::fabs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  double raw = hi / target_intervals - lo / target_intervals;  // no overflow near DBL_MAX
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  // The tolerance absorbs pow/log10 rounding, so 0.02 / 0.01 counts as 2, not 2.0000000000000004.
  const double mult = norm <= 1.0 + 1e-9 ? 1.0 : norm <= 2.0 + 1e-9 ? 2.0 : norm <= 5.0 + 1e-9 ? 5.0 : 10.0;
  AxisRange axis;
  axis.step = std::max(mult * magnitude, min_step);
  axis.min = std::floor(lo / axis.step + 1e-9) * axis.step;
  axis.max = std::ceil(hi / axis.step - 1e-9) * axis.step;
  if (axis.max <= axis.min) axis.max = axis.min + axis.step;
  return axis;
}

std::string format_tick(double value, const AxisRange& axis) {
  if (std::fabs(value) < axis.step * 1e-9) value = 0.0;  // no "-0.0"
  const double big = std::max(std::fabs(axis.min), std::fabs(axis.max));
  const int step_exp = static_cast<int>(std::floor(std::log10(axis.step) + 1e-9));
  char buf[64];
  if (big >= 1e5 || big < 1e-3) {
    if (value == 0.0) return "0";
    const int big_exp = static_cast<int>(std::floor(std::log10(big) + 1e-9));
    std::snprintf(buf, sizeof buf, "%.*e", std::clamp(big_exp - step_exp, 0, 3), value);
  } else {
    std::snprintf(buf, sizeof buf, "%.*f", std::clamp(-step_exp, 0, 10), value);
  }
  return buf;
}

PanelRect panel_plot_area(int panel_index, int width, int height) {
  if (panel_index < 0 || panel_index >= kColumns * kRows)
    throw std::out_of_range("panel_plot_area: panel index " + std::to_string(panel_index) + " is not in 0..5");
  const double cell_w = static_cast<double>(width) / kColumns;
  const double cell_h = (static_cast<double>(height) - kTitleBand) / kRows;
  const double cell_x = cell_w * (panel_index % kColumns), cell_y = kTitleBand + cell_h * (panel_index / kColumns);
  return PanelRect{cell_x + kCellLeft, cell_y + kCellTop, cell_w - kCellLeft - kCellRight,
                   cell_h - kCellTop - kCellBottom};
}

void write_plot(const MetricSeries& data, const std::vector<PlotPanel>& panels, const std::string& png_path,
                const std::string& title) {
  if (panels.size() > static_cast<std::size_t>(kColumns * kRows))
    throw std::invalid_argument("write_plot: at most 6 panels, got " + std::to_string(panels.size()));
  // Points that the panels show decide the shared step axis.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const PlotPanel& panel : panels)
    for (const PlotSeries& s : panel.series)
      if (const auto* pts = points_of(data, s.metric))
        lo = std::min(lo, pts->front().first), hi = std::max(hi, pts->back().first);
  if (hi == lo) hi = lo + 1.0;  // one step (the baseline eval alone): no axis reaching below step 0
  const AxisRange x_axis = std::isfinite(lo) ? nice_axis(lo, hi, kPlotXTicks, 1.0) : AxisRange{};

  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, kPlotWidth, kPlotHeight), cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> context(cairo_create(surface.get()), cairo_destroy);
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1.0, 1.0, 1.0);
  cairo_paint(cr);
  if (!title.empty()) {
    set_font(cr, kFigureTitleSize, true);
    set_rgb(cr, kInk);
    draw_text(cr, title, kPlotWidth / 2.0, 36.0, 0.5);
  }
  for (std::size_t i = 0; i < panels.size(); ++i)
    draw_panel(cr, static_cast<int>(i), panels[i], data, x_axis, kPlotWidth, kPlotHeight);
  cairo_surface_flush(surface.get());

  auto fail = [&](const std::string& why) {
    return std::runtime_error("cannot write the plot '" + png_path + "': " + why);
  };
  if (cairo_status_t st = cairo_status(cr); st != CAIRO_STATUS_SUCCESS) throw fail(cairo_status_to_string(st));
  const std::string tmp = png_path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  if (cairo_status_t st = cairo_surface_write_to_png(surface.get(), tmp.c_str()); st != CAIRO_STATUS_SUCCESS) {
    fs::remove(tmp, ec);
    throw fail(cairo_status_to_string(st));
  }
  fs::rename(tmp, png_path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw fail(ec.message());
  }
}

void write_training_plot(const std::string& metrics_jsonl, const std::string& png_path, const std::string& title) {
  const MetricSeries data = read_metric_series(metrics_jsonl);
  std::string heading = title;
  if (heading.empty()) {
    std::error_code ec;
    const fs::path run_dir = fs::weakly_canonical(fs::absolute(metrics_jsonl, ec), ec).parent_path();
    heading = run_dir.filename().string();
  }
  write_plot(data, default_training_panels(), png_path, heading);
}

}  // namespace grpo::core
