#include "plugins/backends/native/bucketed_decoder.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

#include "core/model/precision.h"
#include "core/model/projection.h"
#include "grpo/sdk/log.h"

#if defined(GRPO_HAVE_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace grpo::native {

const char* decode_steps_name(DecodeSteps steps) {
  switch (steps) {
    case DecodeSteps::kAuto: return "auto";
    case DecodeSteps::kDynamic: return "dynamic";
    case DecodeSteps::kBucketed: return "bucketed";
    case DecodeSteps::kGraphs: return "graphs";
  }
  return "?";
}

std::optional<DecodeSteps> parse_decode_steps(std::string_view name) {
  for (auto s : {DecodeSteps::kAuto, DecodeSteps::kDynamic, DecodeSteps::kBucketed, DecodeSteps::kGraphs})
    if (name == decode_steps_name(s)) return s;
  return std::nullopt;
}

bool cuda_graphs_compiled() {
#if defined(GRPO_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

DecodeStepsChoice choose_decode_steps(DecodeSteps requested, const core::CausalLMImpl& model, const at::Device& device) {
  DecodeStepsChoice choice;
  if (requested == DecodeSteps::kDynamic) return choice;
  const std::string fixed = model.fixed_decode_unsupported();
  std::string graphs;
  if (!device.is_cuda()) graphs = "CUDA graphs run on CUDA devices only";
  else if (!cuda_graphs_compiled()) graphs = "this build has no CUDA code paths (GRPO_HAVE_CUDA)";
  switch (requested) {
    case DecodeSteps::kAuto:
      if (fixed.empty() && graphs.empty()) choice.steps = DecodeSteps::kGraphs;
      return choice;  // auto never reports a fallback: it asked for nothing in particular
    case DecodeSteps::kBucketed:
      if (fixed.empty()) choice.steps = DecodeSteps::kBucketed;
      else choice.fallback_reason = "bucketed: the model " + fixed;
      return choice;
    case DecodeSteps::kGraphs:
      if (!fixed.empty()) {
        choice.fallback_reason = "graphs: the model " + fixed;
        return choice;
      }
      choice.steps = graphs.empty() ? DecodeSteps::kGraphs : DecodeSteps::kBucketed;
      if (!graphs.empty()) choice.fallback_reason = "graphs: " + graphs;
      return choice;
    case DecodeSteps::kDynamic:
      return choice;
  }
  return choice;
}

std::int64_t decode_bucket(std::int64_t rows, std::int64_t max_rows) {
  if (rows < 1 || rows > max_rows)
    throw std::invalid_argument("decode_bucket: " + std::to_string(rows) + " rows, expected [1, " + std::to_string(max_rows) + "]");
  std::int64_t bucket = rows <= 8 ? 1 : (rows + 7) / 8 * 8;
  while (bucket < rows) bucket *= 2;  // 1, 2, 4, 8 below 8 rows
  return std::min(bucket, max_rows);
}

namespace {

// What a captured graph addresses: the cache's buffers, the parameters' and buffers' storage,
// and the host state that picks the kernels (autocast, the attention backend, deterministic
// algorithms, whether the projections' hooks, LoRA adapters say, apply). Weights loaded
// into new tensors or a regrown cache change it and the graphs are captured again; weights
// updated in place (the optimizer) do not need that: a replay reads them where they are.
std::size_t graph_key(core::CausalLMImpl& model, const core::SlotKVCache& cache) {
  std::size_t h = 0;
  auto mix = [&h](std::size_t v) { h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2); };
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    mix(std::hash<const void*>{}(cache.keys(l).data_ptr()));
    mix(std::hash<const void*>{}(cache.values(l).data_ptr()));
  }
  mix(static_cast<std::size_t>(cache.capacity()));
  mix(static_cast<std::size_t>(cache.num_slots()));
  for (const auto& p : model.parameters()) mix(std::hash<const void*>{}(p.data_ptr()));
  for (const auto& b : model.buffers()) mix(std::hash<const void*>{}(b.data_ptr()));
  mix(core::autocast_enabled_on(c10::DeviceType::CUDA) ? 1 : 0);
  mix(static_cast<std::size_t>(core::autocast_dtype_on(c10::DeviceType::CUDA)));
  mix(static_cast<std::size_t>(model.attention_backend()));
  mix(at::globalContext().deterministicAlgorithms() ? 1 : 0);
  for (const auto& m : model.modules(/*include_self=*/false)) {
    const auto* projection = dynamic_cast<const core::ProjectionImpl*>(m.get());
    const core::ProjectionHook* hook = projection ? projection->hook() : nullptr;
    if (hook) mix(hook->active() ? 3 : 2);
  }
  return h;
}

