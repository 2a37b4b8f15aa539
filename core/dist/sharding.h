// Sharded data parallel (dist.sharding), ZeRO's stages on c10d:
//   optimizer  (ZeRO-1) each rank keeps the AdamW state (exp_avg, exp_avg_sq) of 1/N of the
//              trainable parameters, steps that shard and all-gathers the updated values;
//   gradients  (ZeRO-2) also: gradients are reduced to the rank that owns them (a reduce-scatter)
//              instead of all-reduced, and every full-size gradient is freed after the reduction.
// The trainable parameters (policy weights in float32 under fp32 and bf16-mixed, where they are
// their own master copy; the LoRA adapters) are replicated between steps in both modes.
//
// Layout (ShardLayout). The parameters form units (a decoder layer, or the embeddings, final
// norm and LM head); a unit is its parameters' values back to back, padded to a multiple of the
// world size N and cut into N equal chunks: rank r owns chunk r of every unit. So every rank
// holds 1/N of every unit (balanced to one element per unit), a unit's reduce-scatter and
// all-gather are one collective per owner, and a rank's shard is its chunks back to back.
//
// Gloo has no reduce-scatter or all-gather into one tensor in this LibTorch (1.13): a unit's
// reduce-scatter is N reduces (one per owner, root = owner), each of 1/N of the unit. Gloo's
// reduce is itself a ring reduce-scatter plus a gather to the root, so the N of them move about
// (N+1)/N the bytes of one ring reduce-scatter, in N collectives instead of one (NCCL gets the
// same calls). All-gather uses c10d's list all-gather. Both are issued in one order on every rank.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/train/optimizer.h"

namespace grpo::core::dist {

class Communicator;

enum class Sharding { kNone, kOptimizer, kGradients };

// "none", "optimizer", "gradients".
const char* sharding_name(Sharding sharding);
std::optional<Sharding> parse_sharding(std::string_view name);

class ShardLayout {
 public:
  struct Unit {
    std::vector<std::size_t> params;    // indices into the parameter list, in the unit's order
    std::vector<std::int64_t> offsets;  // each parameter's offset in the unit's values
    std::int64_t numel = 0;             // values of the unit (unpadded)
    std::int64_t chunk = 0;             // ceil(numel / N): one rank's share
    std::int64_t shard_offset = 0;      // where this rank's chunk of the unit starts in its shard
  };
  // A run of one parameter's values that lies in this rank's shard.
  struct Piece {
    std::size_t unit = 0;           // index into units()
    std::size_t param = 0;
    std::int64_t param_offset = 0;  // in the parameter's flattened values
    std::int64_t length = 0;
    std::int64_t shard_offset = 0;  // in this rank's shard
  };

  // `units`: a partition of [0, params.size()) (each parameter in exactly one unit, checked).
  ShardLayout(const std::vector<at::Tensor>& params, std::vector<std::vector<std::size_t>> units, int rank, int world);

  int rank() const { return rank_; }
  int world() const { return world_; }
  const std::vector<Unit>& units() const { return units_; }
  const std::vector<Piece>& pieces() const { return pieces_; }  // this rank's, in shard order
  std::int64_t shard_numel() const { return shard_numel_; }

 private:
  int rank_, world_;
  std::vector<Unit> units_;
  std::vector<Piece> pieces_;
  std::int64_t shard_numel_ = 0;
};

// The units of a model's trainable parameters: one per decoder layer ("model.layers.<i>." in
// the name), and one for everything else (embeddings, final norm, LM head), first. `names`
// align with the parameters.
std::vector<std::vector<std::size_t>> decoder_units(const std::vector<std::string>& names);

// AdamW over this rank's shard (see above): torch::optim::AdamW's operations, in its order, on
// the shard's slices of the parameters, gradients and moments. Parameter groups are
// make_adamw's (weight decay on matrices only), so set_learning_rate() applies as for AdamW.
//
// Gradients: under kOptimizer the parameters' .grad (all-reduced, full); under kGradients
// grad_shard(), which the reduce-scatter of core/dist/gradient_reducer.h fills.
//
// Checkpoints: save()/load() hold this rank's shard (moments, step count) and its layout;
// load() refuses a shard of another world size, rank or layout.
class ShardedAdamW : public torch::optim::Optimizer, public SelfClippingOptimizer, public CheckedOptimizerState {
 public:
  ShardedAdamW(std::vector<at::Tensor> params, std::vector<std::vector<std::size_t>> units, const OptimizerSettings& settings,
               Communicator& comm, Sharding mode);

  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  void check_state(torch::serialize::InputArchive& archive) const override;

  // The global gradient norm (float64; under kGradients over every rank's shard, summed over
  // ranks), with clip_grad_norm's clipping of the gradients this optimizer reads.
  double clip_grad_norm(double max_norm) override;

  Sharding mode() const { return mode_; }
  const ShardLayout& layout() const { return layout_; }
  at::Tensor& grad_shard() { return grad_shard_; }
  // Bytes of the AdamW state this rank holds (moments of its shard).
  std::int64_t state_bytes() const;

 private:
  void all_gather_parameters();
  at::Tensor param_values(std::size_t k) const;  // the parameter's values, flat (shares storage)

  std::vector<at::Tensor> params_;
  std::vector<int> group_of_;  // per parameter: its index in param_groups()
  Communicator& comm_;
  Sharding mode_;
  ShardLayout layout_;
  at::Tensor exp_avg_, exp_avg_sq_, grad_shard_;
  std::int64_t step_ = 0;
};

// Bytes of an optimizer's per-parameter state (AdamW's moments, or a ShardedAdamW's shard).
std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace grpo::core::dist
