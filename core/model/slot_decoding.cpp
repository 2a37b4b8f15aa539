// CausalLMImpl's passes over a SlotKVCache, the rollout engine's decoding: decode_slots and
// extend_slots (steps sized to their rows and longest sequence), decode_slots_fixed (fixed
// shapes, for CUDA graphs). Declared in transformer.h; apart from transformer.cpp to keep
// each file to one concern.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/moe.h"
#include "core/model/transformer.h"

namespace grpo::core {

torch::Tensor CausalLMImpl::decode_slots(const torch::Tensor& input_ids, SlotKVCache& cache) {
  if (input_ids.dim() != 1) throw std::invalid_argument("decode_slots: input_ids must be [rows]");
  const int64_t R = input_ids.size(0);
  if (R <= 0 || R > cache.num_slots())
    throw std::invalid_argument("decode_slots: " + std::to_string(R) + " rows for a cache of " +
                                std::to_string(cache.num_slots()) + " slots");
  return forward_slots(input_ids.view({R, 1}), cache, 0).view({R, -1});
}

torch::Tensor CausalLMImpl::extend_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first) {
  if (input_ids.dim() != 2 || input_ids.size(0) < 1 || input_ids.size(1) < 1)
    throw std::invalid_argument("extend_slots: input_ids must be [rows, tokens], both >= 1");
  if (first < 0 || first + input_ids.size(0) > cache.num_slots())
    throw std::invalid_argument("extend_slots: slots [" + std::to_string(first) + ", " +
                                std::to_string(first + input_ids.size(0)) + ") are not in a cache of " +
                                std::to_string(cache.num_slots()));
  return forward_slots(input_ids, cache, first);
}

torch::Tensor CausalLMImpl::decode_slots_fixed(const torch::Tensor& input_ids, const torch::Tensor& past, SlotKVCache& cache) {
  if (torch::GradMode::is_enabled())
    throw std::invalid_argument("decoding against a SlotKVCache needs torch::NoGradGuard: the cache is written in place");
  if (input_ids.dim() != 1 || past.dim() != 1 || past.size(0) != input_ids.size(0) || past.scalar_type() != torch::kLong)
    throw std::invalid_argument("decode_slots_fixed: input_ids and past must be [rows], past int64");
  const int64_t R = input_ids.size(0);
  if (R <= 0 || R > cache.num_slots())
    throw std::invalid_argument("decode_slots_fixed: " + std::to_string(R) + " rows for a cache of " +
                                std::to_string(cache.num_slots()) + " slots");
  const std::string why = fixed_decode_unsupported();
  if (!why.empty()) throw std::invalid_argument("decode_slots_fixed: " + why);
  SlotStep step;
  step.cache = &cache;
  step.first = 0;
  step.rows = R;
  step.past = past;
  step.keys = cache.capacity();  // every key; those at or past a row's length are masked
  return run_slots(input_ids.view({R, 1}), step).view({R, -1});
}

std::string CausalLMImpl::fixed_decode_unsupported() const {
  if (rotary_.length_dependent() || (local_rotary_ && local_rotary_->length_dependent()))
    return "its RoPE scaling (dynamic NTK, longrope) depends on each call's largest position, read on the host";
  // An MoE block whose experts run one by one (on the CPU; on CUDA where they cannot run grouped:
  // this LibTorch, the GPU, the dtype under the current autocast, an adapter that is on;
  // core/model/moe.h) cuts their slices on the host. Asked with an empty batch on the block's
  // own device.
  for (const auto& layer : *model->layers) {
    const auto& moe = layer->as<DecoderLayer>()->moe;
    if (!moe) continue;
    const torch::Tensor& router = moe->gate->weight;
    const std::string why = experts_run_looped(moe->experts, torch::empty({0, router.size(1)}, router.options()));
    if (!why.empty()) return "its mixture-of-experts blocks cut each expert's tokens on the host (" + why + ")";
  }
  return "";
}

torch::Tensor CausalLMImpl::forward_slots(const torch::Tensor& input_ids, SlotKVCache& cache, int64_t first) {
  if (torch::GradMode::is_enabled())
    throw std::invalid_argument("decoding against a SlotKVCache needs torch::NoGradGuard: the cache is written in place");
  const int64_t R = input_ids.size(0), T = input_ids.size(1);
  std::vector<int64_t> past;
  for (int64_t r = first; r < first + R; ++r) past.push_back(cache.length(r));
  int64_t max_past = 0;
  for (int64_t p : past) {
    if (p + T > cache.capacity())
      throw std::invalid_argument("decode_slots: a slot holds " + std::to_string(p) + " of " +
                                  std::to_string(cache.capacity()) + " tokens; no room for " + std::to_string(T) + " more");
    max_past = std::max(max_past, p);
  }
  SlotStep step;
  step.cache = &cache;
  step.first = first;
  step.rows = R;
  step.past = torch::tensor(past, torch::kLong).to(input_ids.device());
  step.keys = max_past + T;
  auto h = run_slots(input_ids, step);
  cache.advance(first, R, T);
  return h;
}

torch::Tensor CausalLMImpl::run_slots(const torch::Tensor& input_ids, SlotStep& step) {
  const int64_t R = step.rows, T = input_ids.size(1);
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(input_ids.device());
  const auto kpos = torch::arange(step.keys, long_opts);
  const auto qpos = step.past.view({R, 1}) + torch::arange(T, long_opts).view({1, T});  // [R, T]
  step.allowed = (kpos.view({1, 1, step.keys}) <= qpos.view({R, T, 1})).view({R, 1, T, step.keys});
  AttentionLayout layout;  // positions only: the slot path builds its own mask
  layout.position_ids = qpos;
  if (config_.sliding_window > 0)
    step.allowed_sliding = step.allowed & (kpos.view({1, 1, step.keys}) > (qpos - config_.sliding_window).view({R, T, 1}))
                                              .view({R, 1, T, step.keys});
  const RotaryTables rotary = rotary_tables(layout.position_ids);
  AttentionContext context;
  context.layout = std::move(layout);
  context.slots = &step;
  context.backend = attention_backend_;
  auto h = embed(input_ids);
  for (const auto& layer : *model->layers) h = layer->as<DecoderLayer>()->forward(h, rotary, context);
  return model->norm(h);
}

}  // namespace grpo::core
