#!/usr/bin/env python3
"""One GRPO step the way TRL's GRPOTrainer runs it without vLLM: the baseline half of
bench/gpu/run.sh (grpo_step_bench.cpp is ours), on the same device, shapes and seeds.

Why it is built this way:
  - TRL is not installed on the GPU machine (and needs no datasets or reward functions here), so
    its step is written out with what it calls: transformers' `generate` (do_sample, temperature
    T, top_k=0, top_p=1, min_new_tokens = max_new_tokens = N, so EOS never ends a sample) on
    each prompt repeated G times (TRL's RepeatSampler), left-padded; then, in micro-batches,
    the forward over prompt + completion with `logits_to_keep` (only completion positions reach
    the LM head), logits / T, TRL's `selective_log_softmax` and `entropy_from_logits` (no grad),
    the clipped surrogate with ratio exp(logp - logp.detach()) (num_iterations 1, beta 0), the
    "dapo" loss (sum over tokens / completion tokens of the whole batch), backward,
    clip_grad_norm_(1.0) and one fused AdamW step (transformers' default optimizer) per step.
  - Mixed precision as TRL with bf16=True on float32 weights: everything under
    torch.autocast(bf16). TRL generates with the training model, so generation under autocast
    is part of hf_step_s; generation on a bf16 copy of the model (weights copied in at each
    step, the copy not timed) is measured too, as the stronger decode baseline.
  - The model is Qwen2ForCausalLM(Qwen2Config from the config file), SDPA attention, init std
    0.02 from a fixed seed: nothing to download. Prompts and rewards come from splitmix64, bit
    for bit those of grpo_step_bench.cpp; advantages use our `grpo` estimator's formula.
  - Timing: the device is synchronized before every clock read; one warm-up step, then
    --repeats timed steps, medians.
  - The device's bf16 peak and memory bandwidth (for run.sh's MFU and bandwidth fraction) come
    from a table by device name, else are measured here (a large bf16 matmul, a large device
    copy), on the same device in the same run.

Prints details, then `name: value` lines: hf_decode_tokens_per_s_bf16,
hf_decode_tokens_per_s_autocast, hf_train_tokens_per_s, hf_step_s, hf_params, gpu_name,
peak_bf16_flops, peak_flops_source, mem_bandwidth_bytes_per_s, mem_bandwidth_source,
measured_bf16_flops (a large bf16 matmul timed in this run, whatever the table says).
"""
import argparse
import contextlib
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class SplitMix64:
    """grpo_step_bench.cpp's SplitMix64."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0**-53


def make_prompts(a, vocab):
    rng = SplitMix64(a.seed)
    span = a.max_prompt - a.min_prompt + 1
    prompts = []
    for _ in range(a.prompts):
        n = a.min_prompt + rng.next() % span
        prompts.append([rng.next() % vocab for _ in range(n)])
    return prompts


def grpo_advantages(a, step):
    rng = SplitMix64(((a.seed * 1000003) & MASK64) + step + 1)
    adv = []
    for _ in range(a.prompts):
        r = [rng.uniform() for _ in range(a.samples)]
        mean = sum(r) / len(r)
        sd = (sum((x - mean) ** 2 for x in r) / (len(r) - 1)) ** 0.5
        adv += [(x - mean) / (sd + 1e-6) for x in r]
    return adv


def selective_log_softmax(logits, index):
    """TRL's: log_softmax row by row for low-precision logits, gathered at `index`."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)
        return picked - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
    out = []
    for row_logits, row_labels in zip(logits, index):
        row_logps = F.log_softmax(row_logits, dim=-1)
        out.append(row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out)


