// Sequence packing for the policy update: the sequences (prompt + response) of a mini-batch are
// packed into rows of `pack_length` tokens, and a micro-batch is ONE packed forward of all the
// sequences of its rows (attention stays inside each sequence and positions restart, so the
// log-probs equal those of an unpacked forward; tests/train/test_packing.cpp checks loss and
// gradients to 1e-5).
//
// The plan is torch-free; the log-prob functions return the right-padded [S, width] response
// layout every policy loss, KL estimator and aggregation uses.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace grpo::core {

class CausalLM;
struct LogProbOptions;

// Deterministic packing of sequences into rows of pack_length tokens: first-fit decreasing by
// length (ties by index; a sequence goes to the first row, in creation order, with room for
// it); each row lists its sequences in ascending index order.
struct PackingPlan {
  std::int64_t pack_length = 0;
  std::vector<std::vector<std::size_t>> rows;  // sequence indices per row
  std::int64_t tokens = 0;                     // sum of lengths
  std::size_t sequences() const;  // sum of the rows' sizes
  double packed_ratio() const;    // rows / sequences (open-instruct other/packed_ratio); 0 without sequences
  double utilization() const;     // tokens / (rows * pack_length); 0 without rows
};

// Throws std::invalid_argument naming the sequence index and its length when one is longer
// than pack_length (or negative), or when pack_length < 1. Length-0 sequences are placed too.
PackingPlan plan_packing(const std::vector<std::int64_t>& lengths, std::int64_t pack_length);

// The micro-batches of a plan: consecutive groups of `rows_per_micro_batch` rows (the last may
// be smaller), each given as the SEQUENCE indices of its rows (row after row, each row's in
// ascending order): a micro-batch is one forward of all of them. Throws std::invalid_argument
// when rows_per_micro_batch < 1.
std::vector<std::vector<std::size_t>> micro_batches(const PackingPlan& plan, std::int64_t rows_per_micro_batch);

// A sequence's tokens, not owned: prompt then response.
struct SequenceTokens {
  const std::vector<std::int64_t>* prompt = nullptr;
  const std::vector<std::int64_t>* response = nullptr;
};

// [S, width] float32 on the model's device, row s = sequence s, column j = response token j;
// 0 in the padding. `entropy` is undefined unless LogProbOptions::with_entropy.
struct ResponseLogProbs {
  at::Tensor logprobs;
  at::Tensor entropy;
};

// ONE packed forward (AttentionLayout::packed, B == 1) of all `sequences` back to back; the
// logits are never materialized (hidden states, then token_logprobs on the response targets
// only). The token at position t predicts token t + 1: response token j of a sequence with
// prompt length P is predicted at position P - 1 + j. Sequences without response tokens are
// left out of the forward (their row is all padding). Differentiable w.r.t. the model's
// parameters unless called under torch::NoGradGuard.
// Throws std::invalid_argument when width < a response length, or a sequence has response
// tokens but no prompt token (its first response token has no position that predicts it).
ResponseLogProbs packed_response_logprobs(CausalLM& model, const std::vector<SequenceTokens>& sequences,
                                          std::int64_t width, const LogProbOptions& options);

// The same from one right-padded [S, max_len] forward (AttentionLayout::padded): the
// independent reference the packed path is tested against.
ResponseLogProbs padded_response_logprobs(CausalLM& model, const std::vector<SequenceTokens>& sequences,
                                          std::int64_t width, const LogProbOptions& options);

}  // namespace grpo::core
