// grpo-plot: a run's training curves as a PNG. A thin main over grpo_plot.cpp (the grpo_cli
// library).
#include "apps/grpo-plot/grpo_plot.h"

int main(int argc, char** argv) { return grpo::cli::grpo_plot_main(argc, argv); }
