#!/usr/bin/env python3
"""Render every template in features/ and python_only/ with every conversation in conversations.json through
both reference renderers (tests/tokenizer/reference_chat.py and reference_chat.cjs) and report disagreements.

    python3 tests/tokenizer/chat_templates/render_all.py [--npm-prefix DIR] [--python EXE] [--node EXE]
                                                         [--out DIR] [--show TEMPLATE[:CONVERSATION]]

Exit status: 0 when every features/ pair renders identically in both references (same text, or the same error
message) and no features/ template other than the *raise* ones raises; 1 otherwise; 2 on a setup problem.
python_only/ templates are rendered by both but only reported: they exist because the references disagree.

The render context of a (template, conversation) pair is built the way transformers' apply_chat_template builds
its keyword arguments: messages, tools (null when the conversation has none), documents (null when none),
add_generation_prompt, then bos_token "<s>" and eos_token "</s>", then the conversation's "variables".
--out DIR writes cases.json (the exact renderer input), python.json and node.json there.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PY_REF = os.path.join(HERE, "..", "reference_chat.py")
JS_REF = os.path.join(HERE, "..", "reference_chat.cjs")
BOS, EOS = "<s>", "</s>"


def build_context(conv):
    ctx = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": conv.get("documents"),
        "add_generation_prompt": conv.get("add_generation_prompt", False),
        "bos_token": BOS,
        "eos_token": EOS,
    }
    ctx.update(conv.get("variables", {}))
    return ctx


def list_templates(folder):
    path = os.path.join(HERE, folder)
    if not os.path.isdir(path):
        return []
    return [(folder, name, os.path.join(path, name)) for name in sorted(os.listdir(path)) if name.endswith(".jinja")]


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write("command failed (%d): %s\n%s%s" % (proc.returncode, " ".join(cmd), proc.stdout, proc.stderr))
        sys.exit(2)


def dump(entry):
    # lone surrogates (possible in node output) cannot be printed as UTF-8: show them as escapes
    return json.dumps(entry, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")


def short(entry):
    s = dump(entry)
    return s if len(s) <= 400 else s[:400] + "...(%d chars)" % len(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npm-prefix", default=os.path.join(REPO, ".cache", "npm-tokenizers"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--node", default="node")
    ap.add_argument("--out", default=None)
    ap.add_argument("--show", action="append", default=[], help="print renders of TEMPLATE (file name) [:CONVERSATION]")
    args = ap.parse_args()

    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    templates = list_templates("features") + list_templates("python_only")

    cases, keys = [], []
    for folder, name, path in templates:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for conv in conversations:
            cases.append({"template": source, "context": build_context(conv)})
            keys.append((folder, name, conv["name"]))

    workdir = args.out or tempfile.mkdtemp(prefix="chat_templates_")
    os.makedirs(workdir, exist_ok=True)
    cases_path = os.path.join(workdir, "cases.json")
    py_path = os.path.join(workdir, "python.json")
    js_path = os.path.join(workdir, "node.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    run([args.python, PY_REF, cases_path, py_path])
    run([args.node, JS_REF, args.npm_prefix, cases_path, js_path])
    with open(py_path, encoding="utf-8") as f:
        py_out = json.load(f)
    with open(js_path, encoding="utf-8") as f:
        js_out = json.load(f)

    failures = 0
    summary = {}
    for (folder, name, conv), py, js in zip(keys, py_out, js_out):
        s = summary.setdefault((folder, name), {"agree": 0, "disagree": 0, "py_errors": 0})
        same = py == js
        s["agree" if same else "disagree"] += 1
        if "error" in py:
            s["py_errors"] += 1
        bad = folder == "features" and (not same or ("error" in py and "raise" not in name))
        if bad:
            failures += 1
            print("FAIL %s/%s x %s\n  python: %s\n  node:   %s" % (folder, name, conv, short(py), short(js)))
        for want in args.show:
            t, _, c = want.partition(":")
            if t in (name, name[: -len(".jinja")]) and (not c or c == conv):
                print("---- %s/%s x %s" % (folder, name, conv))
                print("python: " + dump(py))
                print("node:   " + dump(js))

    for (folder, name), s in summary.items():
        print("%-12s %-40s agree %3d  disagree %3d  python errors %3d"
              % (folder, name, s["agree"], s["disagree"], s["py_errors"]))
    n_feat = sum(1 for t in templates if t[0] == "features")
    print("%d templates (%d features, %d python_only) x %d conversations = %d pairs; %d features failures"
          % (len(templates), n_feat, len(templates) - n_feat, len(conversations), len(cases), failures))
    if not args.out:
        for p in (cases_path, py_path, js_path):
            os.remove(p)
        os.rmdir(workdir)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
