// A mixture-of-experts layer's experts run both ways side by side on one device (core/model/moe.h):
// grouped matrix products (one _grouped_mm per projection, slices cut on the device) against one
// matmul chain per expert with the slices cut on the host, on the same routed rows.
//
// Why it is built this way:
//   - The shape is Qwen3-30B-A3B's MoE layer (hidden 2048, 128 experts, 8 per token, expert MLP
//     768), the layer of the MoE models GRPO users post-train; the router's choices are random
//     (a softmax's top 8 of normal logits, fixed seed), about uniform over the experts as a
//     load-balanced router makes them.
//   - Two cases, each the way the runtime runs it: training = forward + backward of --tokens
//     tokens under bf16-mixed (float32 master weights, autocast to bf16), as the policy update
//     runs; decoding = a no-grad forward of --decode-rows tokens with bf16 weights, as the native
//     engine's decode step runs at batch 32.
//   - Only the experts are timed: routing, the gather before and the scatter-add after are the
//     same for both ways (SparseMoeBlock::forward).
//   - Timing: the device is synchronized before every clock read; a warm-up call of each way,
//     then --repeats timed calls, medians reported.
//
// Output ends with `name: value` lines: moe_train_ms_grouped, moe_train_ms_looped,
// moe_train_grouped_speedup, moe_decode_ms_grouped, moe_decode_ms_looped,
// moe_decode_grouped_speedup, moe_grouped_rel_diff (the two ways' outputs, relative RMS, the
// training case). Where the grouped way does not apply (a LibTorch before 2.9, a GPU other than
// sm90) a line says why and only the looped figures are printed.
//
//   grpo_bench_moe_experts [--device cuda|cuda:N|cpu] [--tokens 4096] [--decode-rows 32]
//                          [--repeats 5] [--dry-run]    (--dry-run: a tiny shape, any device)
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/model/model_config.h"
#include "core/model/moe.h"
#include "core/model/precision.h"
#include "core/model/transformer.h"

namespace {

using grpo::bench::Clock;
using grpo::bench::median;
using grpo::bench::seconds_since;
namespace core = grpo::core;

struct Shape {
  std::int64_t hidden = 2048, experts = 128, top_k = 8, inner = 768;
};

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

// Rows routed to experts as a block routes them: each token's top-k of a random softmax, the
// (token, choice) pairs sorted by expert; `ends` [E] int32 the cumulative ends of the slices.
struct Routed {
  torch::Tensor rows, ends;
};

Routed route(std::int64_t tokens, const Shape& s, const torch::Device& device, torch::Dtype dtype) {
  auto gen = at::detail::createCPUGenerator(1234);
  const torch::Tensor logits = at::randn({tokens, s.experts}, gen, torch::kFloat32);
  const torch::Tensor chosen = std::get<1>(torch::softmax(logits, -1).topk(s.top_k, -1)).flatten();
  auto [sorted, order] = torch::sort(chosen, c10::optional<bool>(true), 0);
  const torch::Tensor hidden = at::randn({tokens, s.hidden}, gen, torch::kFloat32);
  Routed r;
  r.rows = hidden.index_select(0, order.div(s.top_k, "floor")).to(device, dtype);
  r.ends = torch::searchsorted(sorted, torch::arange(s.experts, sorted.options()), /*out_int32=*/true, /*right=*/true)
               .to(device);
  return r;
}

torch::nn::ModuleList make_experts(const Shape& s, const torch::Device& device, torch::Dtype dtype) {
  core::ModelConfig c;
  c.hidden_size = s.hidden;
  c.hidden_act = core::Activation::kSilu;
  torch::manual_seed(7);
  torch::nn::ModuleList experts;
  for (std::int64_t e = 0; e < s.experts; ++e) experts->push_back(core::MLP(c, 0, s.inner));
  experts->to(device, dtype);
  return experts;
}

double time_ms(int repeats, const torch::Device& device, const std::function<void()>& call) {
  call();  // warm-up: allocator, cuBLAS handles, kernel loads
  synchronize(device);
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    call();
    synchronize(device);
    times.push_back(seconds_since(t0) * 1e3);
  }
  return median(times);
}

