// Reference renderer for chat templates: Hugging Face's JavaScript Jinja (@huggingface/jinja, installed by
// scripts/fetch-reference-tokenizers.sh), the engine transformers.js uses for apply_chat_template.
//
//   node reference_chat.cjs NPM_PREFIX CASES_JSON OUT_JSON
//
// NPM_PREFIX: the folder whose node_modules holds @huggingface/jinja.
// CASES_JSON: a JSON array of {"template": "<jinja source>", "context": {<every variable passed to render>}}.
// OUT_JSON:   a JSON array with one entry per case, {"text": "<rendered>"} or {"error": "<message>"} when parsing or
//             rendering threw; for raise_exception(msg) the message is exactly msg.
//
// Each case is rendered with `new Template(template).render(context)`; Template applies trim_blocks and
// lstrip_blocks itself and registers raise_exception, strftime_now, range, namespace, true/false/none.
// The context keeps the JSON key order, except that JavaScript objects put integer-like keys ("1", "42") first.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [npmPrefix, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node reference_chat.cjs NPM_PREFIX CASES_JSON OUT_JSON");
  process.exit(2);
}
const req = createRequire(path.join(path.resolve(npmPrefix), "package.json"));
const { Template } = req("@huggingface/jinja");

const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const out = cases.map((c) => {
  try {
    return { text: new Template(c.template).render(c.context || {}) };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(out));
