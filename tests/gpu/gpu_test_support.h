// What the GPU tests (tests/gpu, ctest label `gpu`) share: the device under test, the skip
// when it is missing, the fixture models' sequences, and tensor comparisons.
//
// The device under test is cuda:0. GRPO_GPU_TESTS_DEVICE=cpu runs the same comparisons with
// the CPU's bfloat16 (autocast, bf16 weights) instead: a check of the tests themselves on a
// machine without a GPU. The bounds are chosen for the GPU; the CPU's bf16 rounds the same
// way (bf16 operands, float32 accumulation), so they hold there too.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/train/packing.h"
#include "tests/support/fixture_models.h"

namespace grpo::testing {

inline torch::Device device_under_test() {
  const char* env = std::getenv("GRPO_GPU_TESTS_DEVICE");
  return torch::Device(env && *env ? std::string(env) : std::string("cuda:0"));
}

// A CUDA device under test without CUDA (a CPU build, or no GPU): the test reports SKIPPED,
// which ctest shows as "Skipped" (SKIP_REGULAR_EXPRESSION in tests/gpu/CMakeLists.txt).
#define GRPO_SKIP_WITHOUT_DEVICE()                                                                   \
  do {                                                                                               \
    if (::grpo::testing::device_under_test().is_cuda() && !torch::cuda::is_available()) GTEST_SKIP() \
        << "no CUDA device";                                                                         \
  } while (0)

// Prompt + response token ids of a mini-batch, owned (SequenceTokens only points at them).
struct TokenBatch {
  std::vector<std::vector<std::int64_t>> prompts, responses;
  std::int64_t width = 1;  // the longest response

  std::vector<core::SequenceTokens> sequences() const {
    std::vector<core::SequenceTokens> out;
    for (std::size_t i = 0; i < prompts.size(); ++i) out.push_back({&prompts[i], &responses[i]});
    return out;
  }
  // [S, width] float32: 1 on response tokens, 0 in the padding.
  torch::Tensor mask() const {
    torch::Tensor m = torch::zeros({static_cast<std::int64_t>(responses.size()), width});
    for (std::size_t i = 0; i < responses.size(); ++i)
      m[static_cast<std::int64_t>(i)].narrow(0, 0, static_cast<std::int64_t>(responses[i].size())).fill_(1.0);
    return m;
  }
};

// `count` sequences with prompts of 2..17 and responses of 1..24 tokens, ids in [3, vocab),
// the same for every call with the same arguments.
inline TokenBatch random_batch(int count, std::int64_t vocab, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  TokenBatch b;
  for (int i = 0; i < count; ++i) {
    const std::int64_t p = 2 + (i * 5) % 16, r = 1 + (i * 7 + 3) % 24;
    const auto pt = at::randint(3, vocab, {p}, gen, torch::kLong);
    const auto rt = at::randint(3, vocab, {r}, gen, torch::kLong);
    b.prompts.emplace_back(pt.data_ptr<std::int64_t>(), pt.data_ptr<std::int64_t>() + p);
    b.responses.emplace_back(rt.data_ptr<std::int64_t>(), rt.data_ptr<std::int64_t>() + r);
    b.width = std::max(b.width, r);
  }
  return b;
}

inline torch::Tensor host_f64(const torch::Tensor& t) { return t.detach().to(torch::kCPU).to(torch::kFloat64); }

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (host_f64(a) - host_f64(b)).abs().max().item<double>();
}

inline double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = host_f64(a).flatten(), y = host_f64(b).flatten();
  const double denom = x.norm().item<double>() * y.norm().item<double>();
  return denom == 0.0 ? (x.norm().item<double>() == y.norm().item<double>() ? 1.0 : 0.0) : x.dot(y).item<double>() / denom;
}

// Mixtures of experts: a token whose float32 router scores are within bf16's error of a tie goes
// to another expert in bf16, and from there on its row differs by a whole expert's output
// (attention carries the difference to the later tokens). transformers' own Qwen2-MoE/Qwen3-MoE
// do the same on these fixtures: bf16 vs float32 logits differ by up to 1.3-1.6 on the tokens at
// or after such a flip and by at most 0.26 before any (docs/precision.md). So the MoE cases are
// compared up to each row's first token routed differently, as the greedy test compares up to
// the first near-tie of the sampled tokens. Per token of two runs' router logits (one
// [tokens, num_experts] per MoE layer, the same token order): routed to another set of experts
// in some layer.
inline std::vector<bool> routed_differently(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                                            std::int64_t top_k) {
  EXPECT_EQ(a.size(), b.size()) << "router logits of a different number of MoE layers";
  std::vector<bool> out;
  for (std::size_t l = 0; l < std::min(a.size(), b.size()); ++l) {
    auto choice = [&](const torch::Tensor& logits) {
      return std::get<0>(std::get<1>(logits.detach().to(torch::kCPU).to(torch::kFloat32).topk(top_k, -1)).sort(-1));
    };
    const torch::Tensor differs = (choice(a[l]) != choice(b[l])).any(-1).contiguous();
    if (out.empty()) out.assign(static_cast<std::size_t>(differs.size(0)), false);
    for (std::int64_t t = 0; t < differs.size(0); ++t)
      if (differs[t].item<bool>()) out[static_cast<std::size_t>(t)] = true;
  }
  return out;
}

}  // namespace grpo::testing
