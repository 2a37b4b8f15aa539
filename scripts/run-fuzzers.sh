#!/usr/bin/env bash
# Runs every libFuzzer target in FUZZ_DIR for SECONDS each, starting from the committed
# seed corpus (copied, so that the fuzzer's finds do not land in the source tree).
# A crash leaves its input as FUZZ_DIR/crash-* and fails the job.
set -euo pipefail
FUZZ_DIR=${1:?usage: run-fuzzers.sh FUZZ_DIR SECONDS}
SECONDS_EACH=${2:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
status=0
for target in fuzz_safetensors_header:safetensors fuzz_tokenizer_json:tokenizer fuzz_jinja_template:jinja; do
  bin=${target%%:*}
  seeds=$ROOT/bench/fuzz/corpus/${target##*:}
  work=$FUZZ_DIR/corpus-${target##*:}
  mkdir -p "$work"
  [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null || true
  echo "== $bin: ${SECONDS_EACH}s"
  if ! (cd "$FUZZ_DIR" && "./$bin" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 "corpus-${target##*:}"); then
    echo "FAILED: $bin (crash input in $FUZZ_DIR)" >&2
    status=1
  fi
done
exit $status
