// Parallelism behind one seam (torchtitan's parallelize_fn, applied once): the object a training
// run sets up once, before its first step, which owns the optimizer, the gradient reducer and
// the shards, and offers the step loop (core/train/trainer.cpp, policy_update.cpp) what it
// needs in the loop's own terms:
//   - the optimizer to step;
//   - the whole model on this rank for a scope (WholeModel): a no-grad pass, a weight snapshot
//     for the engine, a Polyak update, a checkpoint;
//   - passes matched across ranks (matched_passes: how many forward and backward passes this
//     rank runs so that every rank's collectives pair up), sums over ranks, the gradients'
//     reduction around the last backward of a mini-batch;
//   - per-rank checkpoint parts (optimizer_per_rank), barriers, the step metrics' reduction.
// "No parallelism" (one process) is its trivial form: every operation is then the identity or
// nothing, so the loop has one code path. The loop never names a ZeRO stage; which one runs
// (dist.sharding, core/dist/sharding.h) is decided here, once.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/sharding.h"
#include "core/metrics/metrics_log.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "grpo/sdk/config_value.h"

namespace grpo::core {
class LoraAdapters;
}

namespace grpo::core::dist {

class Communicator;
class Distributed;
class GradientReducer;

class Parallelism {
 public:
  // Sets up the optimizer over what trains in `model` (its LoRA adapters when `lora` is given,
  // else every weight that requires gradients): AdamW (core/optim/optimizer.h) in one process or
  // replicated data parallel; with `sharding` over the ranks of `distributed`, ShardedAdamW, and
  // under Sharding::kFull the values sharded at rest, gathered layer by layer by the model. One
  // process (`distributed` null) with a sharding other than none warns and trains unsharded.
  // `config` locates errors: a backend that cannot serve the sharding's collectives is an
  // sdk::ConfigError at dist.sharding. Collective under data parallel.
  Parallelism(CausalLM model, LoraAdapters* lora, const OptimizerSettings& optimizer, Sharding sharding,
              Distributed* distributed, const sdk::ConfigValue& config);
  // The model no longer gathers from this object's shards (its weights stay as they are).
  ~Parallelism();
  Parallelism(const Parallelism&) = delete;
  Parallelism& operator=(const Parallelism&) = delete;

  // ---- Who.
  bool data_parallel() const { return dist_ != nullptr; }
  Distributed* distributed() const { return dist_; }
  Communicator* communicator() const;  // the training group; null in one process
  int rank() const;
  int world_size() const;
  bool is_main() const { return rank() == 0; }  // writes checkpoints, metrics and the log

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  // What the optimizer steps, in its order: the LoRA adapters, or the weights requiring gradients.
  std::vector<at::Tensor> trainable_parameters(std::vector<std::string>* names = nullptr) const;

  // After the weights (and optimizer state) are final for step 1, a resume's loaded: data
  // parallel, rank 0's LoRA adapters to every rank, the ranks' shards taken from the values,
  // and the gradient reducer. Collective under data parallel.
  void start();
  std::size_t gradient_buckets() const;  // 0 in one process

  // ---- The whole model on this rank, for the scope's lifetime (sharded values gathered, and
  // freed when the outermost scope ends). Collective where values are sharded: every rank opens
  // its scopes in one order.
  class WholeModel {
   public:
    WholeModel(WholeModel&&) noexcept;
    ~WholeModel();
    WholeModel(const WholeModel&) = delete;
    WholeModel& operator=(const WholeModel&) = delete;
    WholeModel& operator=(WholeModel&&) = delete;

   private:
    friend class Parallelism;
    struct Impl;
    explicit WholeModel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  WholeModel whole_model() { return whole_model_if(true); }
  // Only when `needed`, which every rank decides alike.
  WholeModel whole_model_if(bool needed);
  // When any rank needs it (`needed` is this rank's): for passes whose count differs between
  // ranks (no-grad log-probs of each rank's own samples). Asks the ranks only where values are
  // sharded; elsewhere nothing needs gathering and nothing is asked.
  WholeModel whole_model_if_any_rank(bool needed, const std::string& what);

  // ---- The policy update.
  // How many forward and backward passes this rank runs for `mine` micro-batches: `mine`, or
  // where each pass gathers layers (collectives), the most any rank has (the extra passes are
  // zero-loss padding passes).
  std::size_t matched_passes(std::size_t mine);
  // In-place sums over ranks (identity in one process).
  void sum_over_ranks(std::vector<at::Tensor>& tensors, const std::string& what);
  double sum_over_ranks(double value, const std::string& what);
  // Around a mini-batch's backward passes: arm before the last one, then finish (every rank's
  // gradients summed into the optimizer's); returns the seconds finish waited.
  void before_last_backward();
  double finish_gradients();
  // After an update: frees what its passes left gathered.
  void after_update();

  // ---- Checkpoints and the step's end.
  // Whether each rank saves and loads its own part of the optimizer state.
  bool optimizer_per_rank() const { return sharded_optimizer_ != nullptr; }
  void barrier(const std::string& what);
  // memory/optimizer_state_mib, and memory/parameters_at_rest_mib where values are sharded.
  void add_memory_metrics(MetricList& m) const;
  // Data parallel: time/collectives, then every metric reduced over ranks weighted by `weight`
  // (core/dist/metric_reduction.h). One process: unchanged.
  MetricList reduce_step_metrics(MetricList m, double weight, const std::string& what);

 private:
  CausalLM model_;
  LoraAdapters* lora_;
  Distributed* dist_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  ShardedAdamW* sharded_optimizer_ = nullptr;     // optimizer_, when it is sharded
  ShardedParameters* sharded_values_ = nullptr;   // Sharding::kFull: the trainable values at rest
  std::unique_ptr<GradientReducer> reducer_;      // data parallel, from start()
};

}  // namespace grpo::core::dist
