// The device's attention kernels (core/model/attention/) against eager, the reference, on the
// device under test: a bf16-mixed training pass over a packed row (auto = flash_varlen on CUDA)
// and its gradients, bf16 decoding with the engine's slots (sdpa), and sdpa in float32. The CPU suite
// holds sdpa to eager on every layout in float32; this is where flash_varlen's kernel runs.
// Bounds: the bf16 bounds of the CPU suite (logits relative RMS 0.03, 0.1 for MoE) and the
// gradient cosine of Bf16MixedParity (0.99).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/model/attention/attention.h"
#include "core/model/checkpoint.h"
#include "core/model/precision.h"
#include "core/train/packing.h"
#include "tests/gpu/gpu_test_support.h"

using namespace grpo;
using grpo::testing::cosine;
using grpo::testing::device_under_test;
using grpo::testing::fixture_dir;
using grpo::testing::host_f64;

namespace {

class AttentionOnDevice : public ::testing::TestWithParam<std::string> {};

double relative_rms(const torch::Tensor& got, const torch::Tensor& want) {
  const auto g = host_f64(got), w = host_f64(want);
  return (g - w).pow(2).mean().sqrt().item<double>() / w.pow(2).mean().sqrt().item<double>();
}

}  // namespace

TEST_P(AttentionOnDevice, PackedTrainingPassMatchesEager) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  core::LoadedModel m = core::load_model(fixture_dir(GetParam()), torch::kFloat32, device);
  m.model->train();
  const auto batch = grpo::testing::random_batch(6, m.config.vocab_size, 41);
  const double bound = m.config.num_experts > 0 ? 0.1 : 0.03;
  struct Pass {
    torch::Tensor logprobs, grad;
  };
  auto pass = [&](core::AttentionBackend backend) {
    m.model->set_attention_backend(backend);
    m.model->zero_grad();
    const core::ComputePrecisionScope scope(core::Precision::kBf16Mixed, device);
    const torch::Tensor lp = core::packed_response_logprobs(m.model, batch.sequences(), batch.width, {}).logprobs;
    const torch::Tensor mask = batch.mask().to(device);
    (-(lp * mask).sum() / mask.sum()).backward();
    auto& attn = m.model->model->layers[0]->as<core::DecoderLayer>()->self_attn;
    return Pass{lp.detach(), (attn->qkv_proj ? attn->qkv_proj : attn->q_proj)->weight.grad().clone()};
  };
  const Pass eager = pass(core::AttentionBackend::kEager);
  const Pass tested = pass(core::AttentionBackend::kAuto);
  if (device.is_cuda() && m.config.attn_logit_softcapping == 0) {
    // What auto runs for this pass: the varlen kernel (the test would otherwise hold sdpa).
    core::AttentionContext context;
    context.layout = core::AttentionLayout::packed({3, 4});
    const core::ComputePrecisionScope scope(core::Precision::kBf16Mixed, device);
    const auto q = torch::zeros({1, 7, m.config.num_attention_heads, m.config.head_dim}, torch::TensorOptions().device(device));
    const auto& spec = m.model->model->layers[0]->as<core::DecoderLayer>()->self_attn->spec();
    EXPECT_EQ(core::choose_attention_kernel(spec, context, q).kernel, core::AttentionKernel::kFlashVarlen);
  }
  const auto mask = batch.mask();
  EXPECT_LT(relative_rms(tested.logprobs.cpu() * mask, eager.logprobs.cpu() * mask), bound);
  EXPECT_GE(cosine(tested.grad, eager.grad), 0.99);
}

TEST_P(AttentionOnDevice, Bf16SlotDecodingMatchesEager) {
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  core::LoadedModel m = core::load_model(fixture_dir(GetParam()), torch::kBFloat16, device);
  m.model->eval();
  torch::NoGradGuard no_grad;
  const auto batch = grpo::testing::random_batch(3, m.config.vocab_size, 43);
  auto run = [&](core::AttentionBackend backend) {
    m.model->set_attention_backend(backend);
    core::SlotKVCache slots(m.config, 3, 64, torch::kBFloat16, device);
    for (int64_t r = 0; r < 3; ++r) {
      const auto& prompt = batch.prompts[static_cast<std::size_t>(r)];
      const auto n = static_cast<int64_t>(prompt.size());
      core::KVCache prefill(m.config, 1, n, torch::kBFloat16, device);
      auto ids = torch::tensor(prompt, torch::kLong).to(device).unsqueeze(0);
      m.model->forward(ids, m.model->decode_layout(prefill, n), &prefill);
      slots.load_prefix(r, prefill, 0, n);
    }
    std::vector<torch::Tensor> hidden;
    for (int step = 0; step < 8; ++step) {
      std::vector<int64_t> next;
      for (std::size_t r = 0; r < 3; ++r) next.push_back(batch.responses[r][static_cast<std::size_t>(step) % batch.responses[r].size()]);
      hidden.push_back(m.model->decode_slots(torch::tensor(next, torch::kLong).to(device), slots));
    }
    return m.model->logits(torch::cat(hidden)).to(torch::kFloat32);
  };
  // sdpa by name: auto keeps grouped-query decode steps eager on CUDA (attention.cpp).
  const auto eager = run(core::AttentionBackend::kEager);
  const auto tested = run(core::AttentionBackend::kSdpa);
  EXPECT_LT(relative_rms(tested, eager), m.config.num_experts > 0 ? 0.1 : 0.03);
}

