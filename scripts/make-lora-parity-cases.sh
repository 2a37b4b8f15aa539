#!/usr/bin/env bash
# LoRA checkpoints for scripts/peft_parity.py: grpo-sft trains a small LoRA adapter on each of
# two fixture models (tests/fixtures/models: qwen2 with all-linear r 4; llama with q_proj/v_proj,
# r 2, rsLoRA, dropout 0.1) and grpo-export --merge merges it. Each case folder gets base/,
# adapter/ (the trainer's checkpoint, as written) and merged/.
#
#   scripts/make-lora-parity-cases.sh BUILD_DIR OUT_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(realpath "${1:?usage: make-lora-parity-cases.sh BUILD_DIR OUT_DIR}")
out=$(realpath -m "${2:?usage: make-lora-parity-cases.sh BUILD_DIR OUT_DIR}")
rm -rf "$out"
mkdir -p "$out"
cd "$out"
# Prompt + completion rows over the byte-level tokenizer below.
python3 - <<'PY'
import json, random
random.seed(0)
with open("sft.jsonl", "w") as f:
    for _ in range(40):
        a, b = random.randint(10, 99), random.randint(10, 99)
        f.write(json.dumps({"prompt": f"{a}+{b}=", "completion": str(a + b)}) + "\n")
PY
for model in qwen2 llama; do
  mkdir -p "$model/base"
  cp "$ROOT/tests/fixtures/models/$model/config.json" "$ROOT/tests/fixtures/models/$model/model.safetensors" "$model/base/"
  # A byte-level BPE tokenizer (256 byte tokens + <|endoftext|>, no merges) that fits the fixtures' 300 ids.
  python3 - "$model/base/tokenizer.json" <<'PY'
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
  if [ "$model" = qwen2 ]; then
    lora=(--set model.lora.r=4 --set model.lora.lora_alpha=8 --set model.lora.target_modules=all-linear)
  else
    lora=(--set model.lora.r=2 --set model.lora.lora_alpha=16 --set model.lora.use_rslora=true
          --set "model.lora.target_modules=[q_proj,v_proj]" --set model.lora.lora_dropout=0.1)
  fi
  "$build/bin/grpo-sft" --set "model.path=$model/base" --set tokenizer.chat_template=none --set "data.train=[sft.jsonl]" \
    --set "run.output_dir=$model/run" --set sft.steps=8 --set sft.batch_size=8 --set train.learning_rate=2e-2 \
    --set train.pack_length=64 "${lora[@]}" --log-level warn
  cp -r "$model/run/checkpoints/step_000008" "$model/adapter"
  "$build/bin/grpo-export" --merge "$model/adapter" --base "$model/base" --output "$model/merged"
done
echo "cases in $out: qwen2 llama"
