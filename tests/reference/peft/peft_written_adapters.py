#!/usr/bin/env python3
"""Adapters that PEFT itself writes load in grpo-cpp (docs/lora.md, "an adapter PEFT wrote").

For each case below, PEFT (get_peft_model over a fixture base of tests/fixtures/models) builds a
LoRA model, every lora_A and lora_B is set to random non-zero values from a fixed seed (PEFT's
own init leaves B at zero, which would hide a wrong scaling), and PEFT's save_pretrained writes
the adapter folder. PEFT then gives the references: its base + adapter logits and its
merge_and_unload() weights. grpo-export --merge ADAPTER --base FIXTURE reads that folder, and
  1. its merged weights equal PEFT's merge_and_unload() weights, max |diff| <= 1e-5 (every
     weight, adapted or not, under the same names);
  2. transformers' logits of its merged folder equal PEFT's base + adapter logits,
     max |diff| <= 1e-4.
float32 on the CPU. Prints one line per check and exits non-zero when one fails.

  python tests/reference/peft/peft_written_adapters.py --export GRPO_EXPORT --out DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

# name, fixture base, LoraConfig keys. Between them: all seven decoder linears and q/v only,
# use_rslora on and off, init_lora_weights true and "gaussian" (the value PEFT writes must load).
CASES = (
    ("qwen2_all_linear", "qwen2", dict(r=4, lora_alpha=8, target_modules="all-linear", use_rslora=False, init_lora_weights=True)),
    ("llama_qv_rslora_gaussian", "llama",
     dict(r=2, lora_alpha=16, target_modules=["q_proj", "v_proj"], use_rslora=True, init_lora_weights="gaussian")),
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", required=True, help="the grpo-export binary")
    ap.add_argument("--out", required=True, help="a folder for the adapters and merges (emptied first)")
    args = ap.parse_args()
    if not (os.path.isfile(args.export) and os.access(args.export, os.X_OK)):
        ap.error(f"--export {args.export}: not an executable (build grpo-export)")

    try:
        import torch
        import transformers
        import peft
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"peft_written_adapters: {e} under {sys.executable}: run scripts/install-deps.sh (the pinned .venv/)",
              file=sys.stderr)
        return 1
    transformers.utils.logging.disable_progress_bar()

    def load_causal_lm(path):
        # transformers renamed torch_dtype to dtype in 4.56 and warns about the old name since.
        key = "dtype" if tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2]) >= (4, 56) else "torch_dtype"
        return AutoModelForCausalLM.from_pretrained(path, **{key: torch.float32}).eval()

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, device cpu")
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    failures = []

    def check(name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failures.append(name)

    for tag, fixture, lora in CASES:
        base_dir = os.path.join(ROOT, "tests", "fixtures", "models", fixture)
        adapter_dir, merged_dir = os.path.join(out, tag, "adapter"), os.path.join(out, tag, "merged")
        model = get_peft_model(load_causal_lm(base_dir), LoraConfig(task_type="CAUSAL_LM", **lora)).eval()
        g = torch.Generator().manual_seed(1234)
        adapters = sorted((n, p) for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n)
        with torch.no_grad():
            for _, p in adapters:
                # 0.1 keeps B A of the order of the fixtures' weights: visible, logits still tame.
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        model.save_pretrained(adapter_dir)

        ids = torch.randint(0, model.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            peft_logits = model(input_ids=ids).logits.float()
        peft_merged = model.merge_and_unload().state_dict()
        adapted = sum(1 for n, _ in adapters if ".lora_A." in n)

        run = subprocess.run([args.export, "--merge", adapter_dir, "--base", base_dir, "--output", merged_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(f"{tag} grpo-export --merge of PEFT's adapter ({adapted} adapted weights, r={lora['r']}, "
              f"use_rslora={lora['use_rslora']}, init_lora_weights={lora['init_lora_weights']})",
              run.returncode == 0, f"exit {run.returncode}: {run.stdout.strip()}")
        if run.returncode != 0:
            continue

        ours = load_causal_lm(merged_dir)
        ours_state = ours.state_dict()
        same_names = set(ours_state) == set(peft_merged)
        worst = max((ours_state[k].float() - v.float()).abs().max().item() for k, v in peft_merged.items() if k in ours_state)
        check(f"{tag} grpo-export merged weights == PEFT merge_and_unload", same_names and worst <= 1e-5,
              f"{len(peft_merged)} weights, names equal: {same_names}, max |diff| {worst:.3g}")
        with torch.no_grad():
            d = (ours(input_ids=ids).logits.float() - peft_logits).abs().max().item()
        check(f"{tag} transformers on grpo-export merged == PEFT base+adapter logits", d <= 1e-4, f"max |diff| {d:.3g}")

    print("peft-written adapters: " + ("all checks passed" if not failures else "FAILED: " + ", ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
