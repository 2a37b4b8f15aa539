// Host-side checks the sandbox tests share: a name no earlier run used, and whether any
// process on the machine still runs with a marker in its command line.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

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

// One scan of /proc can miss a process while others are being created and reaped around it
// (seen with a fork bomb in a neighbouring test), so neither answer rests on one scan: a
// process appears when one scan within `seconds` sees it, and is gone when three scans in a
// row, 20 ms apart, do not (the kernel also takes a moment to reap a killed namespace).
inline bool marker_process_appears(const std::string& marker, double seconds = 5.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (process_with_marker_exists(marker)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline bool marker_process_gone(const std::string& marker, double seconds = 5.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int misses = 0;;) {
    misses = process_with_marker_exists(marker) ? 0 : misses + 1;
    if (misses == 3) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace grpo::testing
