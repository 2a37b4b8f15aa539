#!/usr/bin/env bash
# The GPU check (docs/gpu.md): what a machine without a GPU cannot test, in one command that fits a
# brief visit to a GPU machine. Prepared here (`make gpu-bundle`), it needs nothing installed
# there beyond what the GPU machines have: the NVIDIA driver and a Python with PyTorch (the
# version the bundle was built against) + transformers + peft.
#
#   scripts/gpu-check.sh [--bundle FILE | --build-dir DIR] [--dry-run] [--skip-bench]
#
#   --bundle FILE    (default build-gpu/grpo-gpu-bundle.tar.xz) the archive of scripts/gpu-bundle.sh:
#                    unpacked into a scratch folder and run from there
#   --build-dir DIR  run the programs of a CUDA build folder on this machine instead (make gpu-build)
#   --dry-run        everything up to the GPU, on a machine without one: the same steps with the
#                    device set to the CPU (the GPU tests' own CPU mode, GRPO_GPU_TESTS_DEVICE=cpu;
#                    parity on the CPU; the benchmark's tiny CPU shape), and a check that every
#                    library the programs load comes from the bundle, LibTorch/CUDA or the C/C++
#                    runtime, as on a GPU machine without our Debian packages
#   --skip-bench     leave the benchmarks out
#
# Steps, each timed: 1. the machine (GPUs, versions; the machine's PyTorch must be the bundle's);
# 2. libraries resolve; 3. the GPU tests (none may be skipped on a GPU); 4. transformers parity of
# every fixture family on the device (float32 logits, scripts/transformers_parity.py); 5. PEFT
# parity of our LoRA files trained on the device (make-lora-parity-cases.sh, peft_parity.py);
# 6. the side-by-side benchmark against Hugging Face (bench/gpu/run.sh), then an MoE layer's
# experts grouped against one by one (grpo_bench_moe_experts), then the training step profiled
# (bench/gpu/profile.sh: its tables, Chrome traces in WORK/profile). Later steps run when one
# fails; the summary lists every step's
# result and time and the exit status is non-zero when one failed.
# Environment: PYTHON (default python3; in a dry run the project's .venv/bin/python), WORK
# (scratch folder, default a new one under TMPDIR).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE="$ROOT/build-gpu/grpo-gpu-bundle.tar.xz"
BUILD_DIR=""
DRY_RUN=0
SKIP_BENCH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$(realpath -m "${2:?--bundle needs a file}"); shift 2 ;;
    --build-dir) BUILD_DIR=$(realpath -m "${2:?--build-dir needs a folder}"); shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --skip-bench) SKIP_BENCH=1; shift ;;
    *) echo "gpu-check: unknown argument '$1' (expected --bundle FILE, --build-dir DIR, --dry-run, --skip-bench)" >&2; exit 2 ;;
  esac
