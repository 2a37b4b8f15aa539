// Peak memory of the chunked log-prob function against the naive full-logits version,
// at Qwen's vocabulary (151,936) and 8,192 tokens. Each variant runs in its own forked
// process, so its peak resident set is its own: peak RSS during the call minus the RSS
// before it (inputs already allocated). Also a forward+backward pair at fewer tokens,
// where the naive version keeps the logits for backward and the chunked one recomputes.
//
//   grpo_bench_logprob_memory [--tokens 8192] [--vocab 151936] [--hidden 256]
//                             [--backward-tokens 2048] [--chunk 1024]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "core/model/logprobs.h"

namespace {

// A "Key:   N kB" line of /proc/self/status (VmRSS: now, VmHWM: peak).
long status_kb(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string name;
  long value = 0;
  while (status >> name) {
    if (name == key) {
      status >> value;
      return value;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

struct Measurement {
  double extra_mb = 0;
  double seconds = 0;
};

// Runs `setup` then `run` in a child; reports the child's peak RSS growth during `run`.
Measurement measure(const std::function<void()>& run) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // Reset the high-water mark to the current RSS (Linux >= 4.0), so the peak is this call's.
    std::ofstream("/proc/self/clear_refs") << "5";
    const long before = status_kb("VmRSS:");
    auto t0 = std::chrono::steady_clock::now();
    run();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Measurement m{(status_kb("VmHWM:") - before) / 1024.0, secs};
    if (write(fds[1], &m, sizeof m) != sizeof m) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Measurement m;
  const bool ok = read(fds[0], &m, sizeof m) == sizeof m;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "benchmark child failed (out of memory?)\n");
    std::exit(1);
  }
  return m;
}

int64_t arg(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = arg(argc, argv, "--tokens", 8192);
  const int64_t vocab = arg(argc, argv, "--vocab", 151936);
  const int64_t hidden = arg(argc, argv, "--hidden", 256);
  const int64_t bwd_tokens = arg(argc, argv, "--backward-tokens", 2048);
  const int64_t chunk = arg(argc, argv, "--chunk", 1024);

  torch::manual_seed(0);
  auto h = torch::randn({tokens, hidden}) * 0.5;
  auto w = torch::randn({vocab, hidden}) * 0.05;
  auto t = torch::randint(vocab, {tokens}, torch::kLong);
  grpo::core::LogProbOptions opts;
  opts.chunk_tokens = chunk;
  opts.with_entropy = true;

  std::printf("log-probs of %lld tokens, vocab %lld, hidden %lld, chunk %lld (logits alone: %.0f MB)\n",
              static_cast<long long>(tokens), static_cast<long long>(vocab), static_cast<long long>(hidden),
              static_cast<long long>(chunk), tokens * vocab * 4 / 1e6);
  auto naive = measure([&] {
    torch::NoGradGuard g;
    auto r = grpo::core::token_logprobs_naive(h, w, t, opts);
  });
  auto chunked = measure([&] {
    torch::NoGradGuard g;
    auto r = grpo::core::token_logprobs(h, w, t, opts);
  });
  std::printf("forward  naive:   +%8.0f MB  %6.2f s\n", naive.extra_mb, naive.seconds);
  std::printf("forward  chunked: +%8.0f MB  %6.2f s\n", chunked.extra_mb, chunked.seconds);

  auto hb = h.narrow(0, 0, bwd_tokens).clone();
  auto tb = t.narrow(0, 0, bwd_tokens).clone();
  auto backward = [&](bool use_chunked) {
    auto hh = hb.clone().requires_grad_(true);
    auto ww = w.clone().requires_grad_(true);
    auto r = use_chunked ? grpo::core::token_logprobs(hh, ww, tb, opts) : grpo::core::token_logprobs_naive(hh, ww, tb, opts);
    (r.logprobs.sum() + 0.01 * r.entropy.sum()).backward();
  };
  auto naive_bwd = measure([&] { backward(false); });
  auto chunked_bwd = measure([&] { backward(true); });
  std::printf("fwd+bwd  naive:   +%8.0f MB  %6.2f s  (%lld tokens)\n", naive_bwd.extra_mb, naive_bwd.seconds,
              static_cast<long long>(bwd_tokens));
  std::printf("fwd+bwd  chunked: +%8.0f MB  %6.2f s\n", chunked_bwd.extra_mb, chunked_bwd.seconds);

  std::printf("logprob_forward_naive_peak_mb: %.0f\n", naive.extra_mb);
  std::printf("logprob_forward_chunked_peak_mb: %.0f\n", chunked.extra_mb);
  std::printf("logprob_forward_peak_ratio: %.1f\n", naive.extra_mb / std::max(1.0, chunked.extra_mb));
  std::printf("logprob_backward_peak_ratio: %.1f\n", naive_bwd.extra_mb / std::max(1.0, chunked_bwd.extra_mb));
  std::printf("logprob_forward_time_ratio_chunked_over_naive: %.2f\n", chunked.seconds / naive.seconds);
  return 0;
}
