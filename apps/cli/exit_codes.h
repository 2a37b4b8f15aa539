// The exit codes of every grpo-* program (one table: docs/cli.md#exit-codes) and the one
// mapping from an exception to an exit code and the line printed on stderr.
#pragma once

#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace grpo::cli {

// Every program returns these codes and no others. Codes 5 to 7 have program-specific meanings
// (the aliases below name them); which program returns which code is in docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,     // an unexpected failure: a bug, please report it with the log
  kExitUsage = 2,        // bad command line
  kExitConfig = 3,       // invalid configuration or data (file, line and key in the message)
  kExitPlugin = 4,       // a plugin failed to load, a name did not resolve, or a factory failed
  kExitRuntime = 5,      // the job failed while running (I/O, ...)
  kExitUnavailable = 6,  // grpo-run: the requested job is not part of this build
  kExitPeerLost = 7,     // grpo-run, data-parallel: another rank died, hung or failed (named in the message)

  // The same numbers, as grpo-verify, grpo-tokenize and grpo-generate use them.
  kExitBadInput = kExitRuntime,              // invalid input lines, each named FILE:LINE (or line N)
  kExitRequestsFailed = kExitUnavailable,    // grpo-generate: some requests failed, the others completed
  kExitGenerationFailed = kExitPeerLost,     // grpo-generate: the backend failed, or --output could not be written
};

// One row of the table: the code, a short name ("config") and its general meaning, as --help
// prints it ("invalid configuration or data (the message names file, line and key)").
struct ExitCodeInfo {
  ExitCode code;
  const char* name;
  const char* meaning;
};

// The rows for codes 0..7, in order.
const std::vector<ExitCodeInfo>& exit_code_table();

// A code a program returns, with its own wording of the meaning (nullptr: the table's).
struct ExitCodeUse {
  ExitCode code;
  const char* meaning = nullptr;
};

// The "Exit codes:" block of a program's --help:
//   "\nExit codes:\n  0  success\n  1  internal error (...)\n..."
std::string exit_codes_help(std::initializer_list<ExitCodeUse> codes);

// An error that carries its own exit code (one of ExitCode). The message is printed as is
// (after "APP: ").
class AppError : public std::runtime_error {
 public:
  AppError(ExitCode exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  ExitCode exit_code() const { return exit_code_; }

 private:
  ExitCode exit_code_;
};

// What an exception means for a program: its exit code and the message for stderr (without the
// program's name).
struct ExitStatus {
  ExitCode code = kExitOk;
  std::string message;
};

// THE mapping of an exception to an exit code, for every program:
//   AppError               its message                          its exit_code()
//   dist::PeerLostError    its message                          7
//   sdk::ConfigError       "configuration error: ..."           3
//   PluginError            "plugin error: ..."                  4
//   DataError              "data error: ..." (file and line)    3
//   std::invalid_argument  its message (a bad command line)     2
//   any other exception    "internal error: ..."                1
// A failure of the job itself (I/O, a failed generation) is turned into AppError(5) by run_job
// (app_common.h) where a program runs its job.
ExitStatus exit_status_of(std::exception_ptr error);

}  // namespace grpo::cli
