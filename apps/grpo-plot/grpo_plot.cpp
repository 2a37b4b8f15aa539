#include "apps/grpo-plot/grpo_plot.h"

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include "apps/cli/app_common.h"
#include "core/metrics/plot.h"
#include "core/metrics/run_metrics.h"

namespace grpo::cli {

using namespace grpo::core;

namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

constexpr const char* kUsage = R"(Usage: grpo-plot RUN_DIR [--output PNG] [--title TEXT]

Draws the training curves of a run from RUN_DIR/metrics.jsonl into a 1500x900 PNG
(default RUN_DIR/curves.png), written atomically, so it can be re-run while the run trains.
Six panels: reward, correct rate (train samples and held-out eval), KL to the reference,
entropy, response length and policy loss; for a grpo-sft run, its loss (train and held-out),
learning rate, gradient norm and throughput. A panel whose metrics the run does not log says
"no data". When a step was logged twice (a resumed run), its last line wins. RUN_DIR may
also be the metrics file itself.

Options)";

const std::string& exit_codes() {
  static const std::string text = exit_codes_help(
      {{kExitOk, "the PNG was written"},
       {kExitInternal},
       {kExitUsage},
       {kExitConfig, "metrics.jsonl is missing, unreadable, not valid JSONL (FILE:LINE named), or has no metrics"},
       {kExitRuntime, "the PNG could not be written"}});
  return text;
}

struct Options {
  std::string run_dir, output, title;
};

int run(const Options& opt) {
  const bool is_file = fs::is_regular_file(opt.run_dir);
  fs::path run_dir = is_file ? fs::path(opt.run_dir).parent_path() : fs::path(opt.run_dir);
  if (run_dir.empty()) run_dir = ".";  // a bare "metrics.jsonl"
  const std::string metrics = is_file ? opt.run_dir : (run_dir / "metrics.jsonl").string();
  const std::string output = !opt.output.empty() ? opt.output : (run_dir / "curves.png").string();
  std::string title = opt.title;
  if (title.empty()) {
    std::error_code ec;
    title = fs::weakly_canonical(fs::absolute(run_dir, ec), ec).filename().string();
  }

  MetricSeries data;
  try {
    data = read_metric_series(metrics);
  } catch (const std::runtime_error& e) {
    throw AppError(kExitConfig, e.what());
  }
  try {
    write_plot(data, plot_panels_for(data), output, title);
  } catch (const std::runtime_error& e) {
    throw AppError(kExitRuntime, e.what());
  }
  std::cout << "wrote " << output << "\n";
  return kExitOk;
}

}  // namespace

int grpo_plot_main(int argc, char** argv) {
  Options opt;
  po::options_description desc(kUsage);
  bool show_help = false;
  // clang-format off
  desc.add_options()
    ("help,h", po::bool_switch(&show_help), "show this help and the exit codes")
    ("run-dir", po::value(&opt.run_dir), "the run folder (also the first positional argument)")
    ("output,o", po::value(&opt.output), "the PNG to write (default: RUN_DIR/curves.png)")
    ("title,t", po::value(&opt.title), "the figure title (default: the run folder's name)");
  // clang-format on
  po::positional_options_description positional;
  positional.add("run-dir", 1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(desc).positional(positional).run(), vm);
    po::notify(vm);
    if (show_help) {
      std::cout << desc << exit_codes();
      return kExitOk;
    }
    if (opt.run_dir.empty()) throw po::error("RUN_DIR is required");
    if (vm.count("output") && opt.output.empty()) throw po::error("--output must not be empty");
  } catch (const po::error& e) {
    return report_usage_error("grpo-plot", e.what());
  }
  return run_app_guarded("grpo-plot", [&] { return run(opt); });
}

}  // namespace grpo::cli
