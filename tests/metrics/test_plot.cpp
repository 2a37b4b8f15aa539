// The training-curves PNG (core/metrics/plot.h) and grpo-plot: reading metrics.jsonl, the nice
// axes, where points land in the image, the atomic write, and the app's exit codes.
#include <cairo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/grpo-plot/grpo_plot.h"
#include "core/metrics/plot.h"
#include "core/metrics/run_metrics.h"
#include "tests/support/error_of.h"
#include "tests/support/test_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace grpo::core;
using grpo::testing::error_of;

std::string test_dir() { return grpo::testing::fresh_test_dir("metrics"); }

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

using Points = std::vector<std::pair<double, double>>;

// ---- read_metric_series ----------------------------------------------------------------------

TEST(ReadMetricSeries, SortsByStepLastLineWinsAndSkipsNulls) {
  const std::string path =
      write_text(test_dir() + "/metrics.jsonl",
                 "{\"step\": 2, \"objective/scores\": 0.5, \"lr\": 1e-6}\n"
                 "{\"step\": 0, \"eval/verifiable_correct_rate\": 0.25}\n"
                 "\n"
                 "{\"step\": 1, \"objective/scores\": 0.25, \"objective/kl\": null, \"note\": \"x\"}\r\n"
                 "{\"step\": 2, \"objective/scores\": 0.75}\n"
                 "{\"step\": 3, \"objective/scores\": 1, \"objective/kl\": 0.01, \"flag\": true}\n");
  const MetricSeries s = read_metric_series(path);
  EXPECT_EQ(s.at("objective/scores"), (Points{{1, 0.25}, {2, 0.75}, {3, 1.0}}));
  EXPECT_EQ(s.at("eval/verifiable_correct_rate"), (Points{{0, 0.25}}));
  EXPECT_EQ(s.at("objective/kl"), (Points{{3, 0.01}}));  // the null at step 1 is no point
  EXPECT_FALSE(s.count("lr"));                           // step 2's first line was replaced entirely
  EXPECT_FALSE(s.count("note"));                         // not a number
  EXPECT_FALSE(s.count("flag"));
  EXPECT_FALSE(s.count("step"));
  EXPECT_EQ(s.size(), 3u);
}

TEST(ReadMetricSeries, IgnoresAnUnfinishedLastLineTheWriterIsStillWriting) {
  const std::string path =
      write_text(test_dir() + "/metrics.jsonl", "{\"step\": 1, \"a\": 1}\n{\"step\": 2, \"a\": 2}\n{\"step\": 3, \"a");
  EXPECT_EQ(read_metric_series(path).at("a"), (Points{{1, 1}, {2, 2}}));
}

