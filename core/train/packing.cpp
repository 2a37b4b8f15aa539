#include "core/train/packing.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/model/host_copy.h"
#include "core/model/logprobs.h"
#include "core/model/transformer.h"

namespace grpo::core {

std::size_t PackingPlan::sequences() const {
  std::size_t n = 0;
  for (const auto& row : rows) n += row.size();
  return n;
}

double PackingPlan::packed_ratio() const {
  const std::size_t n = sequences();
  return n == 0 ? 0.0 : static_cast<double>(rows.size()) / static_cast<double>(n);
}

double PackingPlan::utilization() const {
  if (rows.empty() || pack_length <= 0) return 0.0;
  return static_cast<double>(tokens) / (static_cast<double>(rows.size()) * static_cast<double>(pack_length));
}

PackingPlan plan_packing(const std::vector<std::int64_t>& lengths, std::int64_t pack_length) {
  if (pack_length < 1) throw std::invalid_argument("plan_packing: pack_length must be >= 1, got " + std::to_string(pack_length));
  PackingPlan plan;
  plan.pack_length = pack_length;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0)
      throw std::invalid_argument("plan_packing: sequence " + std::to_string(i) + " has a negative length " + std::to_string(lengths[i]));
    if (lengths[i] > pack_length)
      throw std::invalid_argument("plan_packing: sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                                  " tokens, more than pack_length " + std::to_string(pack_length));
    plan.tokens += lengths[i];
  }
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Stable: equal lengths keep ascending index order.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::int64_t> room;  // free tokens per row
  for (std::size_t i : order) {
    std::size_t r = 0;
    while (r < room.size() && room[r] < lengths[i]) ++r;
    if (r == room.size()) {
      plan.rows.emplace_back();
      room.push_back(pack_length);
    }
    plan.rows[r].push_back(i);
    room[r] -= lengths[i];
  }
  for (auto& row : plan.rows) std::sort(row.begin(), row.end());
  return plan;
}

std::vector<std::vector<std::size_t>> micro_batches(const PackingPlan& plan, std::int64_t rows_per_micro_batch) {
  if (rows_per_micro_batch < 1)
    throw std::invalid_argument("micro_batches: rows_per_micro_batch must be >= 1, got " + std::to_string(rows_per_micro_batch));
  std::vector<std::vector<std::size_t>> out;
  const auto per = static_cast<std::size_t>(rows_per_micro_batch);
  for (std::size_t r = 0; r < plan.rows.size(); r += per) {
    out.emplace_back();
    for (std::size_t k = r; k < std::min(plan.rows.size(), r + per); ++k)
      out.back().insert(out.back().end(), plan.rows[k].begin(), plan.rows[k].end());
  }
  return out;
}

namespace {

// Where each response token's log-prob comes from (a position of the forward's token sequence)
// and where it goes (s * width + j of the flattened [S, width] result).
struct TargetIndex {
  std::vector<std::int64_t> source;   // flattened forward position that predicts the token
  std::vector<std::int64_t> dest;     // s * width + j
  std::vector<std::int64_t> targets;  // the token id
};

// Also every id against the vocabulary, here on the host: out of range, the embedding would fail
// on the device (a CUDA assert that names nothing), and token_logprobs leaves device targets to
// its caller.
void check_sequences(const std::vector<SequenceTokens>& sequences, std::int64_t width, std::int64_t vocab, const char* fn) {
  if (width < 0) throw std::invalid_argument(std::string(fn) + ": width must be >= 0, got " + std::to_string(width));
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const SequenceTokens& q = sequences[s];
    if (!q.prompt || !q.response) throw std::invalid_argument(std::string(fn) + ": sequence " + std::to_string(s) + " has a null token list");
    for (const auto* list : {q.prompt, q.response})
      for (std::size_t j = 0; j < list->size(); ++j)
        if ((*list)[j] < 0 || (*list)[j] >= vocab)
          throw std::invalid_argument(std::string(fn) + ": sequence " + std::to_string(s) + ": " +
                                      (list == q.prompt ? "prompt" : "response") + " token " + std::to_string(j) + " is id " +
                                      std::to_string((*list)[j]) + ", outside the model's vocabulary [0, " +
                                      std::to_string(vocab) + ")");
    const auto r = static_cast<std::int64_t>(q.response->size());
    if (r > width)
      throw std::invalid_argument(std::string(fn) + ": sequence " + std::to_string(s) + " has " + std::to_string(r) +
                                  " response tokens, more than width " + std::to_string(width));
    if (r > 0 && q.prompt->empty())
      throw std::invalid_argument(std::string(fn) + ": sequence " + std::to_string(s) +
                                  " has response tokens but an empty prompt (no position predicts its first token)");
  }
}

