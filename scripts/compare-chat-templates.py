#!/usr/bin/env python3
"""Compare chat-template rendering: jinja2, @huggingface/jinja and grpo-tokenize.

For every model family in families.json and every conversation in
tests/tokenizer/chat_templates/conversations.json this renders the family's real
chat template three ways and compares the texts:

  (a) Python jinja2 with transformers' settings  (tests/tokenizer/reference_chat.py)
  (b) @huggingface/jinja under node               (tests/tokenizer/reference_chat.cjs)
  (c) our engine, through the CLI, one process per case:
        grpo-tokenize --tokenizer DIR --chat --render --template FAMILY.jinja < context-line

The render context is {messages, add_generation_prompt, tools and documents (None
when the conversation has none, as transformers passes them)}, then the family's special-token variables (bos_token,
eos_token, ...), then the conversation's own "variables" (these win).

The families are third-party templates and stay out of git: they live in
.cache/family-templates/ (families.json + <family>.jinja, each entry naming the
Hugging Face model and the repository, path and commit the template was read from).

    python3 scripts/compare-chat-templates.py
    python3 scripts/compare-chat-templates.py --family qwen3 --family llama3.1 --diff-lines 30
    python3 scripts/compare-chat-templates.py --grpo-tokenize build-release/bin/grpo-tokenize

Output: per family, the number of cases and how many renderings agree for each
pair; each disagreeing case with the first lines of a unified diff (whitespace
and control characters escaped); then a Markdown summary table (also written to
--markdown PATH when given). A case where both sides raise counts as agreement
when the messages match: the raise_exception() text when the template raised
one, else the error text itself (one side's text containing the other's counts,
so a CLI prefix such as "grpo-tokenize: ..." does not matter). If the binary is missing or cannot render a
trivial template, ours is reported as "unavailable" with the reason.

Exit status: 0 when ours equals jinja2 on every case; 1 when it does not (or ours
is unavailable); 2 when the inputs or a reference renderer are missing.

Needs python3 with jinja2 (pip install jinja2) and node with @huggingface/jinja
installed under --npm-prefix (scripts/fetch-reference-tokenizers.sh does that).
"""

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = (("jinja2", "hfjinja"), ("ours", "jinja2"), ("ours", "hfjinja"))
LABEL = {"jinja2": "jinja2", "hfjinja": "@huggingface/jinja", "ours": "ours"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    rel = lambda *p: os.path.join(REPO, *p)  # noqa: E731
    ap.add_argument("--families", default=rel(".cache", "family-templates", "families.json"),
                    help="families.json (default: .cache/family-templates/families.json)")
    ap.add_argument("--conversations", default=rel("tests", "tokenizer", "chat_templates", "conversations.json"))
    ap.add_argument("--grpo-tokenize", default=rel("build", "bin", "grpo-tokenize"), help="our CLI binary")
    ap.add_argument("--tokenizer", default="",
                    help="tokenizer folder passed to grpo-tokenize (default: the demo tokenizer.json alone, in a "
                         "temporary folder: small, and without a tokenizer_config.json whose special tokens "
                         "would join the template variables)")
    ap.add_argument("--npm-prefix", default=rel(".cache", "npm-tokenizers"),
                    help="folder whose node_modules holds @huggingface/jinja")
    ap.add_argument("--reference-py", default=rel("tests", "tokenizer", "reference_chat.py"))
    ap.add_argument("--reference-js", default=rel("tests", "tokenizer", "reference_chat.cjs"))
    debian_python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    ap.add_argument("--python", default=debian_python,
                    help="python for reference_chat.py (default: Debian's, where python3-jinja2 installs)")
    ap.add_argument("--node", default="node")
    ap.add_argument("--omit-none", action="store_true",
                    help="leave tools and documents out of the context when a conversation has none (default: "
                         "pass tools=None and documents=None, as transformers' apply_chat_template and grpo-tokenize do)")
    ap.add_argument("--family", action="append", default=[], help="only these families (repeatable)")
    ap.add_argument("--case", action="append", default=[], help="only these conversations (repeatable)")
    ap.add_argument("--diff-lines", type=int, default=12, help="diff lines shown per differing case")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per grpo-tokenize run")
    ap.add_argument("--markdown", help="also write the summary table to this file")
    ap.add_argument("--json", help="write every rendering and comparison to this file")
    return ap.parse_args(argv)


def load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"compare-chat-templates: cannot read {what} {path}: {e}")