// The step every bucket runs: rows [0, bucket) of `inputs` ([2, max_rows]: tokens, past).
at::Tensor bucket_step(core::CausalLMImpl& model, core::SlotKVCache& cache, const at::Tensor& inputs, std::int64_t bucket) {
  const at::Tensor hidden = model.decode_slots_fixed(inputs[0].narrow(0, 0, bucket), inputs[1].narrow(0, 0, bucket), cache);
  return model.logits(hidden);
}

}  // namespace

#if defined(GRPO_HAVE_CUDA)
struct BucketedDecoder::Graphs {
  struct Captured {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    at::Tensor logits;  // [bucket, vocab]: where each replay leaves its output
  };
  at::Tensor inputs;   // [2, max_rows] int64 on the device: the graphs read their inputs here
  at::Tensor staging;  // its pinned host twin: one asynchronous copy per step
  at::cuda::CUDAEvent copied;  // the last copy out of `staging` has run
  // One memory pool for every bucket's graph (one replays at a time, and its output is read
  // before the next), held for the decoder's life: graphs captured again after a key change
  // reuse its blocks, where a pool id whose graphs were all destroyed is retired.
  std::optional<at::cuda::MemPool> pool;
  // A one-kernel graph captured into the pool first and kept for the decoder's life. MemPool
  // holds the device allocator's side of the pool; the pinned host allocator (LibTorch 2.11)
  // counts the pool's users by its graphs alone, and a capture into a pool whose graphs were
  // all destroyed (every recapture after a key change) fails its internal assert
  // (CachingHostAllocator.h, use_count > 0). This graph keeps that count above zero.
  std::unique_ptr<at::cuda::CUDAGraph> anchor;
  at::Tensor anchor_target;  // what the anchor's kernel writes: allocated outside the pool
  std::map<std::int64_t, Captured> by_bucket;  // destroyed before the anchor and the pool
  std::optional<c10::cuda::CUDAStream> stream;  // capture needs a stream other than the default
  std::size_t key = 0;
};
#else
struct BucketedDecoder::Graphs {};
#endif

BucketedDecoder::BucketedDecoder(std::int64_t max_rows, bool graphs, const at::Device& device)
    : max_rows_(max_rows), device_(device) {
  if (max_rows < 1) throw std::invalid_argument("BucketedDecoder: max_rows must be >= 1");
  if (!graphs) return;
#if defined(GRPO_HAVE_CUDA)
  if (!device.is_cuda()) throw std::invalid_argument("BucketedDecoder: CUDA graphs need a CUDA device");
  graphs_ = std::make_unique<Graphs>();
  const auto index = at::TensorOptions().dtype(at::kLong);
  graphs_->inputs = at::zeros({2, max_rows}, index.device(device));
  graphs_->staging = at::zeros({2, max_rows}, index.pinned_memory(true));
  graphs_->stream.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
  const c10::cuda::CUDAGuard device_guard(device);  // the pool belongs to the current device
  graphs_->pool.emplace();
#else
  throw std::invalid_argument("BucketedDecoder: this build has no CUDA code paths (GRPO_HAVE_CUDA)");
#endif
}

BucketedDecoder::~BucketedDecoder() = default;

