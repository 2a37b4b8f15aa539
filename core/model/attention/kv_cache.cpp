#include "core/model/attention/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace grpo::core {

// ---- KVCache ------------------------------------------------------------------------------

KVCache::KVCache(const ModelConfig& config, int64_t batch_size, int64_t capacity, torch::Dtype dtype,
                 torch::Device device)
    : batch_size_(batch_size), capacity_(capacity) {
  if (batch_size <= 0 || capacity <= 0) throw std::invalid_argument("KVCache: batch size and capacity must be > 0");
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(torch::zeros({batch_size, config.num_key_value_heads, capacity, config.head_dim}, opts));
    values_.push_back(torch::zeros({batch_size, config.num_key_value_heads, capacity, config.head_dim}, opts));
  }
  key_mask_ = torch::zeros({batch_size, capacity}, torch::TensorOptions().dtype(torch::kBool).device(device));
  next_position_ = torch::zeros({batch_size}, torch::TensorOptions().dtype(torch::kLong).device(device));
}

std::pair<torch::Tensor, torch::Tensor> KVCache::write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t T = k.size(2);
  auto& keys = keys_.at(static_cast<std::size_t>(layer));
  auto& values = values_.at(static_cast<std::size_t>(layer));
  keys.narrow(2, length_, T).copy_(k);
  values.narrow(2, length_, T).copy_(v);
  return {keys.narrow(2, 0, length_ + T), values.narrow(2, 0, length_ + T)};
}

void KVCache::advance(const torch::Tensor& new_mask) {
  const int64_t T = new_mask.size(1);
  key_mask_.narrow(1, length_, T).copy_(new_mask);
  next_position_ += new_mask.sum(1);
  length_ += T;
}

void KVCache::reset() {
  length_ = 0;
  key_mask_.zero_();
  next_position_.zero_();
}

// ---- SlotKVCache --------------------------------------------------------------------------

SlotKVCache::SlotKVCache(const ModelConfig& config, int64_t num_slots, int64_t capacity, torch::Dtype dtype,
                         torch::Device device)
    : capacity_(capacity),
      lengths_(static_cast<std::size_t>(std::max<int64_t>(num_slots, 0)), 0),
      written_(lengths_.size(), 0) {
  if (num_slots <= 0 || capacity <= 0) throw std::invalid_argument("SlotKVCache: slots and capacity must be > 0");
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(torch::zeros({num_slots, config.num_key_value_heads, capacity, config.head_dim}, opts));
    values_.push_back(torch::zeros({num_slots, config.num_key_value_heads, capacity, config.head_dim}, opts));
  }
}

int64_t SlotKVCache::bytes() const {
  int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l) total += keys_[l].nbytes() + values_[l].nbytes();
  return total;
}

void SlotKVCache::load_prefix(int64_t slot, const KVCache& src, int64_t src_row, int64_t length) {
  if (slot < 0 || slot >= num_slots()) throw std::out_of_range("SlotKVCache::load_prefix: no slot " + std::to_string(slot));
  if (src_row < 0 || src_row >= src.batch_size() || length < 0 || length > src.length() || length > capacity_)
    throw std::out_of_range("SlotKVCache::load_prefix: row " + std::to_string(src_row) + ", " + std::to_string(length) +
                            " tokens do not fit the source or this cache");
  if (static_cast<int64_t>(keys_.size()) != src.num_layers())
    throw std::invalid_argument("SlotKVCache::load_prefix: layer counts differ");
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    keys_[l][slot].narrow(1, 0, length).copy_(src.keys(layer)[src_row].narrow(1, 0, length));
    values_[l][slot].narrow(1, 0, length).copy_(src.values(layer)[src_row].narrow(1, 0, length));
  }
  zero_tail(slot, length);
  lengths_[static_cast<std::size_t>(slot)] = length;
}

void SlotKVCache::zero_tail(int64_t slot, int64_t from) {
  int64_t& written = written_[static_cast<std::size_t>(slot)];
  if (written > from)
    for (std::size_t l = 0; l < keys_.size(); ++l) {
      keys_[l][slot].narrow(1, from, written - from).zero_();
      values_[l][slot].narrow(1, from, written - from).zero_();
    }
  written = from;
}

void SlotKVCache::move_slot(int64_t from, int64_t to) {
  if (from < 0 || from >= num_slots() || to < 0 || to >= num_slots())
    throw std::out_of_range("SlotKVCache::move_slot: slot out of range");
  if (from == to) return;
  const int64_t length = lengths_[static_cast<std::size_t>(from)];
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    keys_[l][to].narrow(1, 0, length).copy_(keys_[l][from].narrow(1, 0, length));
    values_[l][to].narrow(1, 0, length).copy_(values_[l][from].narrow(1, 0, length));
  }
  zero_tail(to, length);
  lengths_[static_cast<std::size_t>(to)] = length;
}

std::pair<torch::Tensor, torch::Tensor> SlotKVCache::write(int64_t layer, const SlotStep& step, const torch::Tensor& k,
                                                           const torch::Tensor& v) {
  // T new tokens per row, written from the row's own length on.
  const int64_t R = step.rows, T = k.size(2);
  auto steps = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(k.device()));
  auto index = (step.past.view({R, 1}) + steps.view({1, T})).view({R, 1, T, 1}).expand({R, k.size(1), T, k.size(3)});
  auto keys = keys_.at(static_cast<std::size_t>(layer)).narrow(0, step.first, R);
  auto values = values_.at(static_cast<std::size_t>(layer)).narrow(0, step.first, R);
  keys.scatter_(2, index, k);
  values.scatter_(2, index, v);
  return {keys.narrow(2, 0, step.keys), values.narrow(2, 0, step.keys)};
}

void SlotKVCache::advance(int64_t first, int64_t rows, int64_t tokens) {
  for (int64_t r = first; r < first + rows; ++r) {
    const int64_t length = lengths_.at(static_cast<std::size_t>(r)) += tokens;
    int64_t& written = written_[static_cast<std::size_t>(r)];
    written = std::max(written, length);
  }
}

}  // namespace grpo::core