def build_context(conv, family, pass_none=False):
    ctx = {"messages": conv["messages"], "add_generation_prompt": bool(conv.get("add_generation_prompt", False))}
    for key in ("tools", "documents"):
        if key in conv:
            ctx[key] = conv[key]
        elif pass_none:
            ctx[key] = None
    ctx.update(family.get("variables") or {})
    ctx.update(conv.get("variables") or {})
    return ctx


# ---------------------------------------------------------------------------
# Renderers. Each returns (outputs, problem): outputs is a list of
# {"text": str} | {"error": str}, one per case, or None with problem set.

def run_reference(cmd, cases, cwd):
    with tempfile.TemporaryDirectory(prefix="chat-compare-") as tmp:
        cases_path, out_path = os.path.join(tmp, "cases.json"), os.path.join(tmp, "out.json")
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False)
        try:
            proc = subprocess.run(cmd + [cases_path, out_path], cwd=cwd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"{cmd[0]}: {e}"
        if proc.returncode != 0:
            return None, f"exit {proc.returncode}: {tail(proc.stderr or proc.stdout)}"
        try:
            with open(out_path, encoding="utf-8") as f:
                out = json.load(f)
        except (OSError, ValueError) as e:
            return None, f"no readable output: {e}; stderr: {tail(proc.stderr)}"
    if not isinstance(out, list) or len(out) != len(cases):
        return None, f"expected a list of {len(cases)} results, got {type(out).__name__}" + (
            f" of {len(out)}" if isinstance(out, list) else "")
    bad = [i for i, r in enumerate(out)
           if not (isinstance(r, dict) and (isinstance(r.get("text"), str) or "error" in r))]
    if bad:
        return None, f"result {bad[0]} is neither {{\"text\": str}} nor {{\"error\": ...}}: {str(out[bad[0]])[:200]}"
    return [{"text": r["text"]} if isinstance(r.get("text"), str) else {"error": str(r["error"])} for r in out], None


def run_ours_one(binary, tokenizer, template_path, ctx, timeout):
    cmd = [binary, "--tokenizer", tokenizer, "--chat", "--render", "--template", template_path]
    line = json.dumps(ctx, ensure_ascii=False) + "\n"
    try:
        proc = subprocess.run(cmd, input=line.encode("utf-8"), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    except OSError as e:
        return {"error": f"cannot run {binary}: {e}"}
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        return {"error": stderr.strip() or f"exit {proc.returncode} with no message"}
    first = proc.stdout.decode("utf-8", "replace").split("\n", 1)[0]
    try:
        text = json.loads(first)
    except ValueError:
        return {"error": f"stdout is not a JSON string: {first[:200]!r}"}
    if not isinstance(text, str):
        return {"error": f"stdout is not a JSON string: {first[:200]!r}"}
    return {"text": text}


STDIN_LINE_RE = re.compile(r"stdin line (\d+): ")


def run_ours_batch(binary, tokenizer, template_path, contexts, timeout):
    """All contexts through as few processes as possible: grpo-tokenize renders line after line
    and stops at the first line that fails (exit 5, "stdin line K: ..."); the lines after it go
    to a new process. Far cheaper than a process per case (each start loads the runtime)."""
    results = []
    while len(results) < len(contexts):
        rest = contexts[len(results):]
        cmd = [binary, "--tokenizer", tokenizer, "--chat", "--render", "--template", template_path]
        data = "".join(json.dumps(ctx, ensure_ascii=False) + "\n" for ctx in rest).encode("utf-8")
        try:
            proc = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout * len(rest))
        except subprocess.TimeoutExpired:
            return results + [{"error": "timed out"}] * len(rest)
        except OSError as e:
            return results + [{"error": f"cannot run {binary}: {e}"}] * len(rest)
        lines = proc.stdout.decode("utf-8", "replace").split("\n")
        for first in lines:
            if not first:
                continue
            try:
                results.append({"text": json.loads(first)})
            except ValueError:
                results.append({"error": f"stdout is not a JSON string: {first[:200]!r}"})
        if proc.returncode == 0:
            continue
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        m = STDIN_LINE_RE.search(stderr)
        if proc.returncode != 5 or not m:  # not a line's error: every remaining case fails alike
            return results + [{"error": stderr or f"exit {proc.returncode}"}] * (len(contexts) - len(results))
        results.append({"error": stderr})
    return results


def probe_ours(args):
    """None when the CLI renders a trivial template, else why it cannot."""
    if not os.path.isfile(args.grpo_tokenize):
        return f"{args.grpo_tokenize} not found (build it, or pass --grpo-tokenize PATH)"
    if not os.access(args.grpo_tokenize, os.X_OK):
        return f"{args.grpo_tokenize} is not executable"
    with tempfile.TemporaryDirectory(prefix="chat-compare-") as tmp:
        path = os.path.join(tmp, "probe.jinja")
        with open(path, "w", encoding="utf-8") as f:
            f.write("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
        ctx = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": False, "bos_token": "<s>"}
        r = run_ours_one(args.grpo_tokenize, args.tokenizer, path, ctx, args.timeout)
    if r.get("text") == "<s>[user]hi":
        return None
    return "probe failed: " + (r["error"] if "error" in r else f"rendered {r['text']!r}, expected '<s>[user]hi'")


# ---------------------------------------------------------------------------
# Comparison

RAISE_RE = re.compile(r"raise_exception\(\s*(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")")


def raise_messages(template):
    msgs = {m.group(1) if m.group(1) is not None else m.group(2) for m in RAISE_RE.finditer(template)}
    return sorted((m for m in msgs if m), key=len, reverse=True)


def error_key(err, raises):
    """What must match for two errors to agree: the raise_exception text found in the error, else the error."""
    for msg in raises:
        if msg in err:
            return "raise_exception: " + msg
    return "error: " + err.strip()


def agree(x, y, raises):
    if x is None or y is None:
        return None
    if "text" in x and "text" in y:
        return x["text"] == y["text"]
    if "error" in x and "error" in y:
        kx, ky = error_key(x["error"], raises), error_key(y["error"], raises)
        if kx.startswith("error: ") and ky.startswith("error: "):  # no template message: one may wrap the other
            ex, ey = kx[len("error: "):], ky[len("error: "):]
            return bool(ex and ey) and (ex in ey or ey in ex)
        return kx == ky
    return False


def show(line):
    return json.dumps(line, ensure_ascii=False)[1:-1]


def describe(r):
    if "error" in r:
        return "error: " + r["error"].strip().replace("\n", " | ")[:300]
    return f"text ({len(r['text'])} chars)"


def diff(x, y, name_x, name_y, limit, raises):
    if "text" in x and "text" in y:
        lines = list(difflib.unified_diff(x["text"].splitlines(keepends=True), y["text"].splitlines(keepends=True),
                                          name_x, name_y, n=1, lineterm=""))
        body = [(line[0] + show(line[1:])) if line[:1] in ("+", "-", " ") else line for line in lines[2:]]
        out = lines[:2] + body
        more = len(out) - (limit + 2)
        out = out[:limit + 2]
        if more > 0:
            out.append(f"... ({more} more diff lines)")
        return out
    out = [f"{name_x}: {describe(x)}", f"{name_y}: {describe(y)}"]
    for name, r in ((name_x, x), (name_y, y)):
        if "error" in r:
            out.append(f"{name} error key: {error_key(r['error'], raises)[:300]}")
    return out


def cell(agreeing, both_raise, n):
    if agreeing is None:
        return "n/a"
    return f"{agreeing}/{n}" + (f" ({both_raise} both raise)" if both_raise else "")


def tail(text, n=600):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def main(argv):
    args = parse_args(argv)
    families = load_json(args.families, "families")
    conversations = load_json(args.conversations, "conversations")
    if args.family:
        unknown = set(args.family) - {f["family"] for f in families}
        if unknown:
            sys.exit(f"compare-chat-templates: unknown families: {', '.join(sorted(unknown))}")
        families = [f for f in families if f["family"] in args.family]
    if args.case:
        conversations = [c for c in conversations if c["name"] in args.case]
    if not families or not conversations:
        sys.exit("compare-chat-templates: nothing to compare")
    fam_dir = os.path.dirname(os.path.abspath(args.families))
    if not args.tokenizer:
        tok_dir = tempfile.mkdtemp(prefix="chat-compare-tokenizer-")
        with open(os.path.join(REPO, "configs", "quickstart", "model", "tokenizer.json"), "rb") as src, \
             open(os.path.join(tok_dir, "tokenizer.json"), "wb") as dst:
            dst.write(src.read())
        args.tokenizer = tok_dir

    ours_problem = probe_ours(args)
    print(f"ours: {'unavailable: ' + ours_problem if ours_problem else args.grpo_tokenize}")

    py_cmd = [args.python, args.reference_py]
    js_cmd = [args.node, args.reference_js, args.npm_prefix]
    for path in (args.reference_py, args.reference_js):
        if not os.path.isfile(path):
            print(f"missing reference renderer {path}")
            return 2

    rows, record, reference_failed = [], [], False
    ours_all_equal = ours_problem is None
    for fam in families:
        tpath = os.path.join(fam_dir, fam["file"])
        with open(tpath, encoding="utf-8") as f:
            template = f.read()
        raises = raise_messages(template)
        contexts = [build_context(c, fam, not args.omit_none) for c in conversations]
        cases = [{"template": template, "context": ctx} for ctx in contexts]

        results = {}
        problems = {}
        results["jinja2"], problems["jinja2"] = run_reference(py_cmd, cases, REPO)
        results["hfjinja"], problems["hfjinja"] = run_reference(js_cmd, cases, REPO)
        if ours_problem:
            results["ours"], problems["ours"] = None, "unavailable: " + ours_problem
        else:
            results["ours"] = run_ours_batch(args.grpo_tokenize, args.tokenizer, tpath, contexts, args.timeout)
            problems["ours"] = None

        print(f"\n## {fam['family']}  ({fam['hf_model']}; {fam['repo']}@{fam['commit'][:12]} {fam['path']})")
        for who in ("jinja2", "hfjinja"):
            if problems[who]:
                reference_failed = True
                print(f"  {LABEL[who]} renderer failed: {problems[who]}")
        counts, both_raise = {}, {}
        for x, y in PAIRS:
            if results[x] is None or results[y] is None:
                counts[(x, y)] = both_raise[(x, y)] = None
                continue
            pairs = list(zip(results[x], results[y]))
            counts[(x, y)] = sum(bool(agree(a, b, raises)) for a, b in pairs)
            both_raise[(x, y)] = sum("error" in a and "error" in b and not agree(a, b, raises) for a, b in pairs)
        n = len(cases)
        print(f"  cases: {n}; " + "; ".join(f"{LABEL[x]} = {LABEL[y]}: " + cell(counts[(x, y)], both_raise[(x, y)], n)
                                             for x, y in PAIRS))
        errors_everywhere = 0
        for i, conv in enumerate(conversations):
            entry = {"family": fam["family"], "case": conv["name"]}
            for who in ("jinja2", "hfjinja", "ours"):
                entry[who] = results[who][i] if results[who] is not None else None
            shown = False
            for x, y in PAIRS:
                ok = agree(entry[x], entry[y], raises)
                entry[f"{x}={y}"] = ok
                if ok is False:
                    if not shown:
                        print(f"  - {conv['name']}:")
                        shown = True
                    ref, got = (y, x) if x == "ours" else (x, y)  # diff from the reference to ours
                    print(f"      {LABEL[ref]} -> {LABEL[got]}:")
                    for line in diff(entry[ref], entry[got], LABEL[ref], LABEL[got], args.diff_lines, raises):
                        print("        " + line)
            if all(entry[w] is not None and "error" in entry[w] for w in ("jinja2", "hfjinja")):
                errors_everywhere += 1
            if entry["ours=jinja2"] is not True:
                ours_all_equal = False
            record.append(entry)
        if errors_everywhere:
            print(f"  ({errors_everywhere} case(s) raise in both references)")
        rows.append((fam, n, counts, both_raise))
    table = ["| family | HF model | source (repo@commit, path) | cases | jinja2 = @huggingface/jinja "
             "| ours = jinja2 | ours = @huggingface/jinja |",
             "|---|---|---|---|---|---|---|"]
    for fam, n, counts, both in rows:
        src = f"{fam['repo']}@{fam['commit'][:12]}, `{fam['path']}`"
        table.append(f"| {fam['family']} | {fam['hf_model']} | {src} | {n} | "
                     + " | ".join(cell(counts[p], both[p], n) for p in PAIRS) + " |")
    total = sum(r[1] for r in rows)
    sums = []
    for p in PAIRS:
        vals, raised = [r[2][p] for r in rows], [r[3][p] for r in rows]
        sums.append("n/a" if any(v is None for v in vals) else cell(sum(vals), sum(raised), total))
    table.append(f"| **total** | | | {total} | " + " | ".join(sums) + " |")
    print("\n" + "\n".join(table))
    print("\n(k both raise): k further cases where both sides raised, with different messages (counted as differing)")
    if ours_problem:
        print(f"\nours: unavailable: {ours_problem}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(table) + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, ensure_ascii=False, indent=1)
    if reference_failed:
        return 2
    return 0 if ours_all_equal else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
