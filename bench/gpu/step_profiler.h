// Where a stretch of work spends its time, from LibTorch's profiler (Kineto: CPU ops, CUDA
// runtime calls, the device's kernels and copies). LibTorch 2.x only: 1.13's C++ API differs
// (durations in microseconds), and its CPU-only Debian build has no device to profile.
// grpo_bench_gpu_step's --profile uses it around one policy update.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace grpo::bench {

namespace kineto = torch::autograd::profiler;
namespace profiler_impl = torch::profiler::impl;

// Profiles everything between its construction and finish(): CPU ops and runtime calls, and the
// device's kernels and copies on CUDA.
class StepProfiler {
 public:
  explicit StepProfiler(const torch::Device& device) {
    activities_.insert(profiler_impl::ActivityType::CPU);
    if (device.is_cuda()) activities_.insert(profiler_impl::ActivityType::CUDA);
    kineto::prepareProfiler(config_, activities_);
    kineto::enableProfiler(config_, activities_);
  }

  // Stops, writes the Chrome trace to `path` and prints the summary for `wall_s` seconds of wall time.
  void finish(const std::string& path, double wall_s) {
    std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
    struct Total {
      double ms = 0;
      std::int64_t count = 0;
    };
    std::map<std::string, Total> device, host;
    double device_ms = 0;
    std::int64_t kernels = 0;
    for (const auto& e : result->events()) {
      const double ms = static_cast<double>(e.durationNs()) / 1e6;
      auto& table = e.deviceType() == c10::DeviceType::CPU ? host : device;
      Total& t = table[e.name()];
      t.ms += ms;
      ++t.count;
      if (e.deviceType() != c10::DeviceType::CPU) device_ms += ms, ++kernels;
    }
    result->save(path);
    std::printf("  profile (trace %s): wall %.1f ms; device work %.1f ms in %lld kernels and copies "
                "(%.0f%% of the wall time)\n",
                path.c_str(), wall_s * 1e3, device_ms, static_cast<long long>(kernels), 100.0 * device_ms / (wall_s * 1e3));
    print_top("device kernels and copies", device, 30);
    print_top("host ops and runtime calls (inclusive times: nested ops count in their callers too)", host, 40);
  }

 private:
  template <class Table>
  static void print_top(const char* title, const Table& table, std::size_t n) {
    std::vector<std::pair<std::string, std::pair<double, std::int64_t>>> rows;
    for (const auto& [name, t] : table) rows.push_back({name, {t.ms, t.count}});
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    std::printf("  %s, by total time:\n", title);
    for (std::size_t i = 0; i < std::min(n, rows.size()); ++i)
      std::printf("    %9.2f ms %7lld x  %.110s\n", rows[i].second.first, static_cast<long long>(rows[i].second.second),
                  rows[i].first.c_str());
  }

  profiler_impl::ProfilerConfig config_{profiler_impl::ProfilerState::KINETO};
  std::set<profiler_impl::ActivityType> activities_;
};

}  // namespace grpo::bench

#endif  // TORCH_VERSION_MAJOR >= 2
