#!/usr/bin/env bash
# One GRPO step, ours against Hugging Face / TRL, on the same device in one run.
#
# Why: a GPU run is scarce, so one command runs both sides back to back on the same device with
# the same shapes, prompts and seeds (Qwen2.5-0.5B's shape, random weights, 8 prompts x 4
# samples x 256 sampled tokens at T 0.7, prompts of 32..128 tokens, micro-batches of 8, bf16
# autocast over float32 master weights, AdamW, KL off), and ends with the ratios:
#   ours      BUILD_DIR/bin/grpo_bench_gpu_step (bench/gpu/grpo_step_bench.cpp): the native
#             engine and the trainer's update_policy;
#   baseline  bench/gpu/hf_grpo_step.py: TRL's GRPOTrainer step without vLLM (transformers'
#             generate, forward/backward/AdamW under autocast, SDPA).
# Figures are medians of --repeats (3) timed steps after a warm-up, the device synchronized before every
# clock read. train_mfu = 6 x parameters x our training tokens/s over the device's bf16 dense
# peak (the datasheet's, from a table); train_mfu_measured_peak the same over the rate a large
# bf16 matmul reaches in this run (~790 TFLOP/s on an H200, against 989 on its datasheet);
# decode_bandwidth_fraction = (bf16 weights + the KV cache read at the mean context, per
# decode step of the whole batch) x our decode steps/s over the device's memory bandwidth. Both
# peaks come from a table by device name, else are measured by the baseline in the same run;
# a line says which. --dry-run proves the pipeline on the CPU with a tiny model in about a minute
# (the figures then mean nothing).
#
# Usage: bench/gpu/run.sh BUILD_DIR [--device cuda|cuda:N|cpu] [--python PY] [--repeats N] [--dry-run]
#   BUILD_DIR  a build with the target grpo_bench_gpu_step (a CUDA build for --device cuda), or a
#              folder holding the binary itself
#   --python   the interpreter with torch and transformers (default python3)
#   --repeats  timed steps per side after the warm-up (default 3; scripts/gpu-check.sh takes 2 to
#              stay within a brief GPU visit)
# Logs: BUILD_DIR/gpu-bench/{ours,hf}.log. Ends with `name: value` lines.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() {
  echo "bench/gpu/run.sh: $*" >&2
  exit 2
}
usage() {
  sed -n 's/^# Usage: //p' "${BASH_SOURCE[0]}" >&2
  exit "${1:-2}"
}

[ $# -ge 1 ] || usage
case $1 in -h | --help) usage 0 ;; -*) die "the first argument is BUILD_DIR, got '$1'" ;; esac
BUILD_DIR=$1
shift
DEVICE=cuda
DEVICE_GIVEN=0
PY=python3
DRY_RUN=0
REPEATS=3
while [ $# -gt 0 ]; do
  case $1 in
    --device)
      [ $# -ge 2 ] || die "--device needs a value (cuda, cuda:N or cpu)"
      DEVICE=$2 DEVICE_GIVEN=1
      shift 2
      ;;
    --python)
      [ $# -ge 2 ] || die "--python needs a value"
      PY=$2
      shift 2
      ;;
    --dry-run)
      DRY_RUN=1
      shift
      ;;
    --repeats)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--repeats needs a positive integer"
      REPEATS=$2
      shift 2
      ;;
    -h | --help) usage 0 ;;
    *) die "unknown argument '$1' (BUILD_DIR [--device cuda|cpu] [--python PY] [--repeats N] [--dry-run])" ;;
  esac
done
[[ $DEVICE =~ ^(cpu|cuda|cuda:[0-9]+)$ ]] || die "--device expects cuda, cuda:N or cpu, got '$DEVICE'"
[ "$DRY_RUN" = 0 ] || [ "$DEVICE_GIVEN" = 0 ] || [ "$DEVICE" = cpu ] || die "--dry-run runs on the CPU; drop --device $DEVICE"
BIN="$BUILD_DIR/bin/grpo_bench_gpu_step"
[ -x "$BIN" ] || [ ! -x "$BUILD_DIR/grpo_bench_gpu_step" ] || BIN="$BUILD_DIR/grpo_bench_gpu_step"  # a bundle folder
[ -x "$BIN" ] || die "$BIN not found: build it (cmake --build $BUILD_DIR --target grpo_bench_gpu_step)"
"$PY" -c 'import torch, transformers' 2>/dev/null || die "'$PY' cannot import torch and transformers (name one with --python)"

