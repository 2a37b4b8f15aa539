// Renders chat templates with Hugging Face's Jinja implementation (@huggingface/jinja, installed
// by scripts/fetch-reference-tokenizers.sh), the reference for tests/tokenizer/test_chat_template.
//   node reference_chat.cjs NPM_PREFIX CASES_JSON OUT_JSON
// CASES_JSON: [{"template": "...", "messages": [...], "add_generation_prompt": bool,
//               "bos_token": "...", "eos_token": "..."}, ...]. OUT_JSON: the rendered strings.
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
const out = cases.map((c) =>
  new Template(c.template).render({
    messages: c.messages,
    add_generation_prompt: c.add_generation_prompt,
    bos_token: c.bos_token,
    eos_token: c.eos_token,
  })
);
fs.writeFileSync(outPath, JSON.stringify(out));