TEST_P(AttentionOnDevice, Float32SdpaEqualsEagerOnEveryLayout) {
  // sdpa in float32 (the memory-efficient kernel on CUDA, the fused CPU kernel on LibTorch 2.x)
  // against eager on the same device: padded rows, a packed row, KV-cache prefill and decoding.
  // 1e-4: the CPU suite's 1e-5 plus room for a GPU kernel's other summation order.
  GRPO_SKIP_WITHOUT_DEVICE();
  const torch::Device device = device_under_test();
  core::LoadedModel m = core::load_model(fixture_dir(GetParam()), torch::kFloat32, device);
  m.model->eval();
  torch::NoGradGuard no_grad;
  const auto batch = grpo::testing::random_batch(4, m.config.vocab_size, 47);
  auto both = [&](const std::function<torch::Tensor()>& f) {
    m.model->set_attention_backend(core::AttentionBackend::kSdpa);
    auto tested = f();
    m.model->set_attention_backend(core::AttentionBackend::kEager);
    return grpo::testing::max_abs_diff(tested, f());
  };
  // Packed: every sequence of the batch in one row.
  std::vector<int64_t> ids, lengths;
  for (std::size_t i = 0; i < batch.prompts.size(); ++i) {
    ids.insert(ids.end(), batch.prompts[i].begin(), batch.prompts[i].end());
    ids.insert(ids.end(), batch.responses[i].begin(), batch.responses[i].end());
    lengths.push_back(static_cast<int64_t>(batch.prompts[i].size() + batch.responses[i].size()));
  }
  const auto row = torch::tensor(ids, torch::kLong).to(device).unsqueeze(0);
  core::AttentionLayout packed = core::AttentionLayout::packed(lengths);
  packed.position_ids = packed.position_ids.to(device);
  EXPECT_LT(both([&] { return m.model->forward(row, packed); }), 1e-4) << "packed";
  // Padded: the first two sequences, left-padded.
  const int64_t T = std::max(lengths[0], lengths[1]);
  auto input = torch::full({2, T}, 3, torch::kLong), mask = torch::zeros({2, T}, torch::kLong);
  for (int64_t r = 0; r < 2; ++r) {
    input[r].narrow(0, T - lengths[r], lengths[r]).copy_(row[0].narrow(0, r == 0 ? 0 : lengths[0], lengths[r]).cpu());
    mask[r].narrow(0, T - lengths[r], lengths[r]).fill_(1);
  }
  auto real = mask.to(torch::kBool).to(device);
  EXPECT_LT(both([&] { return m.model->forward(input.to(device), core::AttentionLayout::padded(mask.to(device))).index({real}); }),
            1e-4)
      << "padded";
  // KV cache: prefill the first sequence's prompt, then its response token by token.
  EXPECT_LT(both([&] {
              const int64_t p = static_cast<int64_t>(batch.prompts[0].size()), L = lengths[0];
              core::KVCache cache(m.config, 1, L, torch::kFloat32, device);
              std::vector<torch::Tensor> outs;
              auto seq = row[0].narrow(0, 0, L);
              outs.push_back(m.model->forward(seq.narrow(0, 0, p).unsqueeze(0), m.model->decode_layout(cache, p), &cache)[0]);
              for (int64_t t = p; t < L; ++t)
                outs.push_back(m.model->forward(seq.narrow(0, t, 1).unsqueeze(0), m.model->decode_layout(cache, 1), &cache)[0]);
              return torch::cat(outs);
            }),
            1e-4)
      << "KV cache";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AttentionOnDevice, ::testing::ValuesIn(grpo::testing::fixture_models()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
