// Sharded data parallel (dist.sharding), ZeRO's stages on c10d:
//   optimizer  (ZeRO-1) each rank keeps the AdamW state (exp_avg, exp_avg_sq) of 1/N of the
//              trainable parameters, steps that shard and all-gathers the updated values;
//   gradients  (ZeRO-2) also: gradients are reduced to the rank that owns them (a reduce-scatter)
//              instead of all-reduced, and every full-size gradient is freed after the reduction;
//   full       (ZeRO-3) also: the parameters' values are sharded at rest (ShardedParameters): a
//              rank keeps its chunks only, and a unit is all-gathered when a pass uses it and
//              freed after, layer by layer in forward and again in backward.
// The trainable parameters (policy weights in float32 under fp32 and bf16-mixed, where they are
// their own master copy; the LoRA adapters) are replicated between steps under optimizer and
// gradients.
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
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/transformer.h"
#include "core/optim/optimizer.h"

namespace grpo::core::dist {

class Communicator;

enum class Sharding { kNone, kOptimizer, kGradients, kFull };

// "none", "optimizer", "gradients", "full".
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
    std::size_t source = 0;             // its index in the constructor's `units` (empty ones are dropped)
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
// align with the parameters. Unit k > 0 is decoder layer k - 1.
std::vector<std::vector<std::size_t>> decoder_units(const std::vector<std::string>& names);
// The decoder layer of each of decoder_units()'s `units` (-1 for the first): ShardedAdamW's
// layer_of_unit.
std::vector<std::int64_t> decoder_unit_layers(std::size_t units);

// dist.sharding full: the parameters' values at rest are this rank's chunks only (shard()).
// Each unit's parameters are rebound to views of one flat buffer per unit [chunk * N]; gather()
// allocates the buffer's storage and all-gathers every rank's chunk into it, release() frees
// the storage (resized to 0 bytes, kept as the same storage object, so the tensors autograd
// saved in a forward see the values again when backward gathers the unit; PyTorch's FSDP frees
// its flat parameters the same way). The parameters keep their shapes throughout.
//
// As the model's LayerParameterResidency: decoder layer i is the unit of its parameters (with
// LoRA, the adapters are one unit, used by every layer); layer -1 the rest. While a Hold lives,
// every unit stays gathered and release() does nothing: passes whose count differs between
// ranks (no-grad log-probs of each rank's own samples), weight snapshots and checkpoints run
// under one, so that gathers (collectives) happen in the same order on every rank.
class ShardedParameters : public LayerParameterResidency {
 public:
  // `layer_of_source[k]`: the decoder layer that the layout's source unit k (Unit::source) holds,
  // or -1. Starts with every unit gathered, the shard taken from the parameters' values.
  ShardedParameters(std::vector<at::Tensor> params, const ShardLayout& layout, const std::vector<std::int64_t>& layer_of_source,
                    Communicator& comm);

  void acquire(std::int64_t layer) override;
  void release(std::int64_t layer) override;

  void gather(std::size_t unit);   // no-op when gathered
  void free(std::size_t unit);     // no-op when free or while a Hold lives
  void gather_all();
  void free_all();
  // This rank's chunks of the (gathered) values into shard(): after weights were loaded into
  // the parameters (a resumed checkpoint).
  void capture();

  // Every unit gathered for its lifetime, freed after (the outermost Hold).
  class Hold {
   public:
    explicit Hold(ShardedParameters* params);  // null: nothing to hold
    ~Hold();
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    ShardedParameters* params_;
  };

  at::Tensor& shard() { return shard_; }  // [layout.shard_numel()]: the values this rank owns
  const at::Tensor& shard() const { return shard_; }
  // Bytes of parameter values this rank holds now: its shard plus the gathered units' buffers.
  std::int64_t resident_bytes() const;
  bool gathered(std::size_t unit) const { return gathered_[unit]; }
  bool held() const { return holds_ > 0; }

 private:
  std::size_t unit_of_layer(std::int64_t layer) const;

  std::vector<at::Tensor> params_;
  ShardLayout layout_;  // a copy: the model and autograd's nodes may keep this object longer than its optimizer
  Communicator& comm_;
  std::vector<at::Tensor> buffers_;  // per unit: [chunk * N], the parameters are views of it
  std::vector<bool> gathered_;
  std::vector<std::size_t> layer_units_;  // decoder layer -> unit
  std::size_t rest_unit_ = 0;
  bool has_rest_ = false;
  int holds_ = 0;
  at::Tensor shard_;
};

// AdamW over this rank's shard (see above): torch::optim::AdamW's operations, in its order, on
// the shard's slices of the parameters, gradients and moments. Parameter groups are
// make_adamw's (weight decay on matrices only), so set_learning_rate() applies as for AdamW.
//
// Gradients: under kOptimizer the parameters' .grad (all-reduced, full); under kGradients and
// kFull grad_shard(), which the reduce-scatter of core/dist/gradient_reducer.h fills.
//
// kFull: the values stepped are ShardedParameters' shard (the optimizer owns them, parameters()),
// and nothing is all-gathered after the step: passes gather what they use.
//
// Checkpoints: save()/load() hold this rank's shard (moments, step count) and its layout;
// load() refuses a shard of another world size, rank or layout.
class ShardedAdamW : public torch::optim::Optimizer, public SelfClippingOptimizer, public CheckedOptimizerState {
 public:
  // `layer_of_unit` (kFull): per entry of `units`, the decoder layer it holds or -1 (empty: all -1).
  ShardedAdamW(std::vector<at::Tensor> params, std::vector<std::vector<std::size_t>> units, const OptimizerSettings& settings,
               Communicator& comm, Sharding mode, const std::vector<std::int64_t>& layer_of_unit = {});

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
  // kFull: the sharded parameter values (null otherwise).
  const std::shared_ptr<ShardedParameters>& parameters() const { return sharded_params_; }
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
  std::shared_ptr<ShardedParameters> sharded_params_;
  std::int64_t step_ = 0;
};

// Runs, once, the collectives `mode` composes (list all-gather; also reduce under gradients and
// full) on one value per rank of `like`'s dtype and device: a backend that cannot serve them (a
// Gloo without bfloat16, say) fails here, before a model step, with an error that names the
// mode, the collective, the dtype and the device. Collective: every rank calls it.
void check_sharding_collectives(Communicator& comm, Sharding mode, const at::Tensor& like);

// Bytes of an optimizer's per-parameter state (AdamW's moments, or a ShardedAdamW's shard).
std::int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

}  // namespace grpo::core::dist
