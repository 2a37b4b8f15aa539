// Which BLAS does LibTorch use here, and what does it deliver? Times a square fp32 matmul
// through LibTorch against a cache-blocked single-threaded C++ loop in the same run, and
// prints the ratio. With the reference BLAS (no OpenBLAS installed) the ratio collapses.
//
//   build/bin/grpo_bench_gemm [N=1024] [repeats=10]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/runtime/blas_check.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// C = A * B, row-major, blocked for cache; the independent baseline.
void blocked_matmul(const float* a, const float* b, float* c, int n) {
  constexpr int kBlock = 64;
  std::fill(c, c + static_cast<size_t>(n) * n, 0.0f);
  for (int ii = 0; ii < n; ii += kBlock)
    for (int kk = 0; kk < n; kk += kBlock)
      for (int i = ii; i < std::min(ii + kBlock, n); ++i)
        for (int k = kk; k < std::min(kk + kBlock, n); ++k) {
          const float aik = a[static_cast<size_t>(i) * n + k];
          const float* brow = b + static_cast<size_t>(k) * n;
          float* crow = c + static_cast<size_t>(i) * n;
          for (int j = 0; j < n; ++j) crow[j] += aik * brow[j];
        }
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 10;
  const double flop = 2.0 * n * n * static_cast<double>(n);
  const grpo::core::BlasInfo blas = grpo::core::detect_blas();

  at::manual_seed(0);
  at::Tensor a = at::randn({n, n});
  at::Tensor b = at::randn({n, n});
  at::Tensor c = at::mm(a, b);  // warm-up: thread pool, BLAS init

  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) c = at::mm(a, b);
  const double torch_s = seconds_since(t0) / repeats;

  std::vector<float> out(static_cast<size_t>(n) * n);
  t0 = std::chrono::steady_clock::now();
  blocked_matmul(a.data_ptr<float>(), b.data_ptr<float>(), out.data(), n);
  const double loop_s = seconds_since(t0);

  // Same product, so the comparison is between equal work.
  const float max_diff =
      (c - at::from_blob(out.data(), {n, n}, at::kFloat)).abs().max().item<float>();

  std::printf("matrix: %dx%d fp32, %d repeats, LibTorch threads: %d\n", n, n, repeats, at::get_num_threads());
  std::printf("blas: %s (%s), core: %s%s%s\n", blas.implementation.c_str(), blas.library_path.c_str(),
              blas.openblas_core.empty() ? "-" : blas.openblas_core.c_str(),
              blas.suggested_coretype.empty() ? "" : ", suggested OPENBLAS_CORETYPE=",
              blas.suggested_coretype.c_str());
  std::printf("max_abs_diff_vs_loop: %.3g\n", max_diff);
  std::printf("torch_matmul_gflops: %.1f\n", flop / torch_s / 1e9);
  std::printf("blocked_loop_gflops: %.1f\n", flop / loop_s / 1e9);
  std::printf("speedup_vs_blocked_loop: %.1f\n", loop_s / torch_s);
  return 0;
}
