// Who attends to whom, and at which rotary positions: the three batch layouts one forward serves.
//   padded   [B, T] with an attention mask (left or right padding; positions count only
//            real tokens, as transformers' generate does),
//   packed   one row holding several sequences back to back: positions restart and
//            attention stays inside each sequence (cost sum(L_i^2), not N^2),
//   decoding incremental steps against a KVCache or a SlotKVCache (core/model/attention/kv_cache.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace grpo::core {

struct AttentionLayout {
  torch::Tensor position_ids;      // [B, T] int64: rotary positions of the input tokens
  torch::Tensor key_padding_mask;  // padded/decoding: [B, S] bool, S = cached + T keys; true = real token
  std::vector<int64_t> cu_seqlens;  // packed: B == 1 and sequence i is tokens [cu[i], cu[i+1])

  bool is_packed() const { return !cu_seqlens.empty(); }

  // A padded batch: attention_mask [B, T] (1 = token, 0 = padding, any side).
  static AttentionLayout padded(const torch::Tensor& attention_mask);
  // A packed row of sequences with these lengths (sum = the row's length).
  static AttentionLayout packed(const std::vector<int64_t>& lengths);
};

}  // namespace grpo::core