TEST(ReadMetricSeries, ErrorsNameTheFileAndLine) {
  const std::string dir = test_dir();
  const std::string bad_json =
      write_text(dir + "/bad.jsonl", "{\"step\": 1, \"a\": 1}\n\n{\"step\": 2, \"a\": \n{\"step\": 3, \"a\": 3}\n");
  const std::string message = error_of<std::runtime_error>([&] { read_metric_series(bad_json); });
  EXPECT_EQ(message.rfind(bad_json + ":3: not valid JSON (", 0), 0u) << message;

  const std::string expected_step = "expected a JSON object with a numeric \"step\"";
  const std::string no_step = write_text(dir + "/nostep.jsonl", "{\"step\": 1, \"a\": 1}\n{\"a\": 2}\n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(no_step); }), no_step + ":2: " + expected_step);
  const std::string text_step = write_text(dir + "/textstep.jsonl", "{\"step\": \"1\", \"a\": 1}\n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(text_step); }), text_step + ":1: " + expected_step);
  const std::string array = write_text(dir + "/array.jsonl", "[1, 2]\n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(array); }), array + ":1: " + expected_step);

  const std::string missing = dir + "/missing.jsonl";
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(missing); }).rfind(missing + ": cannot open (", 0),
            0u);
  const std::string empty = write_text(dir + "/empty.jsonl", "\n \n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(empty); }), empty + ": no metrics to plot");
  const std::string nulls = write_text(dir + "/nulls.jsonl", "{\"step\": 1, \"a\": null}\n{\"step\": 2}\n");
  EXPECT_EQ(error_of<std::runtime_error>([&] { read_metric_series(nulls); }), nulls + ": no metrics to plot");
}

// ---- axes ------------------------------------------------------------------------------------

void expect_axis(const AxisRange& axis, double min, double max, double step) {
  EXPECT_NEAR(axis.min, min, 1e-12);
  EXPECT_NEAR(axis.max, max, 1e-12);
  EXPECT_NEAR(axis.step, step, 1e-12);
}

TEST(NiceAxis, HandComputedCases) {
  // raw = 97/5 = 19.4 -> 2 x 10 = 20; floor(0/20) = 0, ceil(97/20) = 5 -> 100.
  expect_axis(nice_axis(0, 97), 0, 100, 20);
  // raw = 0.0148 -> 2 x 0.01; floor(0.65) = 0, ceil(4.35) = 5 -> 0.1.
  expect_axis(nice_axis(0.013, 0.087), 0, 0.1, 0.02);
  // raw = 0.00346 -> 5 x 0.001; floor(-2.46) = -3, ceil(1.02) = 2.
  expect_axis(nice_axis(-0.0123, 0.0051), -0.015, 0.01, 0.005);
  // A constant: padded by 10% to 0.45..0.55, raw = 0.02 -> 2 x 0.01; floor(22.5) = 22, ceil(27.5) = 28.
  expect_axis(nice_axis(0.5, 0.5), 0.44, 0.56, 0.02);
  // Zero: padded by 1; raw = 0.4 -> 5 x 0.1.
  expect_axis(nice_axis(0, 0), -1, 1, 0.5);
  // The step axis: raw = 0.5 is raised to min_step 1; raw = 199/6 = 33.2 -> 5 x 10.
  expect_axis(nice_axis(0, 3, 6, 1.0), 0, 3, 1);
  expect_axis(nice_axis(1, 200, 6, 1.0), 0, 200, 50);
  // Limits already on the grid stay.
  expect_axis(nice_axis(0.2, 0.6), 0.2, 0.6, 0.1);

  const std::vector<double> ticks = nice_axis(0.013, 0.087).ticks();
  ASSERT_EQ(ticks.size(), 6u);
  for (std::size_t i = 0; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i], 0.02 * i, 1e-15);
  EXPECT_EQ(nice_axis(0, 97).ticks(), (std::vector<double>{0, 20, 40, 60, 80, 100}));

  EXPECT_THROW(nice_axis(1, 0), std::invalid_argument);
  EXPECT_THROW(nice_axis(0, std::numeric_limits<double>::infinity()), std::invalid_argument);
  EXPECT_THROW(nice_axis(std::nan(""), 1), std::invalid_argument);
}

TEST(FormatTick, CompactFixedOrScientificPerAxis) {
  const AxisRange tenths{0, 1, 0.2};
  EXPECT_EQ(format_tick(0, tenths), "0.0");
  EXPECT_EQ(format_tick(0.2, tenths), "0.2");
  EXPECT_EQ(format_tick(1, tenths), "1.0");
  const AxisRange whole{0, 100, 20};
  EXPECT_EQ(format_tick(0, whole), "0");
  EXPECT_EQ(format_tick(100, whole), "100");
  const AxisRange small{-0.015, 0.01, 0.005};
  EXPECT_EQ(format_tick(-0.015, small), "-0.015");
  EXPECT_EQ(format_tick(-1e-19, small), "0.000");  // rounding noise is no "-0.000"
  const AxisRange tiny{0, 5e-4, 1e-4};
  EXPECT_EQ(format_tick(2e-4, tiny), "2e-04");
  EXPECT_EQ(format_tick(0, tiny), "0");
  EXPECT_EQ(format_tick(1.2e-4, AxisRange{0, 8e-4, 2e-5}), "1.2e-04");  // the step needs one more digit
  EXPECT_EQ(format_tick(8e-4, AxisRange{0, 8e-4, 1e-4}), "8e-04");
  const AxisRange big{0, 150000, 50000};
  EXPECT_EQ(format_tick(150000, big), "1.5e+05");
  EXPECT_EQ(format_tick(12, AxisRange{10, 14, 1}), "12");
}

