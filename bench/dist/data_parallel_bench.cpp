// Data-parallel scaling on this machine: the same grpo-run job (digit task of
// tests/train/trainer_fixtures.h, fixed-length generation) with 1 process and with --nproc 2,
// same global batch, run one after the other. Prints the mean step time of each (first steps
// excluded: warm-up), the speed-up, where a 2-rank step's time goes, and the gradient all-reduce
// time per step: what backward did not hide (time/gradient_allreduce) and, raw, one all-reduce of
// the model's gradient size on a 2-rank Gloo group of this process.
//
//   build/bin/grpo_bench_data_parallel [steps=12]
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/local_launcher.h"
#include "core/dist/process_group.h"
#include "core/model/safetensors_torch.h"
#include "tests/support/metrics_jsonl.h"
#include "tests/train/trainer_fixtures.h"

namespace {

namespace fs = std::filesystem;

struct RunFigures {
  double step_s = 0, generation_s = 0, training_s = 0, gradient_allreduce_s = 0, collectives_s = 0;
  int steps = 0;
};

RunFigures run(const std::string& dir, const std::string& config, int nproc, int steps) {
  const std::string run_dir = dir + "/nproc" + std::to_string(nproc);
  fs::remove_all(run_dir);
  const std::string cmd = std::string(GRPO_RUN_BINARY) + " --config " + config + " --set run.output_dir=" + run_dir +
                          " --set train.steps=" + std::to_string(steps) + " --log-level warn" +
                          (nproc > 1 ? " --nproc " + std::to_string(nproc) : std::string()) + " >" + dir + "/log.txt 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "grpo-run failed (%d ranks); see %s/log.txt\n", nproc, dir.c_str());
    std::exit(1);
  }
  RunFigures f;
  for (const auto& j : grpo::testing::read_metrics(run_dir)) {
    if (!j.contains("time/step") || j.at("step").get<int>() <= 2) continue;
    f.step_s += j.at("time/step").get<double>();
    f.generation_s += j.value("time/generation", 0.0);
    f.training_s += j.value("time/training", 0.0);
    f.gradient_allreduce_s += j.value("time/gradient_allreduce", 0.0);
    f.collectives_s += j.value("time/collectives", 0.0);
    ++f.steps;
  }
  for (double* v : {&f.step_s, &f.generation_s, &f.training_s, &f.gradient_allreduce_s, &f.collectives_s})
    if (f.steps > 0) *v /= f.steps;
  return f;
}

// Mean seconds of one sum all-reduce of `numel` float32 on 2 Gloo ranks (threads of this process).
double raw_allreduce_s(std::int64_t numel, int reps) {
  const int port = grpo::core::dist::pick_free_port();
  double seconds[2] = {0, 0};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      grpo::core::dist::WorldInfo w;
      w.rank = rank;
      w.world_size = 2;
      w.local_world_size = 2;
      w.master_port = port;
      w.launcher = "threads of this process";
      grpo::core::dist::Distributed d(w, {}, false);
      std::vector<at::Tensor> t{torch::ones({numel})};
      d.train().all_reduce_sum(t, "warm-up");
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) d.train().all_reduce_sum(t, "bench");
      seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    });
  for (auto& r : ranks) r.join();
  return std::max(seconds[0], seconds[1]);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(4, std::atoi(argv[1])) : 12;
  const std::string dir = (fs::temp_directory_path() / ("grpo-bench-dp-" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  grpo::testing::write_digit_task(dir, 400, 20, 7);
  grpo::testing::make_digit_task_model(dir + "/model", 3, 20);
  const std::string config = dir + "/bench.yaml";
  std::ofstream(config) << grpo::testing::digit_task_config_head(dir, dir + "/model", GRPO_PLUGIN_BUILD_DIR, /*with_eval=*/false)
                        << "algorithm: {advantage: grpo, policy_loss: ppo_clip, filter_zero_std_groups: false}\n"
                        << "reward: {verification_reward: 1.0}\n"
                        << "rollout: {num_unique_prompts: 32, num_samples_per_prompt: 8, max_new_tokens: 64, async_steps: 0,\n"
                        << "          max_prompt_tokens: 8, backend: {name: native, ignore_eos: true, max_num_seqs: 256}}\n"
                        << "train: {learning_rate: 1.0e-4, pack_length: 128, per_device_train_batch_size: 8}\n";
  const RunFigures one = run(dir, config, 1, steps);
  const RunFigures two = run(dir, config, 2, steps);
  std::int64_t params = 0;
  for (const auto& [name, t] : grpo::core::load_safetensors(dir + "/model/model.safetensors")) params += t.numel();
  const double raw_s = raw_allreduce_s(params, 50);

  std::printf("%-8s %10s %14s %12s %22s %15s\n", "ranks", "step s", "generation s", "training s", "gradient all-reduce s",
              "collectives s");
  std::printf("%-8d %10.3f %14.3f %12.3f %22s %15s\n", 1, one.step_s, one.generation_s, one.training_s, "-", "-");
  std::printf("%-8d %10.3f %14.3f %12.3f %22.4f %15.4f\n", 2, two.step_s, two.generation_s, two.training_s,
              two.gradient_allreduce_s, two.collectives_s);
  std::printf("(%d steps each, steps 1-2 excluded; global batch 32 prompts x 8 samples x 64 tokens; %lld parameters, "
              "%u hardware threads)\n",
              steps, static_cast<long long>(params), std::thread::hardware_concurrency());
  std::printf("step_s_1_rank: %.4f\n", one.step_s);
  std::printf("step_s_2_ranks: %.4f\n", two.step_s);
  std::printf("speedup_2_vs_1: %.3f\n", two.step_s > 0 ? one.step_s / two.step_s : 0.0);
  std::printf("gradient_allreduce_wait_ms_per_step: %.3f\n", 1e3 * two.gradient_allreduce_s);
  std::printf("collectives_ms_per_step: %.3f\n", 1e3 * two.collectives_s);
  std::printf("raw_gradient_allreduce_ms: %.3f\n", 1e3 * raw_s);
  fs::remove_all(dir);
  return 0;
}
