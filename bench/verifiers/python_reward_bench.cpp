// python_reward's cost, the way a run pays it: a trivial `plain` function
// (bench/verifiers/python/trivial_reward.py) scored through the trainer's VerifierPool.
//   python_reward_calls_per_s      rows/s over --rows rows, --workers workers (2), batches of
//                                  --batch-size (32), sandboxed unless --no-sandbox; the
//                                  median of --repeats (3) passes
//   python_reward_overhead_ms_p50  one verify() at a time (no batching): the median latency
//                                  of --singles (300) calls, the function itself ~1 us
// The same figures unsandboxed follow (python_reward_unsandboxed_*), side by side in this run.
// Then what porting buys on a real reward: the quickstart's math reward as a Python function
// (examples/python_rewards/boxed_math.py) against the C++ `math` verifier, on the same
// quickstart-like rows ("... \boxed{N}"), through the same pool:
//   python_reward_boxed_math_calls_per_s, math_verifier_calls_per_s, and their ratio.
//
//   grpo_bench_python_reward [--rows N] [--workers N] [--batch-size N] [--repeats N]
//                            [--singles N] [--python PATH]
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "core/plugin/search_path.h"
#include "core/runtime/components.h"
#include "core/train/verifier_pool.h"
#include "grpo/sdk/config_value.h"

namespace {

using grpo::sdk::ConfigValue;
using namespace grpo::bench;

struct Figures {
  double calls_per_s = 0, overhead_ms_p50 = 0;
};

// A python_reward entry of the bench's options.
grpo::core::VerifierSlot python_slot(grpo::core::PluginRegistry& registry, const std::string& path,
                                     const std::string& function, bool sandbox, int argc, char** argv) {
  const char* python = flag(argc, argv, "--python");
  ConfigValue node = ConfigValue::make_map();
  auto set = [&](const char* k, const std::string& v) { node.set(k, ConfigValue::make_scalar(v, {}, true), {}); };
  set("name", "python_reward");
  set("path", path);
  set("function", function);
  set("python", python ? python : "/usr/bin/python3");
  set("workers", std::to_string(arg(argc, argv, "--workers", 2)));
  set("batch_size", std::to_string(arg(argc, argv, "--batch-size", 32)));
  set("sandbox", sandbox ? "true" : "false");
  return grpo::core::create_verifier_slot(registry, "python_reward", &node, "verifiers[0]");
}

// Rows like the quickstart's: groups of 16 samples, half right, answers in \boxed{}.
void make_rows(std::int64_t rows, std::vector<grpo::core::Group>* groups, std::vector<std::string>* prompts) {
  for (std::int64_t i = 0; i < rows; i += 16) {
    grpo::core::Group g;
    g.example.text = "Dan had " + std::to_string(i) + " coins and found 1 more. How many coins does Dan have?";
    g.example.targets.push_back({"", "\"" + std::to_string(i + 1) + "\""});
    for (int k = 0; k < 16 && i + k < rows; ++k) {
      grpo::core::Sample s;
      s.text = std::to_string(i) + "+1=" + std::to_string(i + 1 - k % 2) + " \\boxed{" + std::to_string(i + 1 - k % 2) + "}";
      g.samples.push_back(s);
    }
    groups->push_back(std::move(g));
    prompts->push_back(groups->back().example.text);
  }
}

// Rows/s of one score() over the rows, the median of --repeats passes after a warm-up.
double rows_per_s(const grpo::core::VerifierSlot& slot, int argc, char** argv) {
  std::vector<grpo::core::Group> groups;
  std::vector<std::string> prompts;
  make_rows(arg(argc, argv, "--rows", 20000), &groups, &prompts);
  grpo::core::RewardOptions options;
  grpo::core::VerifierPool pool(0, 60.0);
  pool.score(groups, prompts, {slot}, options);  // warm-up
  std::vector<double> rates;
  for (std::int64_t r = 0; r < arg(argc, argv, "--repeats", 3); ++r) {
    const auto t0 = Clock::now();
    const grpo::core::ScoringStats stats = pool.score(groups, prompts, {slot}, options);
    rates.push_back(static_cast<double>(stats.calls) / seconds_since(t0));
    if (stats.failures || stats.timeouts) std::fprintf(stderr, "warning: %zu failed calls\n", stats.failures + stats.timeouts);
  }
  return median(rates);
}

Figures measure(grpo::core::PluginRegistry& registry, bool sandbox, int argc, char** argv) {
  const std::int64_t singles = arg(argc, argv, "--singles", 300);
  const grpo::core::VerifierSlot slot = python_slot(
      registry, std::string(GRPO_BENCH_SOURCE_DIR) + "/python/trivial_reward.py", "reward", sandbox, argc, argv);
  const double rate = rows_per_s(slot, argc, argv);
  // Latency: one call at a time.
  std::vector<double> ms;
  grpo::sdk::VerifierInput in;
  in.prompt = "p";
  in.completion = "The answer is 2";
  in.ground_truth = "2";
  in.metadata = "{}";
  for (std::int64_t i = 0; i < singles; ++i) {
    const auto t0 = Clock::now();
    slot.verifier->verify(in);
    ms.push_back(seconds_since(t0) * 1000.0);
  }
  return {rate, median(ms)};
}

}  // namespace

int main(int argc, char** argv) {
  grpo::core::PluginSearchPath sp;
  sp.explicit_dirs = {GRPO_PLUGIN_BUILD_DIR};
  sp.use_environment = false;
  sp.use_install_dir = false;
  grpo::core::PluginRegistry registry(sp);
  std::printf("cpu: %s, %u hardware threads\n", cpu_model_name().c_str(), std::thread::hardware_concurrency());
  const Figures sandboxed = measure(registry, true, argc, argv);
  const Figures direct = measure(registry, false, argc, argv);
  std::printf("python_reward_calls_per_s: %.0f\n", sandboxed.calls_per_s);
  std::printf("python_reward_overhead_ms_p50: %.3f\n", sandboxed.overhead_ms_p50);
  std::printf("python_reward_unsandboxed_calls_per_s: %.0f\n", direct.calls_per_s);
  std::printf("python_reward_unsandboxed_overhead_ms_p50: %.3f\n", direct.overhead_ms_p50);
  const double py_math = rows_per_s(
      python_slot(registry, std::string(GRPO_SOURCE_DIR) + "/examples/python_rewards/boxed_math.py", "boxed_math", true,
                  argc, argv),
      argc, argv);
  ConfigValue math_node = ConfigValue::make_map();
  math_node.set("name", ConfigValue::make_scalar("math", {}, true), {});
  const double cpp_math =
      rows_per_s(grpo::core::create_verifier_slot(registry, "math", &math_node, "verifiers[0]"), argc, argv);
  std::printf("python_reward_boxed_math_calls_per_s: %.0f\n", py_math);
  std::printf("math_verifier_calls_per_s: %.0f\n", cpp_math);
  std::printf("math_verifier_speedup_over_python: %.2f\n", cpp_math / py_math);
  return 0;
}