TEST(PanelPlotArea, SixDisjointAreasInAThreeByTwoGrid) {
  for (int i = 0; i < 6; ++i) {
    const PanelRect a = panel_plot_area(i);
    EXPECT_GT(a.w, 300);
    EXPECT_GT(a.h, 250);
    EXPECT_GE(a.x - kPlotFramePad, 0);
    EXPECT_LE(a.x + a.w + kPlotFramePad, 1500);
    EXPECT_GE(a.y - kPlotFramePad, 40);  // below the figure title
    EXPECT_LE(a.y + a.h + kPlotFramePad, 900);
    if (i % 3) {
      EXPECT_GT(a.x, panel_plot_area(i - 1).x + panel_plot_area(i - 1).w);
    }
    if (i >= 3) {
      EXPECT_GT(a.y, panel_plot_area(i - 3).y + panel_plot_area(i - 3).h);
    }
  }
  EXPECT_THROW(panel_plot_area(6), std::out_of_range);
}

// ---- the PNG ---------------------------------------------------------------------------------

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

Surface load_png(const std::string& path) {
  Surface s(cairo_image_surface_create_from_png(path.c_str()), cairo_surface_destroy);
  EXPECT_EQ(cairo_surface_status(s.get()), CAIRO_STATUS_SUCCESS) << path;
  return s;
}

struct Pixel {
  int r, g, b;
};

Pixel pixel_at(cairo_surface_t* s, int x, int y) {
  const unsigned char* row = cairo_image_surface_get_data(s) + y * cairo_image_surface_get_stride(s);
  const std::uint32_t p = *reinterpret_cast<const std::uint32_t*>(row + 4 * x);  // opaque: no un-premultiplying
  return Pixel{static_cast<int>((p >> 16) & 255), static_cast<int>((p >> 8) & 255), static_cast<int>(p & 255)};
}

bool close_to(const Pixel& p, const PlotColor& c, int tolerance = 10) {
  return std::abs(p.r - c.r) <= tolerance && std::abs(p.g - c.g) <= tolerance && std::abs(p.b - c.b) <= tolerance;
}

bool colour_near(cairo_surface_t* s, double x, double y, const PlotColor& c) {
  const int cx = static_cast<int>(std::lround(x)), cy = static_cast<int>(std::lround(y));
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx)
      if (close_to(pixel_at(s, cx + dx, cy + dy), c)) return true;
  return false;
}

// Where (step, value) lands in panel `panel`, by the mapping plot.h documents.
std::pair<double, double> to_pixel(int panel, const AxisRange& x, const AxisRange& y, double step, double value) {
  const PanelRect a = panel_plot_area(panel);
  return {a.x + (step - x.min) / (x.max - x.min) * a.w, a.y + a.h - (value - y.min) / (y.max - y.min) * a.h};
}

// Reward rises 0.1 -> 0.9, the train correct rate is a line, the eval correct rate has three
// points, entropy is constant; KL, response length and policy loss are never logged.
constexpr const char* kMetrics =
    "{\"step\": 0, \"eval/verifiable_correct_rate\": 0.2}\n"
    "{\"step\": 10, \"objective/scores\": 0.1, \"objective/verifiable_correct_rate\": 0.3,"
    " \"objective/entropy\": 1.5}\n"
    "{\"step\": 20, \"objective/scores\": 0.4, \"objective/verifiable_correct_rate\": 0.5, \"objective/entropy\": 1.5,"
    " \"eval/verifiable_correct_rate\": 0.6}\n"
    "{\"step\": 30, \"objective/scores\": 0.9, \"objective/verifiable_correct_rate\": 0.55,"
    " \"objective/entropy\": 1.5}\n"
    "{\"step\": 30, \"objective/scores\": 0.9, \"objective/verifiable_correct_rate\": 0.55, \"objective/entropy\": 1.5,"
    " \"eval/verifiable_correct_rate\": 0.5}\n";

