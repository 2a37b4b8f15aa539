#!/usr/bin/env bash
# The quickstart demo (`make demo`, docs/quickstart.md): writes the synthetic arithmetic task,
# warm-starts a tiny model with grpo-sft on a deliberately imperfect teacher, trains it with
# GRPO against the math verifier, then evaluates the SFT and the GRPO checkpoints greedily on
# the same held-out problems and prints both accuracies side by side.
#
#   scripts/demo.sh BUILD_DIR [ALGO] [--set KEY=VALUE]...
#
# ALGO names a preset of configs/algorithms/ (default grpo); the --set options go to grpo-run.
# Run directories: runs/quickstart-data, runs/quickstart-sft, runs/quickstart-ALGO.
# LORA=1 in the environment (`make demo LORA=1`): GRPO trains rank-16 LoRA adapters
# (configs/quickstart-lora.yaml, docs/lora.md) in runs/quickstart-ALGO-lora, and the last
# adapter is merged with grpo-export --merge into runs/quickstart-ALGO-lora/merged, which is
# what step 4 evaluates.
# PYTHON_REWARD=1 (`make demo PYTHON_REWARD=1`): GRPO learns from the same math reward written
# in Python (configs/quickstart-python-reward.yaml, docs/python-rewards.md), in
# runs/quickstart-ALGO-pyreward; step 4 still judges with the C++ math verifier.
# TASK=tools (`make demo TASK=tools`, docs/tools.md): the tool demo instead: multiplication of
# 3-digit numbers, an SFT teacher that calls the calculator on 45% of them, GRPO with the
# calculator in the rollouts (configs/quickstart-tools*.yaml); runs/tools-data, runs/tools-sft,
# runs/tools-ALGO. It ends with the accuracy line and the tool-call rate before and after.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:?usage: scripts/demo.sh BUILD_DIR [ALGO] [--set KEY=VALUE]...}
shift
algo=grpo
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then algo=$1; shift; fi
preset=configs/algorithms/$algo.yaml
if [ ! -f "$preset" ]; then
  echo "demo: no preset '$algo' (expected $preset; presets: $(ls configs/algorithms | sed 's/\.yaml$//' | tr '\n' ' '))" >&2
  exit 2
fi
bin=$build/bin
data=runs/quickstart-data
sft_dir=runs/quickstart-sft
run_dir=runs/quickstart-$algo
lora_config=()
if [ "${LORA:-}" = 1 ]; then
  run_dir=runs/quickstart-$algo-lora
  lora_config=(--config configs/quickstart-lora.yaml)
elif [ -n "${LORA:-}" ] && [ "${LORA}" != 0 ]; then
  echo "demo: LORA is '$LORA' (expected 1, or 0 / unset for full fine-tuning)" >&2
  exit 2
fi
reward_config=()
if [ "${PYTHON_REWARD:-}" = 1 ]; then
  run_dir=$run_dir-pyreward
  reward_config=(--config configs/quickstart-python-reward.yaml)
elif [ -n "${PYTHON_REWARD:-}" ] && [ "${PYTHON_REWARD}" != 0 ]; then
  echo "demo: PYTHON_REWARD is '$PYTHON_REWARD' (expected 1, or 0 / unset for the C++ math verifier)" >&2
  exit 2
fi
start=$(date +%s)

# The closing lines from grpo-eval's JSON: the accuracy line, and with tools the call rate.
report() {
  python3 - "$run_dir/demo_eval.json" "$(( $(date +%s) - start ))" "$run_dir" <<'PY'
import json, sys
before, after = json.load(open(sys.argv[1]))
b = before["metrics"]["eval/verifiable_correct_rate"] * 100
a = after["metrics"]["eval/verifiable_correct_rate"] * 100
n = int(after["metrics"]["eval/prompts"])
print(f"run directory: {sys.argv[3]} (curves.png, metrics.jsonl, samples.jsonl, TensorBoard events, checkpoints/); {sys.argv[2]} s")
print(f"demo: accuracy before={b:.1f}% after={a:.1f}% gain={a - b:+.1f} points ({n} held-out problems)")
if "eval/tools/calls_per_sample" in after["metrics"]:
    tb = before["metrics"]["eval/tools/calls_per_sample"]
    ta = after["metrics"]["eval/tools/calls_per_sample"]
    print(f"demo: tool calls per problem before={tb:.2f} after={ta:.2f}")
PY
}

if [ "${TASK:-}" = tools ]; then
  data=runs/tools-data
  sft_dir=runs/tools-sft
  run_dir=runs/tools-$algo
  if [ ${#lora_config[@]} -gt 0 ] || [ ${#reward_config[@]} -gt 0 ]; then
    echo "demo: TASK=tools runs full fine-tuning with the C++ math verifier (no LORA or PYTHON_REWARD)" >&2
    exit 2
  fi
  echo "== 1/4 data: grpo-data multiplication --output $data"
  "$bin/grpo-data" multiplication --output "$data" --seed 1 --min-digits 3 --max-digits 3 --teacher-tool-rate 0.45
  echo "== 2/4 sft: grpo-sft --config configs/quickstart-tools-sft.yaml"
  rm -rf "$sft_dir"
  "$bin/grpo-sft" --config configs/quickstart-tools-sft.yaml
  echo "== 3/4 grpo: grpo-run --config configs/quickstart-tools.yaml --config $preset $*"
  rm -rf "$run_dir"
  "$bin/grpo-run" --config configs/quickstart-tools.yaml --config "$preset" --set "run.output_dir=$run_dir" "$@"
  echo "== 4/4 eval: the SFT and the final checkpoint, greedy, calculator in the loop, on the same held-out problems"
  "$bin/grpo-eval" --config configs/quickstart-tools.yaml --log-level warn \
    --model "$sft_dir" --label "before (SFT)" --model "$run_dir" --label "after ($algo)" \
    --output "$run_dir/demo_eval.json" --samples "$run_dir/demo_eval_samples.jsonl"
  report
  exit 0
elif [ -n "${TASK:-}" ] && [ "${TASK}" != arithmetic ]; then
  echo "demo: TASK is '$TASK' (expected tools, or arithmetic / unset for the quickstart)" >&2
  exit 2
fi

echo "== 1/4 data: grpo-data arithmetic --output $data"
"$bin/grpo-data" arithmetic --output "$data" --seed 1

echo "== 2/4 sft: grpo-sft --config configs/quickstart-sft.yaml"
rm -rf "$sft_dir"
"$bin/grpo-sft" --config configs/quickstart-sft.yaml

echo "== 3/4 grpo: grpo-run --config configs/quickstart.yaml --config $preset ${lora_config[*]} ${reward_config[*]} $*"
rm -rf "$run_dir"
"$bin/grpo-run" --config configs/quickstart.yaml --config "$preset" "${lora_config[@]}" "${reward_config[@]}" \
  --set "run.output_dir=$run_dir" "$@"
eval_model=$run_dir
if [ ${#lora_config[@]} -gt 0 ]; then
  echo "== 3b/4 merge: grpo-export --merge $run_dir --output $run_dir/merged"
  "$bin/grpo-export" --merge "$run_dir" --output "$run_dir/merged"
  eval_model=$run_dir/merged
fi

echo "== 4/4 eval: the SFT and the final checkpoint, greedy, on the same held-out problems"
"$bin/grpo-eval" --config configs/quickstart.yaml --log-level warn \
  --model "$sft_dir" --label "before (SFT)" --model "$eval_model" --label "after ($algo${lora_config:+, LoRA})" \
  --output "$run_dir/demo_eval.json" --samples "$run_dir/demo_eval_samples.jsonl"

report
