#!/usr/bin/env python3
# Reference chat renderings from transformers itself: tokenizer.apply_chat_template, offline.
#
#   python hf_apply_chat_template.py CASES_JSON OUT_JSON
#
# CASES_JSON: a JSON array of
#   {"tokenizer": DIR, "messages": [...], "tools": [...] | null, "documents": [...] | null,
#    "add_generation_prompt": bool, "kwargs": {extra template variables, e.g. enable_thinking}}
# OUT_JSON: one entry per case, {"text": rendered, "ids": apply_chat_template(tokenize=True)} or
#   {"error": message, "template_error": bool}; template_error is true for raise_exception(), which
#   raises jinja2's TemplateError itself (its subclasses, e.g. UndefinedError, are other failures)
#   with the template's own message as its text.
#
# Each folder is loaded once with PreTrainedTokenizerFast.from_pretrained: it runs tokenizer.json as
# written. AutoTokenizer would pick the class named in tokenizer_config.json, and transformers 5's
# LlamaTokenizer (DeepSeek-V3's tokenizer_class) rebuilds the pre-tokenizer from the class instead
# of the file, giving other ids than DeepSeek's own tokenizer.json ("Hello World  x" among them).
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jinja2  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: hf_apply_chat_template.py CASES_JSON OUT_JSON\n")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    loaded = {}
    out = []
    for case in cases:
        folder = case["tokenizer"]
        if folder not in loaded:
            loaded[folder] = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
        tok = loaded[folder]
        args = dict(
            tools=case.get("tools"),
            documents=case.get("documents"),
            add_generation_prompt=case["add_generation_prompt"],
            **case.get("kwargs", {}),
        )
        try:
            text = tok.apply_chat_template(case["messages"], tokenize=False, **args)
            ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=False, **args)
            out.append({"text": text, "ids": list(ids)})
        except Exception as exc:  # a template that raises must raise in ours too
            out.append({"error": str(exc), "template_error": type(exc) is jinja2.exceptions.TemplateError})
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