at::Tensor BucketedDecoder::step(core::CausalLMImpl& model, core::SlotKVCache& cache, const std::vector<std::int64_t>& tokens) {
  const auto rows = static_cast<std::int64_t>(tokens.size());
  const std::int64_t bucket = decode_bucket(rows, std::min(max_rows_, cache.num_slots()));
  std::vector<std::int64_t> past(tokens.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = past[static_cast<std::size_t>(r)] = cache.length(r);
    if (p >= cache.capacity())
      throw std::invalid_argument("BucketedDecoder::step: a slot holds " + std::to_string(p) + " of " +
                                  std::to_string(cache.capacity()) + " tokens; no room for one more");
  }
  padded_rows_ += bucket - rows;
  if (!graphs_ || graphs_failed_) {
    std::vector<std::int64_t> host(static_cast<std::size_t>(2 * bucket), 0);  // padding rows: token 0 at position 0
    std::copy(tokens.begin(), tokens.end(), host.begin());
    std::copy(past.begin(), past.end(), host.begin() + bucket);
    const at::Tensor inputs = at::tensor(host, at::kLong).view({2, bucket}).to(device_);
    return bucket_step(model, cache, inputs, bucket).narrow(0, 0, rows);
  }
#if defined(GRPO_HAVE_CUDA)
  Graphs& g = *graphs_;
  const c10::cuda::CUDAGuard device_guard(device_);
  g.copied.synchronize();  // the previous step's copy has left the pinned buffer
  auto staged = g.staging.accessor<int64_t, 2>();
  for (std::int64_t r = 0; r < max_rows_; ++r) {
    staged[0][r] = r < rows ? tokens[static_cast<std::size_t>(r)] : 0;
    staged[1][r] = r < rows ? past[static_cast<std::size_t>(r)] : 0;
  }
  g.inputs.copy_(g.staging, /*non_blocking=*/true);
  g.copied.record();
  const std::size_t key = graph_key(model, cache);
  if (key != g.key) {  // new weights' storage, a regrown cache, other kernels: capture again
    g.by_bucket.clear();
    g.key = key;
  }
  auto found = g.by_bucket.find(bucket);
  if (found != g.by_bucket.end()) {
    found->second.graph->replay();
    ++replays_;
    return found->second.logits.narrow(0, 0, rows);
  }
  // First step of this bucket: run it eagerly on the capture stream (this step's result; it
  // also makes the lazy initializations — cuBLAS workspaces, first kernel loads — that must
  // not happen inside a capture), then capture it for the next steps. Capturing runs nothing.
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
  current.synchronize();  // the side stream must see the inputs copied above
  at::Tensor logits;
  Graphs::Captured captured;
  {
    const c10::cuda::CUDAStreamGuard stream_guard(*g.stream);
    logits = bucket_step(model, cache, g.inputs, bucket);
    g.stream->synchronize();
    logits.record_stream(current);  // read there next
    captured.graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      if (!g.anchor) {
        g.anchor_target = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
        auto anchor = std::make_unique<at::cuda::CUDAGraph>();
        anchor->capture_begin(g.pool->id(), cudaStreamCaptureModeThreadLocal);
        g.anchor_target.zero_();  // one kernel: an empty graph warns
        anchor->capture_end();
        g.anchor = std::move(anchor);
      }
      // Thread-local mode: a training thread using the device meanwhile (asynchronous
      // rollouts) is not part of the capture and must not invalidate it.
      captured.graph->capture_begin(g.pool->id(), cudaStreamCaptureModeThreadLocal);
      try {
        captured.logits = bucket_step(model, cache, g.inputs, bucket);
      } catch (...) {
        try {
          captured.graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      captured.graph->capture_end();
    } catch (const std::exception& e) {
      // A kernel that cannot be captured (one that reads back to the host): this step's
      // result stands, and the steps go on eagerly in the same shapes. An invalidated capture
      // throws in capture_end before it stops routing the stream's allocations to the pool:
      // stop it here (a no-op error when capture_end got that far).
      (void)cudaGetLastError();
      captured.logits = at::Tensor();
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), g.pool->id());
      } catch (...) {
      }
      graphs_failed_ = true;
      sdk::log_warn(std::string("native engine: capturing the decode step as a CUDA graph failed; decoding goes on "
                                "without graphs (same shapes, same results): ") +
                    e.what());
      return logits.narrow(0, 0, rows);
    }
  }
  g.by_bucket.emplace(bucket, std::move(captured));
  ++captured_;
  return logits.narrow(0, 0, rows);
#else
  throw std::logic_error("BucketedDecoder: graphs without GRPO_HAVE_CUDA");
#endif
}

}  // namespace grpo::native
