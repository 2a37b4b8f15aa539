// The key/value storage of incremental decoding: KVCache (one shared length, padded rows; the
// trainer's and grpo-generate's batches) and SlotKVCache (one sequence per row, each with its
// own length: the rollout engine's continuous batching). Keys are stored after rotary. Only the
// attention seam (core/model/attention/attention.h) writes keys and values; the model advances
// the lengths once every layer has written (inference only: both need torch::NoGradGuard).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/model/model_config.h"

namespace grpo::core {

class KVCache {
 public:
  KVCache(const ModelConfig& config, int64_t batch_size, int64_t capacity, torch::Dtype dtype,
          torch::Device device = torch::kCPU);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  // [B, length] bool: which cached positions hold real tokens.
  torch::Tensor key_mask() const { return key_mask_.narrow(1, 0, length_); }
  // Rotary position the next token of each row gets: [B] int64.
  torch::Tensor next_positions() const { return next_position_; }
  // Layer `layer`'s buffers [B, Hkv, capacity, D]: positions [0, length()) hold the cached tokens.
  const torch::Tensor& keys(int64_t layer) const { return keys_.at(static_cast<std::size_t>(layer)); }
  const torch::Tensor& values(int64_t layer) const { return values_.at(static_cast<std::size_t>(layer)); }

  // Stores one layer's new keys and values k, v [B, Hkv, T, D] at positions [length, length + T)
  // and returns the layer's keys and values [B, Hkv, length + T, D] (views of the buffers).
  std::pair<torch::Tensor, torch::Tensor> write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);
  // After every layer has written a pass's T tokens: new_mask [B, T] (true = real token) joins
  // the key mask, the rows' next positions and the length advance.
  void advance(const torch::Tensor& new_mask);

  // Drops everything (reuse the buffers for a new batch of the same size).
  void reset();

 private:
  int64_t batch_size_;
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<torch::Tensor> keys_;    // per layer [B, Hkv, capacity, D]
  std::vector<torch::Tensor> values_;  // per layer [B, Hkv, capacity, D]
  torch::Tensor key_mask_;             // [B, capacity] bool
  torch::Tensor next_position_;        // [B] int64
};

class SlotKVCache;

// One step of slots [first, first + rows) of a SlotKVCache, T new tokens per row (built by
// CausalLMImpl::decode_slots and extend_slots).
struct SlotStep {
  SlotKVCache* cache = nullptr;
  int64_t first = 0;
  int64_t rows = 0;
  torch::Tensor past;  // [rows] int64 on the model's device: each row's cached length
  int64_t keys = 0;    // max(past) + T: keys the step attends over
  torch::Tensor allowed;  // [rows, 1, T, keys] bool: key position <= the query token's position
  torch::Tensor allowed_sliding;  // the same inside the sliding window (models with sliding layers)
};

// Sequences join and leave the decode batch independently; decoding runs on rows [0, rows)
// (CausalLMImpl::decode_slots) and the engine keeps its live sequences at the front with
// move_slot().
class SlotKVCache {
 public:
  SlotKVCache(const ModelConfig& config, int64_t num_slots, int64_t capacity, torch::Dtype dtype,
              torch::Device device = torch::kCPU);

  int64_t num_slots() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const { return capacity_; }
  // Tokens cached in `slot` (= the rotary position its next token gets).
  int64_t length(int64_t slot) const { return lengths_.at(static_cast<std::size_t>(slot)); }
  // Bytes held by the key/value buffers.
  int64_t bytes() const;
  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  // Layer `layer`'s buffers [slots, Hkv, capacity, D] (CUDA graphs address them).
  const torch::Tensor& keys(int64_t layer) const { return keys_.at(static_cast<std::size_t>(layer)); }
  const torch::Tensor& values(int64_t layer) const { return values_.at(static_cast<std::size_t>(layer)); }

  // Copies the first `length` cached tokens of row `src_row` of `src` (a prefill's cache,
  // whose rows hold real tokens from position 0) into `slot`, replacing its contents.
  void load_prefix(int64_t slot, const KVCache& src, int64_t src_row, int64_t length);
  // Copies slot `from` (its `length(from)` tokens) over slot `to`; `from` keeps its data.
  void move_slot(int64_t from, int64_t to);
  void clear(int64_t slot) { lengths_.at(static_cast<std::size_t>(slot)) = 0; }

  // Stores one layer's new keys and values k, v [rows, Hkv, T, D] of `step` at each row's
  // positions [past, past + T) and returns the rows' keys and values [rows, Hkv, step.keys, D].
  std::pair<torch::Tensor, torch::Tensor> write(int64_t layer, const SlotStep& step, const torch::Tensor& k,
                                                const torch::Tensor& v);
  // After every layer has written: slots [first, first + rows) hold `tokens` more.
  void advance(int64_t first, int64_t rows, int64_t tokens);

 private:
  int64_t capacity_;
  std::vector<torch::Tensor> keys_;    // per layer [slots, Hkv, capacity, D]
  std::vector<torch::Tensor> values_;  // per layer [slots, Hkv, capacity, D]
  std::vector<int64_t> lengths_;       // per slot
  // Per slot: positions [0, written) may hold data of earlier sequences. A decode step reads
  // values past a row's length (weighted 0), and 0 * NaN is NaN, so a new sequence zeroes what
  // an earlier one left there: one bad step cannot poison later sequences.
  std::vector<int64_t> written_;

  void zero_tail(int64_t slot, int64_t from);
};

}  // namespace grpo::core