if [ "$DRY_RUN" = 1 ]; then
  DEVICE=cpu
  SIZES=(--config "$ROOT/tests/fixtures/models/qwen2/config.json" --prompts 2 --samples 2 --new-tokens 8
         --min-prompt 8 --max-prompt 16 --micro-batch 2)
else
  SIZES=(--config "$ROOT/bench/configs/qwen2.5-0.5b/config.json" --prompts 8 --samples 4 --new-tokens 256
         --min-prompt 32 --max-prompt 128 --micro-batch 8)
fi
SIZES+=(--temperature 0.7 --lr 1e-6 --repeats "$REPEATS" --seed 0)
LOGS="$BUILD_DIR/gpu-bench"
mkdir -p "$LOGS"

echo "== ours: $BIN --device $DEVICE ${SIZES[*]}"
"$BIN" --device "$DEVICE" "${SIZES[@]}" | tee "$LOGS/ours.log"
echo
echo "== Hugging Face: $PY bench/gpu/hf_grpo_step.py --device $DEVICE ${SIZES[*]}"
"$PY" "$ROOT/bench/gpu/hf_grpo_step.py" --device "$DEVICE" "${SIZES[@]}" | tee "$LOGS/hf.log"
echo

"$PY" - "$LOGS/ours.log" "$LOGS/hf.log" <<'EOF'
import sys

values = {}
for path in sys.argv[1:]:
    for line in open(path):
        name, sep, value = line.rstrip("\n").partition(": ")
        if sep and name and " " not in name:
            values[name] = value

def num(name):
    if name not in values:
        raise SystemExit(f"bench/gpu/run.sh: no '{name}' line in {' or '.join(sys.argv[1:])}")
    return float(values[name])

ours_decode, hf_bf16, hf_autocast = num("gpu_decode_tokens_per_s"), num("hf_decode_tokens_per_s_bf16"), num("hf_decode_tokens_per_s_autocast")
ours_train, hf_train = num("gpu_train_tokens_per_s"), num("hf_train_tokens_per_s")
ours_step, hf_step = num("gpu_step_s"), num("hf_step_s")
params, peak, bandwidth = num("gpu_params"), num("peak_bf16_flops"), num("mem_bandwidth_bytes_per_s")
if params != num("hf_params"):
    print(f"note: parameter counts differ: ours {params:.0f}, transformers {num('hf_params'):.0f} (MFU uses ours)")
mfu = 6 * params * ours_train / peak
fraction = num("gpu_decode_bytes_per_step") * num("gpu_decode_steps_per_s") / bandwidth
print("summary (hf_step_s = TRL's step: generation under autocast + training; decode_speedup_vs_hf is against the bf16 copy)")
print(f"gpu_decode_tokens_per_s: {ours_decode:.1f}")
print(f"hf_decode_tokens_per_s_bf16: {hf_bf16:.1f}")
print(f"hf_decode_tokens_per_s_autocast: {hf_autocast:.1f}")
print(f"decode_speedup_vs_hf: {ours_decode / hf_bf16:.2f}")
print(f"gpu_decode_tokens_per_s_dynamic: {num('gpu_decode_tokens_per_s_dynamic'):.1f}")
print(f"cuda_graph_decode_speedup: {ours_decode / num('gpu_decode_tokens_per_s_dynamic'):.2f}")
print(f"gpu_train_tokens_per_s: {ours_train:.1f}")
print(f"hf_train_tokens_per_s: {hf_train:.1f}")
print(f"train_speedup_vs_hf: {ours_train / hf_train:.2f}")
print(f"gpu_step_s: {ours_step:.3f}")
print(f"hf_step_s: {hf_step:.3f}")
print(f"step_speedup_vs_hf: {hf_step / ours_step:.2f}")
print(f"train_mfu: {mfu:.4f}")
print(f"train_mfu_peak: {peak:.4g} bf16 FLOP/s, {values['peak_flops_source']}")
print(f"train_mfu_measured_peak: {6 * params * ours_train / num('measured_bf16_flops'):.4f}")
print(f"measured_bf16_flops: {num('measured_bf16_flops'):.4g} (a bf16 8192^3 matmul in this run)")
print(f"decode_bandwidth_fraction: {fraction:.4f}")
print(f"decode_bandwidth_peak: {bandwidth:.4g} bytes/s, {values['mem_bandwidth_source']}")
print(f"gpu_name: {values['gpu_name']}")
EOF
