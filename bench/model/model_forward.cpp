// Forward throughput of the transformer on one batch of variable-length sequences, padded
// to the longest ([B, T_max] with an attention mask) versus packed into one row (attention
// confined to each sequence). Real (non-padding) tokens per second, both layouts measured
// alternately in one run, so the ratio is robust to the machine's noise.
//
//   grpo_bench_model_forward [--sequences 16] [--min-len 16] [--max-len 512] [--reps 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>

#include "core/model/transformer.h"

namespace {

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

double seconds_of(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t sequences = arg(argc, argv, "--sequences", 16);
  const int64_t min_len = arg(argc, argv, "--min-len", 16);
  const int64_t max_len = arg(argc, argv, "--max-len", 512);
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 3));

  // A small Qwen3-shaped model (GQA, q/k norm) that runs in seconds on two CPU cores.
  grpo::core::ModelConfig c;
  c.architecture = grpo::core::ModelArchitecture::Qwen3;
  c.vocab_size = 8192;
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 32;
  c.max_position_embeddings = 4096;
  c.rope_theta = 1e6;
  c.qk_norm = grpo::core::QkNorm::kPerHead;
  grpo::core::CausalLM model(c);
  model->init_weights(0.02, 0);
  model->eval();
  torch::NoGradGuard no_grad;

  std::mt19937 rng(0);
  std::uniform_int_distribution<int64_t> len_dist(min_len, max_len);
  std::vector<int64_t> lengths;
  std::vector<torch::Tensor> seqs;
  for (int64_t i = 0; i < sequences; ++i) {
    lengths.push_back(len_dist(rng));
    seqs.push_back(torch::randint(c.vocab_size, {lengths.back()}, torch::kLong));
  }
  const int64_t real_tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int64_t T = *std::max_element(lengths.begin(), lengths.end());
  auto padded = torch::zeros({sequences, T}, torch::kLong);
  auto mask = torch::zeros({sequences, T}, torch::kLong);
  for (int64_t i = 0; i < sequences; ++i) {
    padded[i].narrow(0, 0, lengths[i]).copy_(seqs[i]);
    mask[i].narrow(0, 0, lengths[i]).fill_(1);
  }
  auto padded_layout = grpo::core::AttentionLayout::padded(mask);
  auto packed = torch::cat(seqs).unsqueeze(0);
  auto packed_layout = grpo::core::AttentionLayout::packed(lengths);

  std::printf("%lld sequences, lengths %lld..%lld, %lld real tokens; padded batch [%lld, %lld] = %.0f%% padding\n",
              static_cast<long long>(sequences), static_cast<long long>(min_len), static_cast<long long>(max_len),
              static_cast<long long>(real_tokens), static_cast<long long>(sequences), static_cast<long long>(T),
              100.0 * (1.0 - static_cast<double>(real_tokens) / static_cast<double>(sequences * T)));
  // Warm-up, then alternate.
  model->hidden_states(packed, packed_layout);
  model->hidden_states(padded, padded_layout);
  double padded_s = 1e30, packed_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    padded_s = std::min(padded_s, seconds_of([&] { model->hidden_states(padded, padded_layout); }));
    packed_s = std::min(packed_s, seconds_of([&] { model->hidden_states(packed, packed_layout); }));
  }
  const double padded_tps = real_tokens / padded_s, packed_tps = real_tokens / packed_s;
  std::printf("padded: %.3f s   packed: %.3f s   (best of %d)\n", padded_s, packed_s, reps);
  std::printf("forward_padded_tokens_per_s: %.0f\n", padded_tps);
  std::printf("forward_packed_tokens_per_s: %.0f\n", packed_tps);
  std::printf("forward_packed_over_padded: %.2f\n", packed_tps / padded_tps);
  return 0;
}
