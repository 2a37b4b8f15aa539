#!/usr/bin/env bash
# LoRA checkpoints for scripts/peft_parity.py: grpo-sft trains a small LoRA adapter on a fixture
# model (tests/fixtures/models) for each case below and grpo-export --merge merges it. Training
# a few steps makes B non-zero, so a wrong scaling changes the merged weights. Each case folder
# gets base/, adapter/ (the trainer's checkpoint, as written) and merged/.
#
#   case                          base   targets         r  alpha  use_rslora  init      dropout
#   qwen2                         qwen2  all-linear      4  8      false       true      0
#   llama                         llama  q_proj, v_proj  2  16     true        true      0.1
#   qwen2_qv_rslora_gaussian      qwen2  q_proj, v_proj  4  8      true        gaussian  0
#   llama_all_linear_gaussian     llama  all-linear      2  4      false       gaussian  0
#
#   scripts/make-lora-parity-cases.sh BUILD_DIR OUT_DIR
#   scripts/make-lora-parity-cases.sh --sft GRPO_SFT --export GRPO_EXPORT OUT_DIR
#
# The second form names the binaries (ctest passes its targets' paths); the first takes
# BUILD_DIR/bin/grpo-sft and BUILD_DIR/bin/grpo-export. Environment: PYTHON (default python3)
# writes the data and tokenizers (standard library only); GRPO_LORA_DEVICE (default cpu) is the
# model.device grpo-sft trains on (scripts/gpu-check.sh: cuda).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage="usage: make-lora-parity-cases.sh BUILD_DIR OUT_DIR | --sft GRPO_SFT --export GRPO_EXPORT OUT_DIR"
sft="" export_bin="" positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sft) sft=${2:?$usage}; shift 2 ;;
    --export) export_bin=${2:?$usage}; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "make-lora-parity-cases.sh: unknown option $1; $usage" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
if [ ${#positional[@]} -eq 2 ]; then
  build=$(realpath "${positional[0]}")
  sft=${sft:-$build/bin/grpo-sft}
  export_bin=${export_bin:-$build/bin/grpo-export}
  out_arg=${positional[1]}
elif [ ${#positional[@]} -eq 1 ] && [ -n "$sft" ] && [ -n "$export_bin" ]; then
  out_arg=${positional[0]}
else
  echo "$usage" >&2
  exit 2
fi
for bin in "$sft" "$export_bin"; do
  [ -x "$bin" ] || { echo "make-lora-parity-cases.sh: $bin is not an executable (build grpo-sft and grpo-export first)" >&2; exit 1; }
done
sft=$(realpath "$sft")
export_bin=$(realpath "$export_bin")
PYTHON=${PYTHON:-python3}
device=${GRPO_LORA_DEVICE:-cpu}
out=$(realpath -m "$out_arg")
rm -rf "$out"
mkdir -p "$out"
cd "$out"
# Prompt + completion rows over the byte-level tokenizer below.
"$PYTHON" - <<'PY'
import json, random
random.seed(0)
with open("sft.jsonl", "w") as f:
    for _ in range(40):
        a, b = random.randint(10, 99), random.randint(10, 99)
        f.write(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n")
PY
cases=(qwen2 llama qwen2_qv_rslora_gaussian llama_all_linear_gaussian)
for name in "${cases[@]}"; do
  case "$name" in
    qwen2)
      model=qwen2
      lora=(--set model.lora.r=4 --set model.lora.lora_alpha=8 --set model.lora.target_modules=all-linear) ;;
    llama)
      model=llama
      lora=(--set model.lora.r=2 --set model.lora.lora_alpha=16 --set model.lora.use_rslora=true
            --set "model.lora.target_modules=[q_proj,v_proj]" --set model.lora.lora_dropout=0.1) ;;
    qwen2_qv_rslora_gaussian)
      model=qwen2
      lora=(--set model.lora.r=4 --set model.lora.lora_alpha=8 --set model.lora.use_rslora=true
            --set "model.lora.target_modules=[q_proj,v_proj]" --set model.lora.init_lora_weights=gaussian) ;;
    llama_all_linear_gaussian)
      model=llama
      lora=(--set model.lora.r=2 --set model.lora.lora_alpha=4 --set model.lora.target_modules=all-linear
            --set model.lora.init_lora_weights=gaussian) ;;
  esac
  mkdir -p "$name/base"
  cp "$ROOT/tests/fixtures/models/$model/config.json" "$ROOT/tests/fixtures/models/$model/model.safetensors" "$name/base/"
  # A byte-level BPE tokenizer (256 byte tokens + <|endoftext|>, no merges) that fits the fixtures' 300 ids.
  "$PYTHON" - "$name/base/tokenizer.json" <<'PY'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
symbol = dict(zip(bs, (chr(c) for c in cs)))  # GPT-2's bytes_to_unicode
level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                     "vocab": {symbol[b]: b for b in range(256)}, "merges": []}},
          open(sys.argv[1], "w"), ensure_ascii=False)
PY
  "$sft" --set "model.path=$name/base" --set tokenizer.chat_template=none --set "data.train=[sft.jsonl]" \
    --set "run.output_dir=$name/run" --set sft.steps=8 --set sft.batch_size=8 --set train.learning_rate=2e-2 \
    --set train.pack_length=64 --set "model.device=$device" "${lora[@]}" --log-level warn
  cp -r "$name/run/checkpoints/step_000008" "$name/adapter"
  "$export_bin" --merge "$name/adapter" --base "$name/base" --output "$name/merged"
done
echo "cases in $out: ${cases[*]}"
