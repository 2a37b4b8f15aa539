// grpo-run's command line, as a library function (the grpo_cli library) so that the program's
// main stays one line and tests can run it in-process.
#pragma once

namespace grpo::cli {

// Returns one of the exit codes of apps/cli/exit_codes.h (docs/cli.md#exit-codes).
int grpo_run_main(int argc, char** argv);

}  // namespace grpo::cli
