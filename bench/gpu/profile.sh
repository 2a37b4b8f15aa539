#!/usr/bin/env bash
# Where a GRPO step's training time goes on a GPU: our side of bench/gpu/run.sh with LibTorch's
# profiler on one more update after the timed ones (grpo_step_bench.cpp's --profile), at the
# benchmark's shape, then at variants that each move one suspect (the log-prob chunk, the
# micro-batch size), so that one brief GPU visit says which one costs.
#
# Why these variants: a step whose kernels fill only part of the wall time is paced by the host
# (launches, syncs), which a larger micro-batch amortizes; the chunked log-probs' cost scales with
# the chunks' count, which a larger chunk shrinks. The profile table says which kernels and host
# calls dominate; the Chrome traces (open in chrome://tracing or Perfetto) show the gaps.
#
# Usage: bench/gpu/profile.sh BIN_ROOT OUT_DIR [--device cuda|cpu] [--dry-run]
#   BIN_ROOT   a CUDA build folder or an unpacked GPU bundle (holding bin/grpo_bench_gpu_step)
#   OUT_DIR    where the logs and traces go (created)
#   --dry-run  the tiny CPU shape of run.sh --dry-run (proves the pipeline without a GPU)
# Ends with `name: value` lines: profile_train_tokens_per_s_<variant> for each variant.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() {
  echo "bench/gpu/profile.sh: $*" >&2
  exit 2
}
[ $# -ge 2 ] || die "usage: BIN_ROOT OUT_DIR [--device cuda|cpu] [--dry-run]"
BIN="$1/bin/grpo_bench_gpu_step"
OUT_DIR=$2
shift 2
DEVICE=cuda
DRY_RUN=0
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=${2:?--device needs a value}; shift 2 ;;
    --dry-run) DRY_RUN=1 DEVICE=cpu; shift ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[ -x "$BIN" ] || die "$BIN not found (a CUDA build folder or an unpacked bundle)"
mkdir -p "$OUT_DIR"

if [ "$DRY_RUN" = 1 ]; then
  SIZES=(--config "$ROOT/tests/fixtures/models/qwen2/config.json" --prompts 2 --samples 2 --new-tokens 8
         --min-prompt 8 --max-prompt 16)
  MB=2
else
  SIZES=(--config "$ROOT/bench/configs/qwen2.5-0.5b/config.json" --prompts 8 --samples 4 --new-tokens 256
         --min-prompt 32 --max-prompt 128)
  MB=8
fi
SIZES+=(--temperature 0.7 --lr 1e-6 --repeats 2 --seed 0 --device "$DEVICE")

# name|extra flags: the benchmark's shape first (profiled), then one change each.
VARIANTS=("bench|--micro-batch $MB --profile $OUT_DIR/trace-bench.json"
          "chunk4096|--micro-batch $MB --logprob-chunk 4096"
          "microbatch$((MB * 2))|--micro-batch $((MB * 2)) --profile $OUT_DIR/trace-microbatch.json")
summary=()
for v in "${VARIANTS[@]}"; do
  name=${v%%|*}
  read -r -a extra <<<"${v#*|}"
  echo "== $name: $BIN ${SIZES[*]} ${extra[*]}"
  "$BIN" "${SIZES[@]}" "${extra[@]}" 2>&1 | tee "$OUT_DIR/$name.log"
  tps=$(sed -n 's/^gpu_train_tokens_per_s: //p' "$OUT_DIR/$name.log")
  [ -n "$tps" ] || die "$name: no gpu_train_tokens_per_s line (see $OUT_DIR/$name.log)"
  summary+=("profile_train_tokens_per_s_$name: $tps")
done
printf '%s\n' "${summary[@]}"
