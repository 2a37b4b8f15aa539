#!/usr/bin/env python3
# Reference renderer for chat templates: Python jinja2 set up the way Hugging Face transformers sets it up
# for `tokenizer.apply_chat_template`, so its output is what transformers would produce.
#
#   python3 reference_chat.py CASES_JSON OUT_JSON
#
# CASES_JSON: a JSON array of {"template": "<jinja source>", "context": {<every variable passed to render>}}.
# OUT_JSON:   a JSON array with one entry per case, {"text": "<rendered>"} or {"error": "<message>"} when parsing or
#             rendering raised; for raise_exception(msg) the message is exactly msg.
#
# What is copied from transformers, read in src/transformers/utils/chat_template_utils.py, function
# `_compile_jinja_template` (transformers 4.45.0.dev0, commit 5e43e2e892453b405ce6d2cb94387b3a3213f30a):
#   * jinja2 >= 3.1.0 is required (transformers raises ImportError below that);
#   * environment: jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
#     extensions=[AssistantTracker, jinja2.ext.loopcontrols]); every other option is jinja2's default, notably
#     keep_trailing_newline=False, autoescape=False and the default Undefined (not StrictUndefined);
#   * AssistantTracker: an extension with tags={"generation"} whose parse() turns
#     `{% generation %}...{% endgeneration %}` into a CallBlock calling `_generation_support`, which returns the
#     rendered body (`caller()`). transformers additionally records the body's character span when
#     `return_assistant_tokens_mask` is used; that bookkeeping does not change the text and is left out here;
#   * env.filters["tojson"] = tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
#     -> json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
#     (replaces jinja2's own tojson, which would HTML-escape and sort keys);
#   * env.globals["raise_exception"] = raise_exception(message) -> raise jinja2.exceptions.TemplateError(message);
#   * env.globals["strftime_now"] = strftime_now(format) -> datetime.now().strftime(format);
#   * the template is compiled with env.from_string(chat_template) and rendered with keyword arguments
#     (transformers passes messages=, tools=, documents=, add_generation_prompt= and **template_kwargs, which
#     hold the special tokens such as bos_token/eos_token plus any extra keyword the caller gave). Here the
#     case's "context" object is passed as those keyword arguments, verbatim and in its JSON key order.
#
# JSON objects are loaded as Python dicts, which keep the key order of the file, so `tojson` and `.items()`
# see the keys in input order, as they would with transformers and a Python dict built in that order.
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    # Same parse() as transformers' AssistantTracker; the tracking of generation indices is omitted.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_case(env, case):
    try:
        template = env.from_string(case["template"])
        return {"text": template.render(**case.get("context", {}))}
    except Exception as exc:  # parse and render errors alike; TemplateError(msg) stringifies to msg
        return {"error": str(exc)}


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: python3 reference_chat.py CASES_JSON OUT_JSON\n")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = make_environment()
    out = [render_case(env, case) for case in cases]
    with open(argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
