#include "core/model/attention/layout.h"

#include <stdexcept>

namespace grpo::core {

AttentionLayout AttentionLayout::padded(const torch::Tensor& attention_mask) {
  if (attention_mask.dim() != 2) throw std::invalid_argument("attention_mask must be [batch, tokens]");
  AttentionLayout layout;
  auto mask = attention_mask.to(torch::kLong);
  // Positions count real tokens only (left padding gets the same positions as no padding).
  layout.position_ids = (mask.cumsum(1) - 1).clamp_min(0);
  layout.key_padding_mask = mask.to(torch::kBool);
  return layout;
}

AttentionLayout AttentionLayout::packed(const std::vector<int64_t>& lengths) {
  if (lengths.empty()) throw std::invalid_argument("a packed batch needs at least one sequence");
  AttentionLayout layout;
  layout.cu_seqlens.push_back(0);
  std::vector<int64_t> positions;
  for (int64_t len : lengths) {
    if (len <= 0) throw std::invalid_argument("packed sequence lengths must be positive");
    for (int64_t p = 0; p < len; ++p) positions.push_back(p);
    layout.cu_seqlens.push_back(layout.cu_seqlens.back() + len);
  }
  layout.position_ids = torch::tensor(positions, torch::kLong).unsqueeze(0);
  return layout;
}

}  // namespace grpo::core
