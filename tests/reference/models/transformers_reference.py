#!/usr/bin/env python3
"""transformers' own outputs for every fixture model, in the layout of the fixtures' references.

The model tests (tests/model) hold grpo-cpp's decoder to `reference.safetensors` of each
folder in tests/fixtures/models, written by an independent float64 implementation
(docs/model-fixtures.md). This script writes the same keys from Hugging Face transformers
itself, so that the same tests run a second time against the real implementation
(`Transformers/*` instances, ctest label `reference`). Those tests load the model that
transformers itself saved: its current config format (transformers 5 writes `rope_parameters`
and `dtype` where the fixtures have transformers 4's `rope_theta`/`rope_scaling`/`torch_dtype`)
and its weight layout, which is what a checkpoint saved today looks like.

  OUT/<model>/model/             config.json + model.safetensors from save_pretrained of the
                                 fixture as transformers loaded it; the outputs below are
                                 computed by transformers from this folder, loaded back
  OUT/<model>/reference.safetensors
    seq.{k}.input_ids, long.input_ids, greedy.prompt_ids   copied from the fixture
    seq.{k}.logits, long.logits   F32 [L, vocab]  AutoModelForCausalLM, float32, CPU, eager
                                                  attention, each sequence on its own
    greedy.ids                    I64 [n]         greedy continuation: argmax of a full forward
                                                  per step (no cache), never stopping at EOS
    seq.{k}.router.{l}.experts    I64 [L, top_k]  MoE: experts torch.topk picks from the softmax
                                                  of transformers' router logits of layer l
    seq.{k}.router_aux_loss       F32 [1]         MoE: transformers' load_balancing_loss_func
                                                  over those router logits (not times the coef)
  OUT/qwen2_rm/reference.safetensors (AutoModelForSequenceClassification)
    seq.{k}.scores F32 [1], rm.scores F32 [B]     with rm.input_ids / rm.attention_mask copied

Loading must be exact: a missing or unexpected weight (which transformers would initialise at
random or drop) is an error, as is any output that is not finite. Every file is written to a
temporary name and renamed, so a test never reads half a file.

    python tests/reference/models/transformers_reference.py --out build/reference/transformers
"""

import argparse
import os
import shutil
import sys

# No hub, no progress bars: everything is local and the output is read in ctest logs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "models")
CAUSAL = ["qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3", "phi3", "olmo2", "qwen2_moe", "qwen3_moe",
          "llama_dynamic"]
REWARD = ["qwen2_rm"]


def fail(message):
    print(f"transformers_reference: {message}", file=sys.stderr)
    sys.exit(1)


def load(cls, folder, torch):
    model, info = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True, local_files_only=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        fail(f"{folder}: transformers did not load the checkpoint exactly: {bad}")
    return model.eval()


def resave(cls, name, out, torch):
    """The fixture saved by transformers into OUT/<name>/model, loaded back from there."""
    folder = os.path.join(out, name, "model")
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    load(cls, os.path.join(FIXTURES, name), torch).save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return load(cls, folder, torch)


def causal_reference(name, out_dir, torch, transformers):
    from safetensors.torch import load_file
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    fixture = load_file(os.path.join(FIXTURES, name, "reference.safetensors"))
    model = resave(transformers.AutoModelForCausalLM, name, out_dir, torch)
    cfg = model.config
    moe = getattr(cfg, "num_experts", 0) or 0
    out = {}
    with torch.no_grad():
        keys = sorted(k[: -len(".input_ids")] for k in fixture if k.endswith(".input_ids"))
        for key in keys:
            ids = fixture[key + ".input_ids"]
            kwargs = {"output_router_logits": True} if moe else {}
            result = model(input_ids=ids[None], use_cache=False, **kwargs)
            out[key + ".input_ids"] = ids
            out[key + ".logits"] = result.logits[0].float().contiguous()
            if moe and key.startswith("seq."):
                # One router-logit tensor per MoE layer, in layer order ([L, experts] each).
                sparse = [l for l in range(cfg.num_hidden_layers)
                          if l not in (cfg.mlp_only_layers or []) and (l + 1) % cfg.decoder_sparse_step == 0]
                routers = [r for r in result.router_logits if r is not None]
                if len(routers) != len(sparse):
                    fail(f"{name}: {len(routers)} router outputs for MoE layers {sparse}")
                for layer, logits in zip(sparse, routers):
                    chosen = torch.topk(torch.softmax(logits.float(), -1), cfg.num_experts_per_tok, -1).indices
                    out[f"{key}.router.{layer}.experts"] = chosen.to(torch.int64).contiguous()
                aux = load_balancing_loss_func(tuple(routers), cfg.num_experts, cfg.num_experts_per_tok, None)
                out[f"{key}.router_aux_loss"] = aux.float().reshape(1)
        prompt = fixture["greedy.prompt_ids"]
        ids = prompt.clone()
        for _ in range(fixture["greedy.ids"].numel()):
            nxt = model(input_ids=ids[None], use_cache=False).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1)])
        out["greedy.prompt_ids"] = prompt
        out["greedy.ids"] = ids[prompt.numel():].contiguous()
    return out


def reward_reference(name, out_dir, torch, transformers):
    from safetensors.torch import load_file

    fixture = load_file(os.path.join(FIXTURES, name, "reference.safetensors"))
    model = resave(transformers.AutoModelForSequenceClassification, name, out_dir, torch)
    out = {}
    with torch.no_grad():
        for key in sorted(k[: -len(".input_ids")] for k in fixture if k.startswith("seq.") and k.endswith(".input_ids")):
            ids = fixture[key + ".input_ids"]
            out[key + ".input_ids"] = ids
            out[key + ".scores"] = model(input_ids=ids[None]).logits[0].float().contiguous()
        ids, mask = fixture["rm.input_ids"], fixture["rm.attention_mask"]
        out["rm.input_ids"], out["rm.attention_mask"] = ids, mask
        # transformers scores the last non-pad token: its pad_token_id must be the fixture's
        # padding (right padding with pad id 0), as the score head's docs require.
        out["rm.scores"] = model(input_ids=ids, attention_mask=mask).logits[:, 0].float().contiguous()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write <model>/reference.safetensors into")
    ap.add_argument("--models", nargs="*", help="only these fixtures (default: all)")
    args = ap.parse_args()
    try:
        import torch
        import transformers
        from safetensors.torch import save_file
    except ImportError as e:
        fail(f"{e}: run scripts/install-deps.sh (it makes .venv/ with torch and transformers)")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # deterministic summation order, and ctest runs tests side by side
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    names = args.models or CAUSAL + REWARD
    for name in names:
        if name not in CAUSAL + REWARD:
            fail(f"unknown fixture '{name}' (expected one of {', '.join(CAUSAL + REWARD)})")
        make = reward_reference if name in REWARD else causal_reference
        tensors = make(name, args.out, torch, transformers)
        for key, t in tensors.items():
            if t.is_floating_point() and not torch.isfinite(t).all():
                fail(f"{name}: {key} is not finite")
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "reference.safetensors")
        save_file(tensors, path + ".tmp", metadata={"format": "pt", "transformers": transformers.__version__})
        os.replace(path + ".tmp", path)
        print(f"{name}: {len(tensors)} tensors -> {path}")


if __name__ == "__main__":
    main()
