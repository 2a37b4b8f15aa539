#!/usr/bin/env bash
# Peak memory (maximum resident set size, /usr/bin/time -v) of the host while Python code
# floods its pipes, against the same host running a trivial function (docs/python-rewards.md,
# plugins/tools/python/README.md): the host must hold a bounded amount of what a worker writes.
#
#   bench/sandbox/flood_memory.sh [BUILD_DIR]      (default: build)
#
# Rewards, through grpo-verify (one row, 1 worker):
#   trivial         returns 1.0
#   flood_stdout    writes 1 GB to fd 1 (the run log's pipe) without a newline, returns 1.0
#   flood_protocol  writes 2 GB into the worker's protocol pipe without a newline
# The python tool, through grpo_bench_tool_call (one call):
#   trivial         print(6 * 7), one-shot and stateful
#   flood stdout    1 GB to fd 1 without a newline, one-shot (output_kb) and stateful (tmp_mb)
#   flood protocol  2 GB into the stateful interpreter's protocol pipe (flood_tool.py)
# Set GRPO_PLUGIN_PATH to measure other builds of the plugins (grpo-verify and the tool
# program look there first). Ends with `name: value` lines (peak RSS in MB), as the other
# benches do.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
bin="$(cd "$build/bin" && pwd)"
work="$(mktemp -d /tmp/grpo-flood-XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp "$here/flood_reward.py" "$work/"
chmod -R a+rX "$work"
echo '{"id": 1, "completion": "c", "ground_truth": "1", "verifier": "python_reward"}' > "$work/in.jsonl"

peak() {  # peak RSS in MB of a command; its output goes to $work/last.out
  /usr/bin/time -v "$@" > "$work/last.out" 2> "$work/last.err" || true
  awk '/Maximum resident set size/ {printf "%.0f", $6 / 1024}' "$work/last.err"
}

summary=()

reward() {
  cat > "$work/v.yaml" <<YAML
verifiers:
  - {name: python_reward, path: $work/flood_reward.py, function: $1, workers: 1, timeout_s: 60}
YAML
  local mb
  mb=$(peak "$bin/grpo-verify" --input "$work/in.jsonl" --config "$work/v.yaml" --timeout 120)
  printf '%-34s %6s MB   %s\n' "grpo-verify reward $1" "$mb" "$(head -c 300 "$work/last.out")"
  summary+=("verify_${1}_peak_mb: $mb")
}

tool() {  # name, metric, code file, options...
  local name="$1" metric="$2" file="$3"
  shift 3
  local mb
  mb=$(peak "$bin/grpo_bench_tool_call" python "$file" timeout_s=60 "$@")
  printf '%-34s %6s MB   %s\n' "tool $name" "$mb" "$(tr '\n' ' ' < "$work/last.out" | head -c 300)"
  summary+=("tool_${metric}_peak_mb: $mb")
}

reward trivial
reward flood_stdout
reward flood_protocol
echo 'print(6 * 7)' > "$work/trivial.py"
printf 'import os\nfor _ in range(1024):\n    os.write(1, b"y" * (1 << 20))\n' > "$work/stdout.py"
tool "trivial one-shot" trivial_one_shot "$work/trivial.py"
tool "trivial stateful" trivial_stateful "$work/trivial.py" stateful=true
tool "flood stdout one-shot" flood_stdout_one_shot "$work/stdout.py"
tool "flood stdout stateful" flood_stdout_stateful "$work/stdout.py" stateful=true
tool "flood protocol stateful" flood_protocol_stateful "$here/flood_tool.py" stateful=true
printf '%s\n' "${summary[@]}"
