// Log-probabilities of given target tokens under the LM head, without materializing the
// [tokens, vocab] logits for the whole batch: tokens are processed in chunks, and the
// backward pass recomputes each chunk's logits instead of keeping them. With Qwen's
// 151,936-token vocabulary, 8k tokens of fp32 logits are 5 GB (and log_softmax another 5),
// which is the difference between fitting and OOM; see bench/model/logprob_memory.cpp.
#pragma once

#include <torch/torch.h>

namespace grpo::core {

struct LogProbOptions {
  int64_t chunk_tokens = 1024;  // tokens per chunk: peak extra memory ~ 2-3 x chunk_tokens x vocab x 4 bytes
  double temperature = 1.0;     // logits are divided by it (as the sampler did)
  bool with_entropy = false;    // also return the entropy of each token's distribution
  // Gemma 2's final_logit_softcapping: logits = c * tanh(logits / c) before the temperature;
  // 0 = off. CausalLMImpl::logprob_options() sets it from the model's config.
  double logit_softcap = 0.0;
};

struct TokenLogProbs {
  torch::Tensor logprobs;  // float32, the shape of `targets`
  torch::Tensor entropy;   // float32, the shape of `targets`; undefined unless with_entropy
};

// hidden [..., H] (the final hidden states), lm_head_weight [V, H], targets [...] int64 in
// [0, V) (checked when targets are on the CPU; a device tensor's ids are the caller's to check,
// on the host, since reading them back would stall it). Differentiable w.r.t. hidden and lm_head_weight. Logits are computed in the
// weight's dtype and upcast to float32 (as transformers does), softmax in float32.
TokenLogProbs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                             const torch::Tensor& targets, const LogProbOptions& options = {});

// The textbook version: full logits, log_softmax, gather. The reference the chunked
// function is tested and benchmarked against; do not use it on real vocabularies.
TokenLogProbs token_logprobs_naive(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                   const torch::Tensor& targets, const LogProbOptions& options = {});

}  // namespace grpo::core
