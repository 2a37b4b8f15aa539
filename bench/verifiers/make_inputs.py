#!/usr/bin/env python3
"""Makes the workloads of grpo_bench_verifiers (bench/verifiers/data/*.jsonl) from public
benchmark files, in grpo-verify's input format ({"completion", "ground_truth", "verifier"}):

  math.jsonl    MATH-500 (PRM800K split of Hendrycks MATH, MIT): reference solution vs answer
  gsm8k.jsonl   GSM8K test (openai/grade-school-math, MIT): reference solution vs final number
  code.jsonl    HumanEval (openai/human-eval, MIT): canonical solution in a ```python block
  ifeval.jsonl  IFEval (google-research, Apache-2.0): GPT-4 responses with their instructions
  mbpp.jsonl    MBPP (google-research, CC-BY-4.0): the 974 reference solutions with their
                test_list (not a bench workload: `grpo-verify --input data/mbpp.jsonl
                --threads 2` is the check quoted in docs/verifiers.md; not committed)

  make_inputs.py --math500 F --gsm8k F --humaneval F --ifeval-input F --ifeval-responses F

Each argument is optional; a workload whose source is not given is left as it is. The output
is deterministic (file order, first --limit rows)."""
import argparse
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def rows(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write(name, records):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(records)} lines")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--math500")
    ap.add_argument("--gsm8k")
    ap.add_argument("--humaneval")
    ap.add_argument("--ifeval-input")
    ap.add_argument("--ifeval-responses")
    ap.add_argument("--mbpp")
    ap.add_argument("--limit", type=int, default=500)
    a = ap.parse_args()
    if a.math500:
        write("math.jsonl", [{"completion": r["solution"], "ground_truth": r["answer"], "verifier": "math"}
                             for r in rows(a.math500)[: a.limit]])
    if a.gsm8k:
        write("gsm8k.jsonl", [{"completion": r["answer"], "ground_truth": r["answer"].split("####")[-1].strip(),
                               "verifier": "gsm8k"} for r in rows(a.gsm8k)[: a.limit]])
    if a.humaneval:
        write("code.jsonl", [{"completion": "```python\n" + r["prompt"] + r["canonical_solution"] + "```\n",
                              "ground_truth": {"test": r["test"], "entry_point": r["entry_point"]},
                              "verifier": "code"} for r in rows(a.humaneval)[: a.limit]])
    if a.mbpp:
        write("mbpp.jsonl", [{"id": r["task_id"], "completion": "```python\n" + r["code"] + "\n```",
                              "ground_truth": {"test_list": r["test_list"], "test_setup_code": r["test_setup_code"]},
                              "verifier": "code"}
                             for i, r in enumerate(rows(a.mbpp)) if i < 974 and r.get("task_id") == i + 1])  # the original 974
    if a.ifeval_input and a.ifeval_responses:
        by_prompt = {r["prompt"]: r for r in rows(a.ifeval_input)}
        out = []
        for r in rows(a.ifeval_responses)[: a.limit]:
            src = by_prompt[r["prompt"]]
            out.append({"completion": r["response"], "prompt": r["prompt"],
                        "ground_truth": {"instruction_id_list": src["instruction_id_list"], "kwargs": src["kwargs"]},
                        "verifier": "ifeval"})
        write("ifeval.jsonl", out)


if __name__ == "__main__":
    main()