def entropy_from_logits(logits, chunk_size=128):
    """TRL's: entropy per position, in chunks of rows."""
    flat = logits.reshape(-1, logits.size(-1))
    parts = []
    for chunk in flat.split(chunk_size, dim=0):
        logps = F.log_softmax(chunk, dim=-1)
        parts.append(-(torch.exp(logps) * logps).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops(device):
    """bf16 flop/s of one large matmul on random data (best of 10 after 2 warm-ups)."""
    n = 8192 if device.type == "cuda" else 512
    x = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    best = float("inf")
    for i in range(12):
        sync(device)
        t0 = time.perf_counter()
        x @ y
        sync(device)
        if i >= 2:
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best, f"measured (bf16 matmul {n}x{n}x{n}, best of 10)"


def peaks(device):
    """(bf16 flop/s, source), (bytes/s, source): a table by device name, else measured here."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    flops = bandwidth = None
    if "H200" in name:
        flops, bandwidth = (989e12, "table (H200)"), (4.8e12, "table (H200)")
    elif "H100" in name and ("SXM" in name or "HBM3" in name):
        flops, bandwidth = (989e12, "table (H100 SXM)"), (3.35e12, "table (H100 SXM)")
    elif "H100" in name and "PCIe" in name:
        flops = (756e12, "table (H100 PCIe)")
    elif "A100" in name:
        flops = (312e12, "table (A100)")
    if flops is None:
        flops = matmul_flops(device)
    if bandwidth is None:
        nbytes = (1 << 30) if device.type == "cuda" else (1 << 26)
        src = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        best = float("inf")
        for i in range(12):
            sync(device)
            t0 = time.perf_counter()
            dst.copy_(src)
            sync(device)
            if i >= 2:
                best = min(best, time.perf_counter() - t0)
        bandwidth = (2 * nbytes / best, f"measured (device copy of {nbytes >> 20} MiB, read + write, best of 10)")
    return name, flops, bandwidth


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--config", required=True, help="config.json (or its folder) of a Qwen2 model")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--min-prompt", type=int, default=32)
    p.add_argument("--max-prompt", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for flag, value, least in (("--prompts", a.prompts, 1), ("--samples", a.samples, 2), ("--new-tokens", a.new_tokens, 1),
                               ("--min-prompt", a.min_prompt, 1), ("--max-prompt", a.max_prompt, a.min_prompt),
                               ("--micro-batch", a.micro_batch, 1), ("--repeats", a.repeats, 1), ("--seed", a.seed, 0)):
        if value < least:
            p.error(f"{flag} must be >= {least}, got {value}")
    if not a.temperature > 0 or not a.lr > 0:
        p.error("--temperature and --lr must be > 0")
    try:
        device = torch.device(a.device)
    except RuntimeError:
        p.error(f"--device expects cpu, cuda or cuda:N, got {a.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {a.device}: this PyTorch sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        p.error(f"--device expects cpu, cuda or cuda:N, got {a.device!r}")

    from transformers import Qwen2Config, Qwen2ForCausalLM
    import transformers

    path = a.config if os.path.isfile(a.config) else os.path.join(a.config, "config.json")
    if not os.path.isfile(path):
        p.error(f"--config: no such file {path}")
    config = Qwen2Config.from_json_file(path)
    config.initializer_range = 0.02
    config._attn_implementation = "sdpa"
    if a.max_prompt + a.new_tokens > config.max_position_embeddings:
        p.error(f"--max-prompt + --new-tokens exceeds max_position_embeddings {config.max_position_embeddings}")
    torch.manual_seed(a.seed)
    model = Qwen2ForCausalLM(config).float().to(device)
    model.train()
    params = sum(t.numel() for t in model.parameters())
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, fused=True)
    except (RuntimeError, ValueError):
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    autocast = lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)  # noqa: E731

    eos = config.eos_token_id
    pad = config.pad_token_id if config.pad_token_id is not None else (eos if isinstance(eos, int) else 0)
    prompts = make_prompts(a, config.vocab_size)
    width = max(len(q) for q in prompts)
    rows = [q for q in prompts for _ in range(a.samples)]  # each prompt G times, as TRL's RepeatSampler
    prompt_ids = torch.tensor([[pad] * (width - len(q)) + q for q in rows], device=device)
    prompt_mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in rows], device=device)
    B, N = len(rows), a.new_tokens
    train_tokens = sum(len(q) for q in rows) + B * N
    print(f"hf: GRPO step as TRL without vLLM, transformers {transformers.__version__}, torch {torch.__version__}, "
          f"device {device}, {torch.get_num_threads()} CPU threads")
    print(f"  model: Qwen2ForCausalLM({path}), {params} parameters, sdpa, init std 0.02 (seed {a.seed}); "
          f"float32 weights under autocast(bf16), and a bf16 copy for generation")
    print(f"  workload: {a.prompts} prompts ({a.min_prompt}..{a.max_prompt} tokens, {sum(len(q) for q in prompts)} in all) "
          f"x {a.samples} samples x {N} new tokens, T={a.temperature}; micro-batches of {a.micro_batch}, "
          f"fused AdamW lr {a.lr}, clip 1.0", flush=True)

    def generate(m, step, under_autocast):
        torch.manual_seed(a.seed * 1000003 + step)
        with torch.no_grad(), (autocast() if under_autocast else contextlib.nullcontext()):
            out = m.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True, temperature=a.temperature,
                             top_k=0, top_p=1.0, min_new_tokens=N, max_new_tokens=N, pad_token_id=pad,
                             eos_token_id=eos, use_cache=True)
        completion = out[:, width:]
        if completion.shape[1] != N:
            raise SystemExit(f"generate returned {completion.shape[1]} new tokens, expected {N}")
        return completion

    def train(completion, step):
        adv = torch.tensor(grpo_advantages(a, step), device=device, dtype=torch.float32)
        ids = torch.cat([prompt_ids, completion], 1)
        mask = torch.cat([prompt_mask, torch.ones_like(completion)], 1)
        total_loss = 0.0
        for s in range(0, B, a.micro_batch):
            e = min(B, s + a.micro_batch)
            with autocast():
                logits = model(input_ids=ids[s:e], attention_mask=mask[s:e], logits_to_keep=N + 1).logits
                logits = logits[:, :-1, :] / a.temperature
                logps = selective_log_softmax(logits, completion[s:e])
                with torch.no_grad():
                    entropy_from_logits(logits)
                ratio = torch.exp(logps - logps.detach())
                A = adv[s:e].unsqueeze(1)
                per_token = -torch.min(ratio * A, torch.clamp(ratio, 0.8, 1.2) * A)
                loss = per_token.sum() / (B * N)
            loss.backward()
            total_loss += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total_loss, float(norm)

    steps = []
    for step in range(a.repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        completion = generate(model, step, True)
        sync(device)
        gen_autocast = time.perf_counter() - t0
        t1 = time.perf_counter()
        loss, norm = train(completion, step)
        sync(device)
        train_s = time.perf_counter() - t1
        step_s = time.perf_counter() - t0
        with torch.no_grad():  # the bf16 copy follows the trained weights (not timed)
            for dst, src in zip(model_bf16.parameters(), model.parameters()):
                dst.copy_(src)
        sync(device)
        t2 = time.perf_counter()
        generate(model_bf16, step, False)
        sync(device)
        gen_bf16 = time.perf_counter() - t2
        print(f"  {'warm-up' if step == 0 else 'timed  '} step: {step_s:.3f} s = generate (autocast) {gen_autocast:.3f} "
              f"+ train {train_s:.3f}; generate (bf16 copy) {gen_bf16:.3f} s; loss {loss:.4f}, grad norm {norm:.4f}",
              flush=True)
        if step > 0:
            steps.append((step_s, gen_autocast, train_s, gen_bf16))

    med = [statistics.median(x[i] for x in steps) for i in range(4)]
    name, (flops, flops_source), (bandwidth, bandwidth_source) = peaks(device)
    print(f"  medians of {a.repeats} timed steps: step {med[0]:.3f} s, generate (autocast) {med[1]:.3f} s, "
          f"train {med[2]:.3f} s, generate (bf16 copy) {med[3]:.3f} s")
    print(f"hf_decode_tokens_per_s_bf16: {B * N / med[3]:.1f}")
    print(f"hf_decode_tokens_per_s_autocast: {B * N / med[1]:.1f}")
    print(f"hf_train_tokens_per_s: {train_tokens / med[2]:.1f}")
    print(f"hf_step_s: {med[0]:.4f}")
    print(f"hf_params: {params}")
    print(f"gpu_name: {name}")
    print(f"peak_bf16_flops: {flops:.4g}")
    print(f"peak_flops_source: {flops_source}")
    print(f"mem_bandwidth_bytes_per_s: {bandwidth:.4g}")
    print(f"mem_bandwidth_source: {bandwidth_source}")
    # The rate a matmul reaches on this card in this run (an H200's datasheet says 989 TFLOP/s
    # dense; a large bf16 product on random data reaches ~790): run.sh's second MFU.
    print(f"measured_bf16_flops: {flops if flops_source.startswith('measured') else matmul_flops(device)[0]:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
