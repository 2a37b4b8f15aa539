// Runs a shell command the way a user would and returns its exit code and standard output
// (redirect stderr inside the command, e.g. `2>&1`, to capture it too).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace grpo::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the command could not be started or did not exit normally
  std::string output;
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace grpo::testing
