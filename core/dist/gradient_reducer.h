// Gradient all-reduce for data-parallel training: the parameters' gradients, summed over ranks,
// in buckets of about dist.bucket_mb, launched while backward is still running.
//
// Buckets hold parameters in reverse registration order (backward produces the last layers'
// gradients first) and are launched strictly in bucket order, so every rank issues the same
// collectives in the same order whatever its autograd schedule, and a rank with nothing to
// backpropagate (no sample in this mini-batch) still takes part with zero gradients.
//
// Use per optimizer step:
//   reducer.arm();        // before the LAST backward of the step: its gradients are final
//   loss.backward();      // hooks copy each finished gradient (accumulated + new) into its
//                         // bucket and launch every full bucket, overlapping the rest of backward
//   reducer.finish();     // launches what is left, waits, writes the sums into .grad
// A step without arm() (no local backward) just calls finish().
//
// Sum, not mean: the trainer's losses use global denominators (core/algo/loss_aggregation.h),
// so the sum of the ranks' gradients is the gradient of the global batch.
//
// dist.sharding: gradients (the second constructor): one bucket per unit of a ShardLayout
// (core/dist/sharding.h), in reverse unit order; a bucket is reduced to the owners of its
// chunks instead of all-reduced, this rank's chunk lands in the optimizer's gradient shard,
// and finish() frees the buckets and every parameter's .grad: between steps and during the
// optimizer step a rank holds 1/N of the gradients. Gradients still accumulate locally in .grad
// over a step's micro-batches (communication once per optimizer step, as with all-reduce).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace grpo::core::dist {

class Communicator;
class ShardLayout;

class GradientReducer {
 public:
  // `parameters`: the trainable parameters (requires_grad); bucket_bytes >= 1.
  GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm, std::int64_t bucket_bytes);
  // Reduce-scatter to owners: `layout` describes `parameters` (and must outlive the reducer);
  // `grad_shard` [layout.shard_numel()] receives this rank's summed chunk of every unit.
  GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm, const ShardLayout& layout, at::Tensor grad_shard);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void arm();
  void finish();

  std::size_t num_buckets() const;
  // Of the last finish(): buckets launched by backward hooks (before finish), and seconds
  // finish() waited for the all-reduces (the communication backward did not hide).
  std::size_t launched_during_backward() const { return launched_early_; }
  double last_wait_seconds() const { return last_wait_s_; }

 private:
  struct Bucket;
  void on_gradient(std::size_t param, const at::Tensor& grad);
  void launch_ready();
  void fill_from_grad(std::size_t param);
  void install_hooks();
  at::Tensor& flat_of(std::size_t bucket);  // a bucket's buffer, allocated when first used
  void finish_scatter();

  std::vector<at::Tensor> params_;
  Communicator& comm_;
  std::vector<unsigned> hooks_;  // per parameter; removed by the destructor
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::size_t> bucket_of_;   // param -> bucket
  std::vector<std::int64_t> offset_of_;  // param -> offset in its bucket
  std::vector<bool> ready_;              // param's final gradient is in its bucket
  std::size_t next_launch_ = 0;
  bool armed_ = false;
  const ShardLayout* layout_ = nullptr;  // reduce-scatter mode
  at::Tensor grad_shard_;
  std::vector<std::size_t> unit_of_bucket_;
  std::size_t launched_early_ = 0;
  double last_wait_s_ = 0.0;
};

}  // namespace grpo::core::dist