TEST(WriteTrainingPlot, PointsLandWhereTheAxesSay) {
  const std::string dir = test_dir();
  const std::string metrics = write_text(dir + "/metrics.jsonl", kMetrics);
  const std::string png = dir + "/curves.png";
  write_training_plot(metrics, png, "test run");
  Surface image = load_png(png);
  cairo_surface_t* s = image.get();
  ASSERT_EQ(cairo_image_surface_get_width(s), 1500);
  ASSERT_EQ(cairo_image_surface_get_height(s), 900);
  const PlotColor first = plot_palette()[0], second = plot_palette()[1];

  // The shared step axis covers steps 0..30 of every shown series: raw = 30/6 = 5 -> 0..30 step 5.
  const AxisRange x = nice_axis(0, 30, kPlotXTicks, 1.0);
  expect_axis(x, 0, 30, 5);

  // Reward (panel 0): 0.1..0.9 -> 0..1 step 0.2. A marker (<= 30 points) at each point.
  const AxisRange reward = nice_axis(0.1, 0.9);
  expect_axis(reward, 0, 1, 0.2);
  for (const auto& [step, value] : Points{{10, 0.1}, {20, 0.4}, {30, 0.9}}) {
    const auto [px, py] = to_pixel(0, x, reward, step, value);
    EXPECT_TRUE(colour_near(s, px, py, first))
        << "reward point (" << step << ", " << value << ") at " << px << "," << py;
  }
  // Away from the curve: (10, 0.9) is far above the first point; the step axis starts at 0.
  const auto [far_x, far_y] = to_pixel(0, x, reward, 10, 0.9);
  EXPECT_FALSE(colour_near(s, far_x, far_y, first));
  const auto [early_x, early_y] = to_pixel(0, x, reward, 2, 0.1);
  EXPECT_FALSE(colour_near(s, early_x, early_y, first));

  // Correct rate (panel 1): 0.2..0.6 -> 0.2..0.6 step 0.1; the eval series (second colour)
  // starts at step 0, before the train series.
  const AxisRange rate = nice_axis(0.2, 0.6);
  const auto [eval_x, eval_y] = to_pixel(1, x, rate, 0, 0.2);
  EXPECT_TRUE(colour_near(s, eval_x, eval_y, second));
  const auto [last_eval_x, last_eval_y] = to_pixel(1, x, rate, 30, 0.5);  // the last line for step 30 won
  EXPECT_TRUE(colour_near(s, last_eval_x, last_eval_y, second));
  const auto [train_x, train_y] = to_pixel(1, x, rate, 10, 0.3);
  EXPECT_TRUE(colour_near(s, train_x, train_y, first));

  // Entropy (panel 3) is constant: the padded range puts it mid-height.
  const AxisRange entropy = nice_axis(1.5, 1.5);
  const auto [ent_x, ent_y] = to_pixel(3, x, entropy, 20, 1.5);
  EXPECT_NEAR(ent_y, panel_plot_area(3).y + panel_plot_area(3).h / 2, 1.0);
  EXPECT_TRUE(colour_near(s, ent_x, ent_y, first));

  // KL (2), response length (4), policy loss (5): no data, so no series colour anywhere in
  // their cells (frame, title band and axis margins included).
  for (int panel : {2, 4, 5}) {
    const PanelRect a = panel_plot_area(panel);
    std::size_t coloured = 0;
    for (int py = static_cast<int>(a.y) - 40; py < static_cast<int>(a.y + a.h) + 50; ++py)
      for (int px = static_cast<int>(a.x) - 80; px < static_cast<int>(a.x + a.w) + 20; ++px)
        for (const PlotColor& c : plot_palette()) coloured += close_to(pixel_at(s, px, py), c);
    EXPECT_EQ(coloured, 0u) << "panel " << panel;
  }

  // The background far from every panel is white.
  for (const auto& [px, py] : std::vector<std::pair<int, int>>{{2, 2}, {1497, 2}, {2, 897}, {1497, 897}, {1497, 480}}) {
    const Pixel p = pixel_at(s, px, py);
    EXPECT_TRUE(p.r == 255 && p.g == 255 && p.b == 255) << px << "," << py;
  }
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WriteTrainingPlot, ReplacesAnExistingFileAtomically) {
  const std::string dir = test_dir();
  const std::string metrics = write_text(dir + "/metrics.jsonl", kMetrics);
  const std::string png = write_text(dir + "/curves.png", "an old, shorter file");
  write_training_plot(metrics, png);
  Surface image = load_png(png);
  EXPECT_EQ(cairo_image_surface_get_width(image.get()), 1500);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"curves.png", "metrics.jsonl"}));  // no *.tmp-* left
}

