// Host-side checks the sandbox tests share: a name no earlier run used, and whether any
// process on the machine still runs with a marker in its command line.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>

namespace grpo::testing {

inline std::string unique(const std::string& stem) {
  return stem + std::to_string(getpid()) + "_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline bool process_with_marker_exists(const std::string& marker) {
  DIR* d = opendir("/proc");
  bool found = false;
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) != std::string::npos) found = true;
  }
  if (d) closedir(d);
  return found;
}

}  // namespace grpo::testing
