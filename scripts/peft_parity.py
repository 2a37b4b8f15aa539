#!/usr/bin/env python3
"""PEFT parity of grpo-cpp's LoRA files (docs/lora.md), with Hugging Face's own libraries.

Needs torch, transformers and peft (pip install torch transformers peft, or the pinned .venv/ of
scripts/install-deps.sh): run where they are, on the GPU machine of scripts/gpu-check.sh
(--device cuda) or on the CPU (--device cpu, the ctest reference.peft.ours_in_peft). For each CASE
folder given (scripts/make-lora-parity-cases.sh writes them), which holds
  base/      the base model (a Hugging Face folder grpo-cpp trained from),
  adapter/   a LoRA checkpoint grpo-cpp wrote (adapter_config.json, adapter_model.safetensors),
  merged/    what `grpo-export --merge adapter` wrote,
it checks that
  1. PEFT loads the adapter (LoraConfig.from_pretrained, PeftModel.from_pretrained) and every
     adapter tensor lands (no missing or unexpected keys); every lora_B is non-zero (a trained
     adapter: with B = 0 a wrong scaling would go unseen);
  2. PEFT's base + adapter logits equal transformers' logits of grpo-cpp's merged folder
     (so PEFT reads our adapter exactly as our merge applies it), max |diff| <= 1e-4;
  3. PEFT's merge_and_unload() weights equal the merged folder's, max |diff| <= 1e-5, and the
     adapter moves them from the base by at least 1e-3 (so that comparison can fail);
  4. PEFT's own save_pretrained of the loaded adapter writes the same adapter_config.json keys
     and values (target_modules as a set; base_model_name_or_path aside) and the same tensor
     names as grpo-cpp did.
With --fixtures it also loads the committed PEFT-format examples of tests/fixtures/lora/ with
PEFT over their fixture base models and compares PEFT's logits with the independent float64
reference stored beside them (max |diff| <= 1e-4): PEFT itself confirms the reference the C++
tests are held to.
With --require-coverage the CASEs together must span both target sets (q_proj/v_proj only, and
all seven decoder linears), use_rslora on and off, and init_lora_weights true and "gaussian", as
PEFT reads them from the adapters, so a case that silently lost a setting fails.
Prints one line per check and exits non-zero when one fails.

  python3 scripts/peft_parity.py [CASE...] [--fixtures] [--device cuda|cpu] [--require-coverage]
"""
import argparse
import json
import os
import re
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--require-coverage", action="store_true")
    args = ap.parse_args()
    for case in args.cases:
        for d in ("base", "adapter", "merged"):
            if not os.path.isdir(os.path.join(case, d)):
                ap.error(f"{case}: no {d}/ folder (a case is what scripts/make-lora-parity-cases.sh writes)")

    try:
        import torch
        import transformers
        import peft
        from peft import LoraConfig, PeftModel
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"peft parity: {e} under {sys.executable}: run scripts/install-deps.sh (the pinned .venv/) "
              "or pip install torch transformers peft safetensors", file=sys.stderr)
        return 1
    transformers.utils.logging.disable_progress_bar()

    def load_causal_lm(path):
        # transformers renamed torch_dtype to dtype in 4.56 and warns about the old name since.
        key = "dtype" if tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2]) >= (4, 56) else "torch_dtype"
        return AutoModelForCausalLM.from_pretrained(path, **{key: torch.float32})

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
            base = load_causal_lm(os.path.join(root, "models", model_name))
            model = PeftModel.from_pretrained(base.to(device), adapter_dir).to(device).eval()
            with torch.no_grad():
                logits = model(input_ids=ref["input_ids"].view(1, -1).to(device)).logits[0].float().cpu()
            d = (logits - ref["logits"]).abs().max().item()
            check(f"fixture {folder}: PEFT logits == independent reference", d <= 1e-4, f"max |diff| {d:.3g}")

    covered = []  # (case, target_modules, use_rslora, init_lora_weights) as PEFT read them
    for case in args.cases:
        base_dir, adapter_dir, merged_dir = (os.path.join(case, d) for d in ("base", "adapter", "merged"))
        tag = os.path.basename(os.path.normpath(case))
        config = LoraConfig.from_pretrained(adapter_dir)
        check(f"{tag} LoraConfig.from_pretrained", config.peft_type == peft.PeftType.LORA,
              f"r={config.r} lora_alpha={config.lora_alpha} use_rslora={config.use_rslora} "
              f"init_lora_weights={config.init_lora_weights} target_modules={sorted(config.target_modules)}")
        covered.append((tag, frozenset(config.target_modules), config.use_rslora, config.init_lora_weights))

        base = load_causal_lm(base_dir).to(device).eval()
        model = PeftModel.from_pretrained(base, adapter_dir).to(device).eval()
        saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
        loaded = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        # PEFT's in-memory keys carry the adapter name ("...lora_A.default.weight"); the files do not.
        in_memory = {k.replace(".default.", "."): v for k, v in loaded.items()}
        same_keys = set(in_memory) == set(saved)
        max_diff = max((in_memory[k].float().cpu() - saved[k].float()).abs().max().item() for k in saved) if same_keys else float("nan")
        check(f"{tag} adapter tensors land", same_keys and max_diff == 0.0,
              f"{len(saved)} tensors, keys equal: {same_keys}, max |diff| {max_diff}")
        zero_b = sorted(k for k, v in saved.items() if ".lora_B." in k and not v.abs().max().item() > 0)
        check(f"{tag} every lora_B is non-zero", not zero_b and any(".lora_B." in k for k in saved),
              f"all-zero lora_B: {zero_b[:3]}{' ...' if len(zero_b) > 3 else ''}")

        vocab = base.config.vocab_size
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (3, 17), generator=g).to(device)
        merged = load_causal_lm(merged_dir).to(device).eval()
        with torch.no_grad():
            peft_logits = model(input_ids=ids).logits.float()
            merged_logits = merged(input_ids=ids).logits.float()
        d = (peft_logits - merged_logits).abs().max().item()
        check(f"{tag} PEFT base+adapter logits == grpo-export merged logits", d <= 1e-4, f"max |diff| {d:.3g}")

        unloaded = model.merge_and_unload().state_dict()
        ours = merged.state_dict()
        same_names = set(unloaded) == set(ours)
        worst = max((unloaded[k].float() - ours[k].float()).abs().max().item() for k in unloaded if k in ours)
        check(f"{tag} merge_and_unload weights == grpo-export weights", same_names and worst <= 1e-5,
              f"{len(unloaded)} weights, names equal: {same_names}, max |diff| {worst:.3g}")
        # The comparison above only means something if the adapter moves the weights well past 1e-5.
        # (the base is read again on the CPU; the merged model may sit on the device)
        before = load_causal_lm(base_dir).state_dict()
        moved = max((ours[k].float().cpu() - before[k].float()).abs().max().item() for k in before if k in ours)
        check(f"{tag} the adapter moves the merged weights", moved >= 1e-3, f"max |merged - base| {moved:.3g}")

        # PEFT's own writer on the same adapter: same config keys/values and tensor names.
        base2 = load_causal_lm(base_dir)
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

    if args.require_coverage:
        qv, all_linear = {"q_proj", "v_proj"}, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
        wanted = {"targets q_proj/v_proj": lambda c: c[1] == qv, "targets all seven linears": lambda c: c[1] == all_linear,
                  "use_rslora true": lambda c: c[2] is True, "use_rslora false": lambda c: c[2] is False,
                  "init_lora_weights true": lambda c: c[3] is True, "init_lora_weights gaussian": lambda c: c[3] == "gaussian"}
        missing = [w for w, hit in wanted.items() if not any(hit(c) for c in covered)]
        check("coverage of the cases", not missing,
              f"missing: {missing}" if missing else "; ".join(f"{w}: {[c[0] for c in covered if hit(c)]}" for w, hit in wanted.items()))

    print("peft parity: " + ("all checks passed" if not failures else "FAILED: " + ", ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
