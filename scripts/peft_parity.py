#!/usr/bin/env python3
"""PEFT parity of grpo-cpp's LoRA files (docs/lora.md), with Hugging Face's own libraries.

Needs torch, transformers and peft (pip install torch transformers peft): run where they are,
e.g. on the GPU machine of scripts/gpu-check.sh. For each CASE folder given, which holds
  base/      the base model (a Hugging Face folder grpo-cpp trained from),
  adapter/   a LoRA checkpoint grpo-cpp wrote (adapter_config.json, adapter_model.safetensors),
  merged/    what `grpo-export --merge adapter` wrote,
it checks that
  1. PEFT loads the adapter (LoraConfig.from_pretrained, PeftModel.from_pretrained) and every
     adapter tensor lands (no missing or unexpected keys);
  2. PEFT's base + adapter logits equal transformers' logits of grpo-cpp's merged folder
     (so PEFT reads our adapter exactly as our merge applies it), max |diff| <= 1e-4;
  3. PEFT's merge_and_unload() weights equal the merged folder's, max |diff| <= 1e-5;
  4. PEFT's own save_pretrained of the loaded adapter writes the same adapter_config.json keys
     and values (target_modules as a set; base_model_name_or_path aside) and the same tensor
     names as grpo-cpp did.
With --fixtures it also loads the committed PEFT-format examples of tests/fixtures/lora/ with
PEFT over their fixture base models and compares PEFT's logits with the independent float64
reference stored beside them (max |diff| <= 1e-4): PEFT itself confirms the reference the C++
tests are held to.
Prints one line per check and exits non-zero when one fails.

  python3 scripts/peft_parity.py [CASE...] [--fixtures] [--device cuda|cpu]
"""
import argparse
import json
import os
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    import transformers
    import peft
    from peft import LoraConfig, PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    device = args.device if (args.device != "cuda" or torch.cuda.is_available()) else "cpu"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, device {device}")
    failures = []

    def check(name, ok, detail):
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failures.append(name)

    if args.fixtures:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
        for folder, model_name in (("qwen2_all_linear", "qwen2"), ("llama_rslora_qv", "llama")):
            adapter_dir = os.path.join(root, "lora", folder)
            ref = load_file(os.path.join(adapter_dir, "reference.safetensors"))
            base = AutoModelForCausalLM.from_pretrained(os.path.join(root, "models", model_name), torch_dtype=torch.float32)
            model = PeftModel.from_pretrained(base.to(device), adapter_dir).to(device).eval()
            with torch.no_grad():
                logits = model(input_ids=ref["input_ids"].view(1, -1).to(device)).logits[0].float().cpu()
            d = (logits - ref["logits"]).abs().max().item()
            check(f"fixture {folder}: PEFT logits == independent reference", d <= 1e-4, f"max |diff| {d:.3g}")

    for case in args.cases:
        base_dir, adapter_dir, merged_dir = (os.path.join(case, d) for d in ("base", "adapter", "merged"))
        tag = os.path.basename(os.path.normpath(case))
        config = LoraConfig.from_pretrained(adapter_dir)
        check(f"{tag} LoraConfig.from_pretrained", config.peft_type == peft.PeftType.LORA,
              f"r={config.r} lora_alpha={config.lora_alpha} target_modules={sorted(config.target_modules)}")

        base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).to(device).eval()
        model = PeftModel.from_pretrained(base, adapter_dir).to(device).eval()
        saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
        loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        # PEFT's in-memory keys carry the adapter name ("...lora_A.default.weight"); the files do not.
        in_memory = {k.replace(".default.", "."): v for k, v in loaded.items()}
        same_keys = set(in_memory) == set(saved)
        max_diff = max((in_memory[k].float().cpu() - saved[k].float()).abs().max().item() for k in saved) if same_keys else float("nan")
        check(f"{tag} adapter tensors land", same_keys and max_diff == 0.0,
              f"{len(saved)} tensors, keys equal: {same_keys}, max |diff| {max_diff}")

        vocab = base.config.vocab_size
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (3, 17), generator=g).to(device)
        merged = AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float32).to(device).eval()
        with torch.no_grad():
            peft_logits = model(input_ids=ids).logits.float()
            merged_logits = merged(input_ids=ids).logits.float()
        d = (peft_logits - merged_logits).abs().max().item()
        check(f"{tag} PEFT base+adapter logits == grpo-export merged logits", d <= 1e-4, f"max |diff| {d:.3g}")

        unloaded = model.merge_and_unload()
        ours = merged.state_dict()
        worst = 0.0
        for k, v in unloaded.state_dict().items():
            if k in ours:
                worst = max(worst, (v.float() - ours[k].float()).abs().max().item())
        check(f"{tag} merge_and_unload weights == grpo-export weights", worst <= 1e-5, f"max |diff| {worst:.3g}")

        # PEFT's own writer on the same adapter: same config keys/values and tensor names.
        base2 = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
        model2 = PeftModel.from_pretrained(base2, adapter_dir)
        with tempfile.TemporaryDirectory() as tmp:
            model2.save_pretrained(tmp)
            theirs = json.load(open(os.path.join(tmp, "adapter_config.json")))
            ours_cfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
            for j in (theirs, ours_cfg):
                j["target_modules"] = sorted(j["target_modules"]) if isinstance(j["target_modules"], list) else j["target_modules"]
                j.pop("base_model_name_or_path", None)
            # Keys a newer PEFT adds are listed, not failed: the committed fixture pins v0.17.1's set.
            added = sorted(set(theirs) - set(ours_cfg))
            missing = sorted(set(ours_cfg) - set(theirs))
            differing = sorted(k for k in set(theirs) & set(ours_cfg) if theirs[k] != ours_cfg[k])
            check(f"{tag} adapter_config.json vs PEFT {peft.__version__}'s save_pretrained", not missing and not differing,
                  f"keys only ours: {missing}, values differing: {[(k, ours_cfg[k], theirs[k]) for k in differing]}, "
                  f"keys only PEFT's: {added}")
            their_names = set(load_file(os.path.join(tmp, "adapter_model.safetensors")))
            check(f"{tag} tensor names vs PEFT's save_pretrained", their_names == set(saved),
                  f"{len(their_names)} names, equal: {their_names == set(saved)}")

    print("peft parity: " + ("all checks passed" if not failures else "FAILED: " + ", ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
