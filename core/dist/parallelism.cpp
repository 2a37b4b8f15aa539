#include "core/dist/parallelism.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

#include "core/config/config_access.h"
#include "core/dist/gradient_reducer.h"
#include "core/dist/metric_reduction.h"
#include "core/dist/process_group.h"
#include "core/model/lora.h"

namespace grpo::core::dist {

struct Parallelism::WholeModel::Impl {
  explicit Impl(ShardedParameters* values) : hold(values) {}
  ShardedParameters::Hold hold;
};

Parallelism::WholeModel::WholeModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Parallelism::WholeModel::WholeModel(WholeModel&&) noexcept = default;
Parallelism::WholeModel::~WholeModel() = default;

Parallelism::Parallelism(CausalLM model, LoraAdapters* lora, const OptimizerSettings& settings, Sharding sharding,
                         Distributed* distributed, const sdk::ConfigValue& config)
    : model_(std::move(model)), lora_(lora), dist_(distributed) {
  if (sharding != Sharding::kNone && !dist_)
    spdlog::warn("dist.sharding {}: one process, nothing to shard; training as with dist.sharding none", sharding_name(sharding));
  if (sharding == Sharding::kNone || !dist_) {
    optimizer_ = make_adamw(trainable_parameters(), settings);
    return;
  }
  // One unit per decoder layer (or the adapters as one): core/dist/sharding.h.
  std::vector<std::string> names;
  const std::vector<at::Tensor> params = trainable_parameters(&names);
  std::vector<std::vector<std::size_t>> units;
  std::vector<std::int64_t> layer_of_unit;  // empty (LoRA's one unit): no decoder layer's
  if (lora_) {
    units.emplace_back();
    for (std::size_t k = 0; k < params.size(); ++k) units.back().push_back(k);
  } else {
    units = decoder_units(names);
    layer_of_unit = decoder_unit_layers(units.size());
  }
  try {
    check_sharding_collectives(dist_->train(), sharding, params.front());
  } catch (const PeerLostError&) {
    throw;
  } catch (const std::exception& e) {  // the backend cannot serve the mode
    fail_at_config_key(config, {"dist", "sharding"}, e.what());
  }
  auto optimizer = std::make_unique<ShardedAdamW>(params, units, settings, dist_->train(), sharding, layer_of_unit);
  sharded_optimizer_ = optimizer.get();
  if (sharding == Sharding::kFull) {
    sharded_values_ = optimizer->parameters().get();
    model_->set_parameter_residency(optimizer->parameters());
    spdlog::info("dist.sharding full: parameters sharded at rest ({:.1f} MiB on this rank), each decoder layer all-gathered "
                 "for its forward and again for its backward{}",
                 static_cast<double>(sharded_values_->shard().nbytes()) / 1048576.0,
                 lora_ ? " (LoRA: the adapters are one unit; the frozen base weights stay replicated)" : "");
  }
  std::int64_t trainable_values = 0;
  for (const auto& p : params) trainable_values += p.numel();
  spdlog::info("dist.sharding {}: this rank keeps the AdamW state of {} of {} trainable values ({:.1f} MiB){}",
               sharding_name(sharding), optimizer->layout().shard_numel(), trainable_values,
               optimizer->state_bytes() / 1048576.0,
               sharding != Sharding::kOptimizer ? ", and receives only its shard of the summed gradients" : "");
  optimizer_ = std::move(optimizer);
}

Parallelism::~Parallelism() {
  // The policy outlives the run; the shards (and the process group their gathers use) do not.
  if (model_ && sharded_values_) model_->set_parameter_residency(nullptr);
}

Communicator* Parallelism::communicator() const { return dist_ ? &dist_->train() : nullptr; }
int Parallelism::rank() const { return dist_ ? dist_->rank() : 0; }
int Parallelism::world_size() const { return dist_ ? dist_->world_size() : 1; }

std::vector<at::Tensor> Parallelism::trainable_parameters(std::vector<std::string>* names) const {
  if (lora_) return lora_->parameters();
  std::vector<at::Tensor> params;
  for (const auto& kv : model_->named_parameters())
    if (kv.value().requires_grad()) {
      if (names) names->push_back(kv.key());
      params.push_back(kv.value());
    }
  return params;
}

void Parallelism::start() {
  if (!dist_) return;
  if (lora_) {  // seeded alike on every rank; rank 0's all the same, as for the weights
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> adapters;
    for (const auto& p : lora_->parameters()) adapters.push_back(p.detach());
    dist_->train().broadcast(adapters, 0, "initial LoRA adapters from rank 0");
  }
  if (sharded_values_) {  // from here on a rank keeps its chunks of the (loaded) values only
    sharded_values_->capture();
    sharded_values_->free_all();
  }
  // Gradients summed in buckets while backward runs (core/dist/gradient_reducer.h), or
  // reduce-scattered to their owners where the optimizer is sharded past its state.
  const std::vector<at::Tensor> trainable = trainable_parameters();
  if (sharded_optimizer_ && sharded_optimizer_->mode() != Sharding::kOptimizer)
    reducer_ = std::make_unique<GradientReducer>(trainable, dist_->train(), sharded_optimizer_->layout(),
                                                 sharded_optimizer_->grad_shard());
  else
    reducer_ = std::make_unique<GradientReducer>(trainable, dist_->train(),
                                                 static_cast<std::int64_t>(dist_->options().bucket_mb * 1024 * 1024));
}

std::size_t Parallelism::gradient_buckets() const { return reducer_ ? reducer_->num_buckets() : 0; }

Parallelism::WholeModel Parallelism::whole_model_if(bool needed) {
  return WholeModel(std::make_unique<WholeModel::Impl>(needed ? sharded_values_ : nullptr));
}

Parallelism::WholeModel Parallelism::whole_model_if_any_rank(bool needed, const std::string& what) {
  if (sharded_values_) needed = dist_->train().all_reduce_max(needed ? 1.0 : 0.0, what) > 0.0;
  return whole_model_if(needed);
}

std::size_t Parallelism::matched_passes(std::size_t mine) {
  if (!sharded_values_) return mine;  // a pass has no collective of its own
  return static_cast<std::size_t>(dist_->train().all_reduce_max(static_cast<double>(mine), "micro-batches per rank"));
}

void Parallelism::sum_over_ranks(std::vector<at::Tensor>& tensors, const std::string& what) {
  if (dist_) dist_->train().all_reduce_sum(tensors, what);
}

double Parallelism::sum_over_ranks(double value, const std::string& what) {
  return dist_ ? dist_->train().all_reduce_sum(value, what) : value;
}

void Parallelism::before_last_backward() {
  if (reducer_) reducer_->arm();
}

double Parallelism::finish_gradients() {
  if (!reducer_) return 0.0;
  reducer_->finish();  // .grad (or the gradient shard) = the sum over ranks
  return reducer_->last_wait_seconds();
}

void Parallelism::after_update() {
  if (sharded_values_) sharded_values_->free_all();  // what the passes left gathered (the embeddings and head)
}

void Parallelism::barrier(const std::string& what) {
  if (dist_) dist_->train().barrier(what);
}

void Parallelism::add_memory_metrics(MetricList& m) const {
  m.emplace_back("memory/optimizer_state_mib", static_cast<double>(optimizer_state_bytes(*optimizer_)) / 1048576.0);
  if (sharded_values_)  // at rest: this rank's chunks of the trainable values
    m.emplace_back("memory/parameters_at_rest_mib", static_cast<double>(sharded_values_->resident_bytes()) / 1048576.0);
}

MetricList Parallelism::reduce_step_metrics(MetricList m, double weight, const std::string& what) {
  if (!dist_) return m;
  m.emplace_back("time/collectives", dist_->train().take_blocked_seconds());
  return reduce_metrics(dist_->train(), m, weight, what);
}

}  // namespace grpo::core::dist
