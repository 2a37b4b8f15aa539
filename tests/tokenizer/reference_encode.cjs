// Reference ids for the tokenizer parity test, from Hugging Face's JavaScript port
// (@huggingface/tokenizers, installed by scripts/fetch-reference-tokenizers.sh).
//   node reference_encode.cjs NPM_PREFIX TOKENIZER_JSON CORPUS_JSONL OUT_JSONL
// CORPUS_JSONL: one JSON string per line. OUT_JSONL: per line
//   {"ids": [...], "decoded": "...", "nfc": true|false}
// (encode without post-processing, decode of those ids, whether the input is already NFC).
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [npmPrefix, tokenizerPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node reference_encode.cjs NPM_PREFIX TOKENIZER_JSON CORPUS_JSONL OUT_JSONL");
  process.exit(2);
}
const req = createRequire(path.join(path.resolve(npmPrefix), "package.json"));
const { Tokenizer } = req("@huggingface/tokenizers");
const tokenizerJson = JSON.parse(fs.readFileSync(tokenizerPath, "utf8"));
const configPath = path.join(path.dirname(tokenizerPath), "tokenizer_config.json");
const tokenizerConfig = fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, "utf8")) : {};
const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);

const lines = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const text = JSON.parse(line);
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  const decoded = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ ids, decoded, nfc: text.normalize("NFC") === text }));
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
