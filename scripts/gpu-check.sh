#!/usr/bin/env bash
# GPU check: what a machine without a GPU cannot test. Needs an NVIDIA GPU and driver, the CUDA
# toolkit (nvcc), and a PyTorch with CUDA whose LibTorch uses the C++11 ABI (PyTorch >= 2.7
# wheels, or see the configure error for older ones), plus transformers for the parity step:
#   pip install torch transformers peft
#
#   1. prints the GPUs (nvidia-smi -L) and the versions of torch, CUDA and transformers;
#   2. configures BUILD_DIR with -DGRPO_WITH_CUDA=ON against PyTorch's LibTorch
#      (-DCMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path) and builds grpo_gpu_tests, grpo-run
#      and, where the targets exist, grpo_bench_train_precision and grpo_bench_rollout;
#   3. runs the GPU tests (ctest -L gpu: bf16 vs fp32 log-probs, a training step, greedy
#      decoding, NCCL with one rank); on a GPU machine none may be skipped;
#   4. compares our float32 logits with transformers' AutoModelForCausalLM on cuda for each
#      fixture model (the tests dump ours into BUILD_DIR/parity; scripts/transformers_parity.py),
#      and our LoRA checkpoints and merges with PEFT's (scripts/make-lora-parity-cases.sh,
#      scripts/peft_parity.py; needs peft);
#   5. prints the `name: value` lines of the precision benchmarks run with --device cuda, for
#      the benchmarks that take that flag (a CPU run is not wanted here).
# Exits non-zero when a step fails; the later steps still run and the summary lists them all.
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]        (default: build-gpu in the repository)
# Environment: PYTHON (default python3), JOBS (build jobs, default nproc), EXTRA_PREFIX_PATH
# (more CMake prefixes, ;-separated, for dependencies unpacked outside /usr, e.g. Debian
# packages extracted with dpkg-deb -x on a machine that cannot install them; set
# PKG_CONFIG_LIBDIR/PKG_CONFIG_SYSROOT_DIR and LD_LIBRARY_PATH to match).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$(realpath -m "${1:-$ROOT/build-gpu}")
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
FIXTURES=(qwen2 qwen3 llama)
PARITY_DIR="$BUILD_DIR/parity"
failures=()

step() { printf '\n== %s\n' "$*"; }
die() {
  echo "gpu-check: $*" >&2
  exit 1
}

# ---- 1. the machine ---------------------------------------------------------------------------
step "GPUs and versions"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs an NVIDIA GPU and its driver"
nvidia-smi -L
if command -v nvcc >/dev/null; then nvcc --version | tail -n 1; else echo "nvcc: not on PATH (CMake may still find it, e.g. /usr/local/cuda)"; fi
cmake --version | head -n 1
"$PYTHON" - <<'EOF' || die "$PYTHON has no usable PyTorch (pip install torch)"
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"C++11 ABI {int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print(f"CUDA available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
try:
    import transformers
    print(f"transformers {transformers.__version__}")
except ImportError:
    print("transformers: not installed (the parity step will fail; pip install transformers)")
if torch.version.cuda is None or not torch.cuda.is_available():
    raise SystemExit("this PyTorch has no CUDA, or sees no GPU")
EOF
TORCH_PREFIX=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')

# ---- 2. configure and build -------------------------------------------------------------------
step "configure $BUILD_DIR against $TORCH_PREFIX"
# A build folder configured before keeps its cached LibTorch (Torch_DIR): it must be this one.
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cached=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
  if [ -n "$cached" ] && [ "$(realpath -m "$cached")" != "$(realpath -m "$TORCH_PREFIX/Torch")" ]; then
    die "$BUILD_DIR was configured with another LibTorch ($cached); remove it or name another BUILD_DIR"
  fi
fi
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DGRPO_WITH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX${EXTRA_PREFIX_PATH:+;$EXTRA_PREFIX_PATH}"

step "build"
targets=(grpo_gpu_tests grpo-run grpo-sft grpo-export)
known_targets=$(cmake --build "$BUILD_DIR" --target help)
for optional in grpo_bench_train_precision grpo_bench_rollout; do
  if grep -qw -- "$optional" <<<"$known_targets"; then
    targets+=("$optional")
  else
    echo "($optional: no such target in this tree, not built)"
  fi
done
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"

# ---- 3. GPU tests -----------------------------------------------------------------------------
step "ctest -L gpu"
rm -rf "$PARITY_DIR"
ctest_log="$BUILD_DIR/gpu-check-ctest.log"
# GRPO_PARITY_OUT: TransformersParity.DumpOurLogitsForTheFixtures writes our logits for step 4.
if ! GRPO_PARITY_OUT="$PARITY_DIR" ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure 2>&1 | tee "$ctest_log"; then
  failures+=("ctest -L gpu")
fi
if grep -q '(Skipped)' "$ctest_log"; then
  echo "skipped on a GPU machine (no CUDA device visible to the tests, or no NCCL in this LibTorch):"
  grep '(Skipped)' "$ctest_log"
  failures+=("ctest -L gpu: skipped tests")
fi

# ---- 4. transformers parity -------------------------------------------------------------------
step "logits: transformers vs grpo (float32, cuda)"
for model in "${FIXTURES[@]}"; do
  if ! "$PYTHON" "$ROOT/scripts/transformers_parity.py" --model "$model" --ours "$PARITY_DIR" --device cuda; then
    failures+=("transformers parity: $model")
  fi
done

# ---- 4b. PEFT parity of the LoRA files --------------------------------------------------------
step "LoRA: PEFT loads our adapters, equals our merge, writes the same files (cuda)"
if ! "$ROOT/scripts/make-lora-parity-cases.sh" "$BUILD_DIR" "$BUILD_DIR/lora-parity" ||
   ! "$PYTHON" "$ROOT/scripts/peft_parity.py" --fixtures "$BUILD_DIR/lora-parity/qwen2" "$BUILD_DIR/lora-parity/llama" --device cuda; then
  failures+=("PEFT parity")
fi

# ---- 5. precision benchmarks on the GPU -------------------------------------------------------
step "precision benchmarks, --device cuda"
# run_bench BINARY SOURCE [ARGS...]: runs BINARY --device cuda ARGS when SOURCE parses --device,
# keeps the whole output in BUILD_DIR and prints its `name: value` lines.
run_bench() {
  local bin=$1 src=$2
  shift 2
  if [ ! -x "$BUILD_DIR/bin/$bin" ]; then
    echo "$bin: not built, skipped"
    return 0
  fi
  if ! grep -q '"--device"' "$ROOT/$src"; then
    echo "$bin: has no --device flag yet, skipped"
    return 0
  fi
  local log="$BUILD_DIR/gpu-check-$bin.log"
  echo "-- $bin --device cuda $* (full output: $log)"
  if "$BUILD_DIR/bin/$bin" --device cuda "$@" >"$log" 2>&1; then
    grep -E '^[A-Za-z0-9_.-]+: ' "$log" || echo "(no name: value lines)"
  else
    tail -n 20 "$log"
    failures+=("$bin --device cuda")
  fi
}
run_bench grpo_bench_train_precision bench/train/precision_bench.cpp
rollout_args=()
if grep -q '"--precision-only"' "$ROOT/bench/rollout/rollout_bench.cpp" 2>/dev/null; then rollout_args+=(--precision-only); fi
run_bench grpo_bench_rollout bench/rollout/rollout_bench.cpp ${rollout_args[@]+"${rollout_args[@]}"}

# ---- summary ----------------------------------------------------------------------------------
step "summary"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "gpu-check: everything passed"