double relative_rms(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.detach().to(torch::kCPU, torch::kFloat64), y = b.detach().to(torch::kCPU, torch::kFloat64);
  return ((x - y).pow(2).mean().sqrt() / y.pow(2).mean().sqrt()).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const bool dry_run = grpo::bench::has_flag(argc, argv, "--dry-run");
  const char* device_flag = grpo::bench::flag(argc, argv, "--device");
  const torch::Device device(device_flag ? std::string(device_flag) : std::string("cuda"));
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "grpo_bench_moe_experts: --device %s but no CUDA device is visible\n", device.str().c_str());
    return 2;
  }
  Shape shape;
  if (dry_run) shape = Shape{64, 8, 2, 32};
  const std::int64_t tokens = grpo::bench::arg(argc, argv, "--tokens", dry_run ? 64 : 4096);
  const std::int64_t decode_rows = grpo::bench::arg(argc, argv, "--decode-rows", 32);
  const int repeats = static_cast<int>(grpo::bench::arg(argc, argv, "--repeats", 5));
  std::printf("MoE experts on %s: hidden %lld, %lld experts, %lld per token, expert MLP %lld; %lld training tokens, "
              "%lld decode rows\n",
              device.str().c_str(), static_cast<long long>(shape.hidden), static_cast<long long>(shape.experts),
              static_cast<long long>(shape.top_k), static_cast<long long>(shape.inner), static_cast<long long>(tokens),
              static_cast<long long>(decode_rows));

  // Training: float32 masters under bf16-mixed, forward + backward.
  torch::nn::ModuleList masters = make_experts(shape, device, torch::kFloat32);
  const Routed train = route(tokens, shape, device, torch::kFloat32);
  const torch::Tensor upstream = torch::randn({train.rows.size(0), shape.hidden}).to(device);
  std::string why_train;
  {
    const core::ComputePrecisionScope bf16_mixed(core::Precision::kBf16Mixed, device);
    why_train = core::grouped_experts_unsupported(masters, train.rows);
  }
  auto train_call = [&](bool grouped) {
    return [&, grouped] {
      const core::ComputePrecisionScope bf16_mixed(core::Precision::kBf16Mixed, device);
      for (auto& p : masters->parameters()) p.mutable_grad() = torch::Tensor();
      const torch::Tensor rows = train.rows.detach().requires_grad_(true);
      const torch::Tensor out = grouped ? core::run_experts_grouped(masters, rows, train.ends)
                                        : core::run_experts_looped(masters, rows, train.ends);
      (out.to(torch::kFloat32) * upstream).sum().backward();
    };
  };
  const double train_looped = time_ms(repeats, device, train_call(false));
  std::printf("moe_train_ms_looped: %.3f\n", train_looped);

  // Decoding: bf16 weights, no grad.
  torch::nn::ModuleList weights = make_experts(shape, device, torch::kBFloat16);
  const Routed decode = route(decode_rows, shape, device, torch::kBFloat16);
  const std::string why_decode = core::grouped_experts_unsupported(weights, decode.rows);
  auto decode_call = [&](bool grouped) {
    return [&, grouped] {
      torch::NoGradGuard no_grad;
      const torch::Tensor out = grouped ? core::run_experts_grouped(weights, decode.rows, decode.ends)
                                        : core::run_experts_looped(weights, decode.rows, decode.ends);
      (void)out;
    };
  };
  const double decode_looped = time_ms(repeats, device, decode_call(false));
  std::printf("moe_decode_ms_looped: %.3f\n", decode_looped);

  if (!why_train.empty()) std::printf("grouped experts do not apply to training here: %s\n", why_train.c_str());
  else {
    const double train_grouped = time_ms(repeats, device, train_call(true));
    torch::Tensor grouped_out, looped_out;
    {
      const core::ComputePrecisionScope bf16_mixed(core::Precision::kBf16Mixed, device);
      torch::NoGradGuard no_grad;
      grouped_out = core::run_experts_grouped(masters, train.rows, train.ends);
      looped_out = core::run_experts_looped(masters, train.rows, train.ends);
    }
    std::printf("moe_train_ms_grouped: %.3f\n", train_grouped);
    std::printf("moe_train_grouped_speedup: %.2f\n", train_looped / train_grouped);
    std::printf("moe_grouped_rel_diff: %.2e\n", relative_rms(grouped_out, looped_out));
  }
  if (!why_decode.empty()) std::printf("grouped experts do not apply to decoding here: %s\n", why_decode.c_str());
  else {
    const double decode_grouped = time_ms(repeats, device, decode_call(true));
    std::printf("moe_decode_ms_grouped: %.3f\n", decode_grouped);
    std::printf("moe_decode_grouped_speedup: %.2f\n", decode_looped / decode_grouped);
  }
  return 0;
}
