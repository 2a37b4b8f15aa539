// grpo-run's command line, as a library function so the app's main stays one line.
#pragma once

namespace grpo::core {

// Exit codes of grpo-run (docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitInternalError = 1,  // an unexpected failure (a bug: please report it)
  kExitUsage = 2,          // bad command line
  kExitConfigError = 3,    // the configuration is invalid (file, line and key in the message)
  kExitPluginError = 4,    // a plugin failed to load, a name did not resolve, or a factory failed
  kExitRuntimeError = 5,   // the job failed while running (I/O, ...)
  kExitUnavailable = 6,    // the requested job is not part of this build
  kExitPeerLost = 7,       // data-parallel training: another rank died, hung or failed (named in the message)
};

int grpo_run_main(int argc, char** argv);

}  // namespace grpo::core