done
if [ -z "${PYTHON:-}" ]; then
  if [ "$DRY_RUN" = 1 ] && [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
DEVICE=cuda
[ "$DRY_RUN" = 1 ] && DEVICE=cpu
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/grpo-gpu-check.XXXXXX")}
mkdir -p "$WORK"
FIXTURES=(qwen2 qwen3 llama mistral gemma2 gemma3 phi3 olmo2 qwen2_moe qwen3_moe llama_dynamic)
results=()
failures=0
started=$(date +%s)

die() { echo "gpu-check: $*" >&2; exit 1; }
# run_step NAME COMMAND...: runs a step, records its result and wall time.
run_step() {
  local name=$1 t0 rc
  shift
  printf '\n== %s\n' "$name"
  t0=$(date +%s.%N)
  if "$@"; then rc=0; else rc=$?; fi
  local dt
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" = 0 ]; then results+=("ok      ${dt}s  $name"); else results+=("FAILED  ${dt}s  $name (exit $rc)"); failures=$((failures + 1)); fi
}

# ---- the programs: a bundle unpacked, or a build folder --------------------------------------
if [ -n "$BUILD_DIR" ]; then
  [ -x "$BUILD_DIR/bin/grpo_gpu_tests" ] || die "$BUILD_DIR/bin/grpo_gpu_tests is missing: run make gpu-build"
  BIN_ROOT="$BUILD_DIR"
else
  [ -s "$BUNDLE" ] || die "$BUNDLE is missing: run make gpu-bundle on a machine with the CUDA toolkit (docs/gpu.md)"
  tar -C "$WORK" -xJf "$BUNDLE"
  BIN_ROOT="$WORK/grpo-gpu-bundle"
  cat "$BIN_ROOT/BUNDLE.txt"
fi

# ---- 1. the machine ---------------------------------------------------------------------------
machine() {
  if [ "$DRY_RUN" = 0 ]; then
    command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this check needs an NVIDIA GPU and its driver (or --dry-run)"; return 1; }
    nvidia-smi -L
  fi
  "$PYTHON" - "$BIN_ROOT" "$DEVICE" <<'EOF'
import os, sys
import torch
root, device = sys.argv[1], sys.argv[2]
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPUs visible: {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
for name in ("transformers", "peft"):
    try:
        print(f"{name} {__import__(name).__version__}")
    except ImportError:
        print(f"{name}: not installed (its parity step fails)")
built = os.path.join(root, "BUNDLE.txt")
if os.path.exists(built):
    want = next(l.split(": ", 1)[1].strip() for l in open(built) if l.startswith("libtorch: "))
    if want.split("+")[0] != torch.__version__.split("+")[0]:
        sys.exit(f"this PyTorch is {torch.__version__}, the bundle was built against {want}: its programs "
                 f"need the same LibTorch (rebuild the bundle against it, docs/gpu.md)")
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("this PyTorch sees no CUDA device")
EOF
}
run_step "machine" machine

# LibTorch and its CUDA libraries: the machine's PyTorch. Only these go on LD_LIBRARY_PATH (the
# bundle's programs find the rest through their RUNPATH), so Python is not handed our libraries.
TORCH_LIB=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
NVIDIA_LIBS=$(ls -d "$(dirname "$TORCH_LIB")"/../nvidia/*/lib 2>/dev/null | paste -sd: - || true)
export LD_LIBRARY_PATH="$TORCH_LIB${NVIDIA_LIBS:+:$NVIDIA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GRPO_TEST_SOURCE_DIR="$ROOT"
# No hub: the GPU machines have no network, and everything the scripts load is local.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1

# ---- 2. libraries -----------------------------------------------------------------------------
# shellcheck source=scripts/gpu-system-libs.sh
. "$ROOT/scripts/gpu-system-libs.sh"
libraries() {
  local bad=0 f name path
  local -a elves
  mapfile -t elves < <(find "$BIN_ROOT/bin" "$BIN_ROOT/lib" -type f \( -name '*.so*' -o -perm -u+x \))
  for f in "${elves[@]}"; do
    while read -r name _ path _; do
      if [ "$path" = not ]; then echo "$f: $name not found"; bad=1; continue; fi
      # A dry run proves the bundle stands alone: nothing may come from this machine but the
      # bundle, LibTorch/CUDA and what every GPU machine has (GRPO_SYSTEM_LIBS).
      [ "$DRY_RUN" = 1 ] && [ -n "${BUNDLE_MODE:-}" ] || continue
      [[ "$name" =~ $GRPO_SYSTEM_LIBS ]] && continue
      case "$path" in
        "$BIN_ROOT"/*|"$TORCH_LIB"/*|*/nvidia/*|"") ;;
        *) echo "$f: $name => $path (outside the bundle: a GPU machine does not have it)"; bad=1 ;;
      esac
    done < <(ldd "$f" 2>&1 | grep '=>')
  done
  [ "$bad" = 0 ] && echo "every library of ${#elves[@]} programs and plugins resolves"
  return "$bad"
}
[ -z "$BUILD_DIR" ] && BUNDLE_MODE=1
run_step "libraries" libraries

# ---- 3. GPU tests -----------------------------------------------------------------------------
gpu_tests() {
  local log="$WORK/gpu-tests.log" rc=0
  rm -rf "$WORK/parity"
  # GRPO_PARITY_OUT: TransformersParity.DumpOurLogitsForTheFixtures writes our logits for step 4.
  # A dry run checks the tests themselves on the CPU's bfloat16 (tests/gpu/gpu_test_support.h).
  local device_env=()
  [ "$DRY_RUN" = 1 ] && device_env=(GRPO_GPU_TESTS_DEVICE=cpu)
  env ${device_env[@]+"${device_env[@]}"} GRPO_PARITY_OUT="$WORK/parity" "$BIN_ROOT/bin/grpo_gpu_tests" --gtest_brief=1 2>&1 |
    tee "$log" || rc=$?
  # On a GPU nothing may be skipped (no CUDA device visible, or no NCCL in this build).
  if [ "$DRY_RUN" = 0 ] && grep -q '^\[  SKIPPED \]' "$log"; then
    echo "skipped on a GPU machine:"
    grep '^\[  SKIPPED \]' "$log"
    rc=1
  fi
  grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$log" | tail -n 3 || true
  return "$rc"
}
run_step "GPU tests ($DEVICE)" gpu_tests

# ---- 4. transformers parity -------------------------------------------------------------------
run_step "logits: transformers vs grpo, ${#FIXTURES[@]} families (float32, $DEVICE)" \
  "$PYTHON" "$ROOT/scripts/transformers_parity.py" --model "${FIXTURES[@]}" --ours "$WORK/parity" --device "$DEVICE"

# ---- 5. PEFT parity ---------------------------------------------------------------------------
peft() {
  GRPO_LORA_DEVICE="$DEVICE" PYTHON="$PYTHON" "$ROOT/scripts/make-lora-parity-cases.sh" "$BIN_ROOT" "$WORK/lora-parity" &&
    "$PYTHON" "$ROOT/scripts/peft_parity.py" "$WORK"/lora-parity/*/ --device "$DEVICE"
}
run_step "LoRA: PEFT loads our adapters and equals our merge ($DEVICE)" peft

# ---- 6. the side-by-side benchmark ------------------------------------------------------------
if [ "$SKIP_BENCH" = 0 ]; then
  bench_args=(--device "$DEVICE" --python "$PYTHON" --repeats 2)
  [ "$DRY_RUN" = 1 ] && bench_args+=(--dry-run)
  run_step "GRPO step vs Hugging Face (bench/gpu)" "$ROOT/bench/gpu/run.sh" "$BIN_ROOT" "${bench_args[@]}"
  moe_args=(--device "$DEVICE")
  [ "$DRY_RUN" = 1 ] && moe_args+=(--dry-run)
  run_step "MoE experts: grouped vs one by one (bench/gpu)" "$BIN_ROOT/bin/grpo_bench_moe_experts" "${moe_args[@]}"
  profile_args=()
  [ "$DRY_RUN" = 1 ] && profile_args+=(--dry-run)
  run_step "where the training step's time goes (bench/gpu/profile.sh)" \
    "$ROOT/bench/gpu/profile.sh" "$BIN_ROOT" "$WORK/profile" ${profile_args[@]+"${profile_args[@]}"}
fi

# ---- summary ----------------------------------------------------------------------------------
printf '\n== summary (%s, work folder %s)\n' "$([ "$DRY_RUN" = 1 ] && echo "dry run on the CPU" || echo "$DEVICE")" "$WORK"
printf '%s\n' "${results[@]}"
echo "gpu_check_seconds: $(( $(date +%s) - started ))"
if [ "$failures" -gt 0 ]; then
  echo "gpu-check: $failures step(s) failed"
  exit 1
fi
echo "gpu-check: every step passed"