TEST(WriteTrainingPlot, FailureNamesThePathAndLeavesNothing) {
  const std::string dir = test_dir();
  const std::string metrics = write_text(dir + "/metrics.jsonl", kMetrics);

  const std::string in_missing_dir = dir + "/missing/curves.png";
  const std::string message = error_of<std::runtime_error>([&] { write_training_plot(metrics, in_missing_dir); });
  EXPECT_NE(message.find(in_missing_dir), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir + "/missing"));

  // The rename fails (the target is a folder): the temp file is removed, the target kept.
  const std::string folder = dir + "/curves.png";
  fs::create_directory(folder);
  const std::string rename_message = error_of<std::runtime_error>([&] { write_training_plot(metrics, folder); });
  EXPECT_NE(rename_message.find(folder), std::string::npos) << rename_message;
  EXPECT_TRUE(fs::is_directory(folder));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"curves.png", "metrics.jsonl"}));
}

// ---- grpo-plot -------------------------------------------------------------------------------

int plot_main(std::vector<std::string> args) {
  args.insert(args.begin(), "grpo-plot");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return grpo::cli::grpo_plot_main(static_cast<int>(args.size()), argv.data());
}

TEST(GrpoPlot, WritesCurvesPngInTheRunDir) {
  const std::string dir = test_dir();
  write_text(dir + "/metrics.jsonl", kMetrics);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(plot_main({dir}), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "wrote " + (fs::path(dir) / "curves.png").string() + "\n");
  EXPECT_EQ(cairo_image_surface_get_height(load_png(dir + "/curves.png").get()), 900);

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(plot_main({dir, "--output", dir + "/other.png", "--title", "T"}), 0);
  ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(fs::exists(dir + "/other.png"));
}

// grpo-plot draws a grpo-sft run (train/loss, no reward) with the SFT panels, a GRPO run with
// the training panels.
TEST(GrpoPlot, PanelsFollowTheRunsMetrics) {
  MetricSeries sft{{"train/loss", {{1, 2.0}, {2, 1.0}}}, {"lr", {{1, 1e-3}}}};
  EXPECT_EQ(plot_panels_for(sft).front().title, "Completion loss");
  MetricSeries grpo{{"objective/scores", {{1, 0.5}}}, {"train/loss", {{1, 2.0}}}};
  EXPECT_EQ(plot_panels_for(grpo).front().title, "Reward");
  EXPECT_EQ(plot_panels_for(MetricSeries{{"eval/verifiable_correct_rate", {{0, 0.3}}}}).front().title, "Reward");
}

TEST(GrpoPlot, ExitCodes) {
  const std::string dir = test_dir();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plot_main({}), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("RUN_DIR"), std::string::npos);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plot_main({dir, "--no-such-flag"}), 2);
  ::testing::internal::GetCapturedStderr();

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plot_main({dir + "/no-such-run"}), 3);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(dir + "/no-such-run/metrics.jsonl"), std::string::npos);

  write_text(dir + "/metrics.jsonl", "{\"step\": 1, \"objective/scores\": 1}\n{\"step\": 2, \"objective/scores\"\n\n");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plot_main({dir}), 3);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("metrics.jsonl:2: not valid JSON"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/curves.png"));

  write_text(dir + "/metrics.jsonl", kMetrics);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(plot_main({dir, "-o", dir + "/missing/curves.png"}), 5);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(dir + "/missing/curves.png"), std::string::npos);

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(plot_main({"--help"}), 0);
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("Exit codes"), std::string::npos);
}

}  // namespace
