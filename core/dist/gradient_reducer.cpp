#include "core/dist/gradient_reducer.h"

#include <torch/torch.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "core/dist/process_group.h"
#include "core/dist/sharding.h"

namespace grpo::core::dist {

struct GradientReducer::Bucket {
  at::Tensor flat;                   // the bucket's gradients, back to back
  std::int64_t numel = 0;            // of `flat` (reduce-scatter mode: padded to N chunks)
  std::vector<std::size_t> params;   // indices into params_
  std::size_t waiting = 0;           // params whose final gradient is not in yet
  std::vector<Communicator::Pending> pending;
};

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm, std::int64_t bucket_bytes)
    : params_(std::move(parameters)), comm_(comm) {
  if (bucket_bytes < 1) throw std::invalid_argument("gradient buckets need a size >= 1 byte");
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  ready_.assign(params_.size(), false);
  // Reverse order; a new bucket when full or when the dtype or device changes.
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    const bool same_kind = !groups.empty() && params_[groups.back().front()].scalar_type() == p.scalar_type() &&
                           params_[groups.back().front()].device() == p.device();
    const std::int64_t size = p.numel() * static_cast<std::int64_t>(p.element_size());
    if (groups.empty() || !same_kind || bytes + size > bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += size;
  }
  for (std::size_t b = 0; b < groups.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    std::int64_t n = 0;
    for (std::size_t k : groups[b]) {
      bucket_of_[k] = b;
      offset_of_[k] = n;
      n += params_[k].numel();
    }
    const at::Tensor& first = params_[groups[b].front()];
    bucket->flat = torch::zeros({n}, first.options().requires_grad(false));
    bucket->numel = n;
    bucket->params = groups[b];
    bucket->waiting = groups[b].size();
    buckets_.push_back(std::move(bucket));
  }
  install_hooks();
}

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters, Communicator& comm, const ShardLayout& layout,
                                 at::Tensor grad_shard)
    : params_(std::move(parameters)), comm_(comm), layout_(&layout), grad_shard_(std::move(grad_shard)) {
  if (grad_shard_.numel() != layout.shard_numel())
    throw std::invalid_argument("gradient reduce-scatter: the gradient shard has " + std::to_string(grad_shard_.numel()) +
                                " values, the layout " + std::to_string(layout.shard_numel()));
  bucket_of_.resize(params_.size());
  offset_of_.resize(params_.size());
  ready_.assign(params_.size(), false);
  for (std::size_t u = layout.units().size(); u-- > 0;) {  // the last layers' gradients come first
    const ShardLayout::Unit& unit = layout.units()[u];
    auto bucket = std::make_unique<Bucket>();
    bucket->numel = unit.chunk * layout.world();
    bucket->params = unit.params;
    bucket->waiting = unit.params.size();
    for (std::size_t i = 0; i < unit.params.size(); ++i) {
      bucket_of_[unit.params[i]] = buckets_.size();
      offset_of_[unit.params[i]] = unit.offsets[i];
    }
    unit_of_bucket_.push_back(u);
    buckets_.push_back(std::move(bucket));
  }
  install_hooks();
}

at::Tensor& GradientReducer::flat_of(std::size_t bucket) {
  Bucket& b = *buckets_[bucket];
  if (!b.flat.defined()) b.flat = torch::zeros({b.numel}, params_[b.params.front()].options().requires_grad(false));
  return b.flat;
}

// Hooks on the leaves fire once per backward with the incoming gradient, before autograd
// accumulates it into .grad (a tied parameter's uses are summed first).
void GradientReducer::install_hooks() {
  for (std::size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_hook([this, k](const at::Tensor& grad) {
      if (armed_) on_gradient(k, grad);
    }));
}

GradientReducer::~GradientReducer() {
  // A backward after the reducer is gone must not call it. Pending operations (if finish()
  // was not reached) are waited for by their destructors.
  for (std::size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
}

std::size_t GradientReducer::num_buckets() const { return buckets_.size(); }

void GradientReducer::arm() {
  armed_ = true;
  launched_early_ = 0;
}

void GradientReducer::on_gradient(std::size_t k, const at::Tensor& grad) {
  if (ready_[k]) return;
  torch::NoGradGuard no_grad;
  Bucket& b = *buckets_[bucket_of_[k]];
  at::Tensor slot = flat_of(bucket_of_[k]).narrow(0, offset_of_[k], params_[k].numel());
  const at::Tensor& held = params_[k].grad();
  if (held.defined())
    slot.copy_((held + grad).view(-1));
  else
    slot.copy_(grad.reshape(-1));
  ready_[k] = true;
  if (--b.waiting == 0) launch_ready();
}

void GradientReducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->waiting == 0) {
    Bucket& b = *buckets_[next_launch_];
    const std::string what = "gradients (bucket " + std::to_string(next_launch_ + 1) + " of " + std::to_string(buckets_.size()) + ")";
    if (!layout_) {
      b.pending.push_back(comm_.all_reduce_sum_async(b.flat, what));
    } else {  // chunk r of the unit to rank r
      const std::int64_t chunk = layout_->units()[unit_of_bucket_[next_launch_]].chunk;
      for (int r = 0; r < layout_->world(); ++r) {
        at::Tensor part = flat_of(next_launch_).narrow(0, chunk * r, chunk);
        b.pending.push_back(comm_.reduce_sum_async(part, r, what + " to rank " + std::to_string(r)));
      }
    }
    if (armed_) ++launched_early_;
    ++next_launch_;
  }
}

void GradientReducer::fill_from_grad(std::size_t k) {
  torch::NoGradGuard no_grad;
  Bucket& b = *buckets_[bucket_of_[k]];
  at::Tensor slot = flat_of(bucket_of_[k]).narrow(0, offset_of_[k], params_[k].numel());
  const at::Tensor& held = params_[k].grad();
  if (held.defined())
    slot.copy_(held.reshape(-1));
  else
    slot.zero_();
  ready_[k] = true;
  --b.waiting;
}

void GradientReducer::finish() {
  armed_ = false;
  // Parameters the armed backward did not reach (all of them without one) keep their
  // accumulated (or zero) gradient.
  for (std::size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) fill_from_grad(k);
  launch_ready();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) {
    for (auto& p : b->pending) p.wait();
    b->pending.clear();
  }
  last_wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (layout_) return finish_scatter();
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const Bucket& b = *buckets_[bucket_of_[k]];
    const at::Tensor sum = b.flat.narrow(0, offset_of_[k], params_[k].numel()).view_as(params_[k]);
    if (params_[k].grad().defined())
      params_[k].mutable_grad().copy_(sum);
    else
      params_[k].mutable_grad() = sum.clone();
  }
  // Ready for the next step.
  for (auto& b : buckets_) b->waiting = b->params.size();
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

// Reduce-scatter mode: this rank's summed chunks into the gradient shard; the buckets and the
// full-size gradients are freed.
void GradientReducer::finish_scatter() {
  torch::NoGradGuard no_grad;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const ShardLayout::Unit& unit = layout_->units()[unit_of_bucket_[b]];
    grad_shard_.narrow(0, unit.shard_offset, unit.chunk).copy_(buckets_[b]->flat.narrow(0, unit.chunk * layout_->rank(), unit.chunk));
    buckets_[b]->flat = at::Tensor();
    buckets_[b]->waiting = buckets_[b]->params.size();
  }
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
  std::fill(ready_.begin(), ready_.end(), false);
  next_launch_ = 0;
}

}  // namespace grpo::core::dist
