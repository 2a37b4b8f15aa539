// Forward throughput of three families of the same active size, measured alternately in one run:
// Qwen2 (the dense baseline), Gemma 2 (dense: sandwich norms, GeGLU, soft-capping, sliding
// windows on every other layer) and Qwen3-MoE (8 experts, 2 active, each expert half the dense
// MLP's width, so the active parameters per token equal the dense models'). Packed rows of
// real tokens, no padding; tokens per second of the decoder's hidden states (the LM head, the
// same matmul for all three, is left out).
//
//   grpo_bench_model_families [--sequences 8] [--length 256] [--reps 3] [--hidden 256] [--layers 4]
//                             [--threads N (default: the runtime's choice, logged)]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/transformer.h"

namespace {

using grpo::bench::arg;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = grpo::bench::Clock::now();
  fn();
  return grpo::bench::seconds_since(t0);
}

// config.json text of a family, its shared sizes filled in.
std::string config_json(const std::string& family_keys, int64_t hidden, int64_t layers, int64_t intermediate) {
  return "{" + family_keys + ", \"vocab_size\": 8192, \"hidden_size\": " + std::to_string(hidden) +
         ", \"intermediate_size\": " + std::to_string(intermediate) + ", \"num_hidden_layers\": " + std::to_string(layers) +
         ", \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": " + std::to_string(hidden / 8) +
         ", \"max_position_embeddings\": 4096, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-6}";
}

int64_t active_parameters(grpo::core::CausalLM& model) {
  // The decoder's parameters (no embeddings, no LM head: hidden_states() is what is timed), counting
  // only num_experts_per_tok experts of a MoE layer.
  const auto& c = model->config();
  int64_t total = 0;
  for (const auto& p : model->named_parameters()) {
    if (p.key().find("embed_tokens") != std::string::npos || p.key().rfind("lm_head", 0) == 0) continue;
    const bool expert = p.key().find(".experts.") != std::string::npos;
    total += expert ? p.value().numel() * c.num_experts_per_tok / c.num_experts : p.value().numel();
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t sequences = arg(argc, argv, "--sequences", 8);
  const int64_t length = arg(argc, argv, "--length", 256);
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 3));
  const int64_t hidden = arg(argc, argv, "--hidden", 256);
  const int64_t layers = arg(argc, argv, "--layers", 4);
  const int64_t intermediate = 3 * hidden;
  const int threads = grpo::bench::choose_threads(arg(argc, argv, "--threads", 0), "grpo_bench_model_families");

  struct Entry {
    std::string name;
    grpo::core::CausalLM model{nullptr};
    double best_s = 1e30;
  };
  std::vector<Entry> entries;
  auto add = [&](const std::string& name, const std::string& family_keys) {
    const auto config = grpo::core::parse_model_config(config_json(family_keys, hidden, layers, intermediate), name);
    Entry e{name, grpo::core::CausalLM(config)};
    e.model->init_weights(0.02, 0);
    e.model->eval();
    entries.push_back(std::move(e));
  };
  add("qwen2", "\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\"");
  add("gemma2", "\"architectures\": [\"Gemma2ForCausalLM\"], \"model_type\": \"gemma2\", \"sliding_window\": 128, "
                "\"query_pre_attn_scalar\": " + std::to_string(hidden / 8));
  add("qwen3_moe", "\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\", \"num_experts\": 8, "
                   "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": " + std::to_string(intermediate / 2) +
                   ", \"norm_topk_prob\": true");
  torch::NoGradGuard no_grad;

  const std::vector<int64_t> lengths(static_cast<std::size_t>(sequences), length);
  const auto ids = torch::randint(8192, {1, sequences * length}, torch::kLong);
  const auto layout = grpo::core::AttentionLayout::packed(lengths);
  const double tokens = static_cast<double>(sequences * length);
  std::printf("%s; %lld sequences of %lld tokens packed; hidden %lld, %lld layers, 8 heads / 4 KV heads, dense MLP %lld, "
              "MoE: 8 experts of %lld, 2 active; %d intra-op threads\n",
              grpo::bench::cpu_model_name().c_str(),
              static_cast<long long>(sequences), static_cast<long long>(length), static_cast<long long>(hidden),
              static_cast<long long>(layers), static_cast<long long>(intermediate), static_cast<long long>(intermediate / 2),
              threads);
  for (auto& e : entries) e.model->hidden_states(ids, layout);  // warm-up
  for (int r = 0; r < reps; ++r)
    for (auto& e : entries) e.best_s = std::min(e.best_s, seconds_of([&] { e.model->hidden_states(ids, layout); }));
  for (auto& e : entries)
    std::printf("%-10s active decoder parameters %.2fM, %.3f s (best of %d)\n", e.name.c_str(),
                static_cast<double>(active_parameters(e.model)) / 1e6, e.best_s, reps);
  for (auto& e : entries) std::printf("forward_tokens_per_s_%s: %.0f\n", e.name.c_str(), tokens / e.best_s);
  std::printf("dense_family_over_qwen2: %.3f\n", entries[0].best_s / entries[1].best_s);
  std::printf("moe_over_qwen2: %.3f\n", entries[0].best_s / entries[2].best_s);
  return 0;
}
