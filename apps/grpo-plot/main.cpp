// grpo-plot: a run's training curves as a PNG. A thin main over core/app/.
#include "core/app/grpo_plot.h"

int main(int argc, char** argv) { return grpo::core::grpo_plot_main(argc, argv); }