ResponseLogProbs scatter_response(CausalLM& model, const torch::Tensor& flat_hidden, const TargetIndex& index,
                                  std::int64_t rows, std::int64_t width, const LogProbOptions& options) {
  const torch::Tensor weight = model->lm_head_weight();
  // On the model's device; float32 whatever the model's dtype (token_logprobs computes in float32).
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(weight.device());
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(weight.device());
  ResponseLogProbs out;
  torch::Tensor logprobs = torch::zeros({rows * width}, f32);
  torch::Tensor entropy = options.with_entropy ? torch::zeros({rows * width}, f32) : torch::Tensor();
  if (!index.source.empty()) {
    const torch::Tensor source = to_device(index.source, i64.device());
    const torch::Tensor dest = to_device(index.dest, i64.device());
    const torch::Tensor targets = to_device(index.targets, i64.device());
    const TokenLogProbs t = token_logprobs(flat_hidden.index_select(0, source), weight, targets, model->logprob_options(options));
    // Out-of-place index_copy: differentiable w.r.t. the copied values; padding stays 0.
    logprobs = logprobs.index_copy(0, dest, t.logprobs);
    if (options.with_entropy) entropy = entropy.index_copy(0, dest, t.entropy);
  }
  out.logprobs = logprobs.view({rows, width});
  if (options.with_entropy) out.entropy = entropy.view({rows, width});
  return out;
}

}  // namespace

ResponseLogProbs packed_response_logprobs(CausalLM& model, const std::vector<SequenceTokens>& sequences,
                                          std::int64_t width, const LogProbOptions& options) {
  check_sequences(sequences, width, model->config().vocab_size, "packed_response_logprobs");
  std::vector<std::int64_t> ids, lengths;
  TargetIndex index;
  std::int64_t offset = 0;
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const auto& prompt = *sequences[s].prompt;
    const auto& response = *sequences[s].response;
    if (response.empty()) continue;  // nothing to predict: keep it out of the forward
    const auto p = static_cast<std::int64_t>(prompt.size());
    ids.insert(ids.end(), prompt.begin(), prompt.end());
    ids.insert(ids.end(), response.begin(), response.end());
    lengths.push_back(p + static_cast<std::int64_t>(response.size()));
    for (std::size_t j = 0; j < response.size(); ++j) {
      index.source.push_back(offset + p - 1 + static_cast<std::int64_t>(j));
      index.dest.push_back(static_cast<std::int64_t>(s) * width + static_cast<std::int64_t>(j));
      index.targets.push_back(response[j]);
    }
    offset += lengths.back();
  }
  torch::Tensor flat_hidden;
  if (!lengths.empty()) {
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(model->lm_head_weight().device());
    AttentionLayout layout = AttentionLayout::packed(lengths);  // built on the host by core/model
    layout.position_ids = to_device(layout.position_ids, i64.device());
    const torch::Tensor input = to_device(ids, i64.device()).view({1, offset});
    const torch::Tensor hidden = model->hidden_states(input, layout);  // [1, N, H]
    flat_hidden = hidden.view({offset, hidden.size(-1)});
  }
  return scatter_response(model, flat_hidden, index, static_cast<std::int64_t>(sequences.size()), width, options);
}

ResponseLogProbs padded_response_logprobs(CausalLM& model, const std::vector<SequenceTokens>& sequences,
                                          std::int64_t width, const LogProbOptions& options) {
  check_sequences(sequences, width, model->config().vocab_size, "padded_response_logprobs");
  // Rows: the sequences with response tokens, right-padded to the longest.
  std::vector<std::size_t> kept;
  std::int64_t max_len = 0;
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    if (sequences[s].response->empty()) continue;
    kept.push_back(s);
    max_len = std::max<std::int64_t>(max_len, static_cast<std::int64_t>(sequences[s].prompt->size() + sequences[s].response->size()));
  }
  const auto rows = static_cast<std::int64_t>(kept.size());
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * max_len), 0), mask(ids.size(), 0);
  TargetIndex index;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t s = kept[static_cast<std::size_t>(r)];
    const auto& prompt = *sequences[s].prompt;
    const auto& response = *sequences[s].response;
    const auto p = static_cast<std::int64_t>(prompt.size());
    std::int64_t t = r * max_len;
    for (std::int64_t id : prompt) { ids[static_cast<std::size_t>(t)] = id; mask[static_cast<std::size_t>(t++)] = 1; }
    for (std::int64_t id : response) { ids[static_cast<std::size_t>(t)] = id; mask[static_cast<std::size_t>(t++)] = 1; }
    for (std::size_t j = 0; j < response.size(); ++j) {
      index.source.push_back(r * max_len + p - 1 + static_cast<std::int64_t>(j));
      index.dest.push_back(static_cast<std::int64_t>(s) * width + static_cast<std::int64_t>(j));
      index.targets.push_back(response[j]);
    }
  }
  torch::Tensor flat_hidden;
  if (rows > 0) {
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(model->lm_head_weight().device());
    const torch::Tensor attention_mask = to_device(mask, i64.device()).view({rows, max_len});
    const torch::Tensor input = to_device(ids, i64.device()).view({rows, max_len});
    const torch::Tensor hidden = model->hidden_states(input, AttentionLayout::padded(attention_mask));  // [rows, T, H]
    flat_hidden = hidden.reshape({rows * max_len, hidden.size(-1)});
  }
  return scatter_response(model, flat_hidden, index, static_cast<std::int64_t>(sequences.size()), width, options);
}

}  // namespace grpo::core
