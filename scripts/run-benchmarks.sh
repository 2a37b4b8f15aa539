#!/usr/bin/env bash
# Runs every benchmark of BUILD_DIR (default build) and prints their `name: value` lines.
# Not part of `make test`: benchmarks take minutes and report figures, they assert nothing.
#
# OpenBLAS on VMs whose CPU model is masked picks its slowest (pre-AVX) kernels; when the
# CPU has AVX-512 and the user set nothing, the benchmarks run with the SkylakeX kernels
# (docs/architecture.md, "BLAS"). Set OPENBLAS_CORETYPE yourself to override.
set -euo pipefail
BUILD_DIR=${1:-build}
BIN="$BUILD_DIR/bin"
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -q avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}"
for bench in grpo_bench_gemm grpo_bench_tokenizer grpo_bench_model_forward grpo_bench_logprob_memory grpo_bench_rollout grpo_bench_train_async grpo_bench_train_precision grpo_bench_train_lora grpo_bench_rollout_lora grpo_bench_tool_rollout grpo_bench_verifiers grpo_bench_python_reward grpo_bench_serve grpo_bench_memory; do
  if [ ! -x "$BIN/$bench" ]; then
    echo "== $bench: not built (configure with -DGRPO_BUILD_BENCH=ON)" >&2
    exit 1
  fi
  echo "== $bench"
  "$BIN/$bench"
done
