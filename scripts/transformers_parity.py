#!/usr/bin/env python3
"""Logits parity: Hugging Face transformers against grpo's decoder on a fixture model.

Our logits come from the C++ side: with GRPO_PARITY_OUT=<dir>, the GoogleTest
TransformersParity.DumpOurLogitsForTheFixtures (tests/gpu/test_transformers_dump.cpp)
writes <dir>/<model>.safetensors holding `<key>.input_ids` (int64 [L]) and
`<key>.logits` (float32 [L, vocab]) for the token ids stored in the fixture's
reference.safetensors (key = seq.0 .. seq.3, long), computed on cuda:0 in float32.
This script loads the same fixture folder with transformers' AutoModelForCausalLM
in float32 on --device, runs the same ids, and prints max |diff| per sequence.

    GRPO_PARITY_OUT=build-gpu/parity build-gpu/bin/grpo_gpu_tests \\
        --gtest_filter='TransformersParity.*'
    python3 scripts/transformers_parity.py --model qwen2 qwen3 --ours build-gpu/parity

Exit status: 0 when every sequence is within --tol, 1 when one is not, 2 when
something is missing (packages, files, the device).

The default tolerance, 1e-3 absolute on logits, is for float32 on both sides with
TF32 off: the two implementations then differ only in kernels and summation
order, ~1e-5 on these logits (|logit| <= ~6; docs/model-fixtures.md measures
8e-6 between float32 and float64). A real difference in the model (rotary,
norms, biases, the attention mask) shows as 1e-2 and more.

Needs torch, transformers and safetensors (pip install torch transformers).
"""

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FIXTURES = os.path.join(REPO, "tests", "fixtures", "models")
IDS_SUFFIX = ".input_ids"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, nargs="+",
                    help="fixture names (qwen2 qwen3 llama mistral gemma2 ...): one process compares them all")
    ap.add_argument("--ours", required=True,
                    help="the folder GRPO_PARITY_OUT named (holds <model>.safetensors)")
    ap.add_argument("--fixtures", default=DEFAULT_FIXTURES,
                    help="folder of the fixture models (default: tests/fixtures/models)")
    ap.add_argument("--device", default="cuda", help="where transformers runs: cuda (default), cuda:N or cpu")
    ap.add_argument("--tol", type=float, default=1e-3, help="max |logit diff| allowed (default 1e-3)")
    return ap.parse_args(argv)


def fail_setup(message):
    print(f"transformers_parity: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
        import transformers
        from safetensors import safe_open
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail_setup(f"{e}; needs torch, transformers and safetensors (pip install torch transformers)")

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        fail_setup(f"--device {args.device}, but torch {torch.__version__} sees no CUDA device")
    # Plain float32 on both sides: no TF32 in matmuls (LibTorch's default is off too).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failed = [m for m in args.model if compare(m, args, torch, transformers, device) != 0]
    print(f"transformers_parity: {len(args.model) - len(failed)} of {len(args.model)} models within {args.tol:g}"
          + (f"; FAILED: {' '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def compare(name, args, torch, transformers, device):
    """Exit-status-like: 0 when every sequence of fixture `name` is within --tol."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    folder = os.path.join(args.fixtures, name)
    ours_path = os.path.join(args.ours, name + ".safetensors")
    for path in (os.path.join(folder, "config.json"), ours_path):
        if not os.path.exists(path):
            fail_setup(f"{path} does not exist")
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", output_loading_info=True, **{dtype_kw: torch.float32})
    if info["missing_keys"] or info["unexpected_keys"]:
        fail_setup(f"{folder}: transformers loaded it with missing {info['missing_keys']} "
                   f"and unexpected {info['unexpected_keys']} weights")
    model.to(device).eval()

    ours = load_file(ours_path)
    with safe_open(ours_path, framework="pt") as f:
        meta = f.metadata() or {}
    keys = sorted(k[: -len(IDS_SUFFIX)] for k in ours if k.endswith(IDS_SUFFIX))
    if not keys:
        fail_setup(f"{ours_path} holds no <key>.input_ids tensors")
    print(f"{name}: transformers {transformers.__version__} on {device} (float32, eager) "
          f"vs grpo on {meta.get('device', '?')} ({meta.get('dtype', '?')})")

    worst = 0.0
    with torch.no_grad():
        for key in keys:
            ids = ours[key + IDS_SUFFIX].to(torch.long)
            theirs = model(input_ids=ids[None].to(device), use_cache=False).logits[0].float().cpu()
            mine = ours[key + ".logits"].float()
            if theirs.shape != mine.shape:
                print(f"  {key}: shape {tuple(mine.shape)} (grpo) vs {tuple(theirs.shape)} (transformers)")
                worst = float("inf")
                continue
            diff = (theirs - mine).abs().max().item()
            same_argmax = torch.equal(theirs.argmax(-1), mine.argmax(-1))
            print(f"  {key}: {ids.numel()} tokens, max |logit diff| {diff:.3e}, argmax equal: {same_argmax}")
            worst = max(worst, diff)
    ok = worst <= args.tol
    print(f"{name}: max |logit diff| {worst:.3e} (tolerance {args.tol:g}): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
