#!/usr/bin/env bash
# Makes .venv/ at the repo root (ignored by git): the pinned Python environment of
# scripts/reference-requirements.txt — torch (CUDA 13.0 LibTorch inside), transformers, peft,
# tokenizers, safetensors, jinja2 — from PyPI. The reference tests of `make test` run Hugging
# Face's implementations from it on the CPU; `make gpu-build` builds against its LibTorch.
#
# Idempotent: a venv whose stamp (.venv/.grpo-requirements.sha256) matches the requirements file
# is left alone (a second run costs well under a second). A changed requirements file updates
# the venv in place; a venv that is broken (no python) is made anew. Needs Debian's python3 and
# python3-venv (scripts/install-deps.sh installs them) and PyPI; pip's cache (~/.cache/pip) makes
# a rebuild cheap.
#
# Environment: GRPO_VENV (default .venv in the repo), GRPO_VENV_PYTHON (the interpreter the venv
# is made from, default /usr/bin/python3 when present, else python3 on PATH).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${GRPO_VENV:-$ROOT/.venv}"
REQ="$ROOT/scripts/reference-requirements.txt"
STAMP="$VENV/.grpo-requirements.sha256"
if [ -z "${GRPO_VENV_PYTHON:-}" ]; then
  if [ -x /usr/bin/python3 ]; then GRPO_VENV_PYTHON=/usr/bin/python3; else GRPO_VENV_PYTHON=python3; fi
fi

want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  echo "make-reference-venv: ${VENV#"$ROOT/"} is up to date ($(sed -n 's/^\(torch\|transformers\|peft\)==/\1 /p' "$REQ" | paste -sd, -))"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  rm -rf "$VENV"
  echo "make-reference-venv: creating ${VENV#"$ROOT/"} with $GRPO_VENV_PYTHON ($("$GRPO_VENV_PYTHON" --version 2>&1))"
  if ! "$GRPO_VENV_PYTHON" -m venv "$VENV"; then
    echo "make-reference-venv: '$GRPO_VENV_PYTHON -m venv' failed (Debian: apt-get install python3-venv)" >&2
    rm -rf "$VENV"
    exit 1
  fi
fi
rm -f "$STAMP"
echo "make-reference-venv: pip install -r scripts/reference-requirements.txt (torch with its CUDA libraries: ~3 GB the first time)"
# --no-input: CI has no terminal; the stamp is written only after pip succeeded.
if ! "$VENV/bin/python" -m pip install --no-input --disable-pip-version-check -q -r "$REQ"; then
  echo "make-reference-venv: pip install failed (is PyPI reachable?); the reference tests fail until this script succeeds" >&2
  exit 1
fi
"$VENV/bin/python" - <<'EOF'
import torch, transformers, peft, tokenizers, safetensors, jinja2
print(f"make-reference-venv: torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
      f"peft {peft.__version__}, tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}, jinja2 {jinja2.__version__}")
EOF
echo "$want" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
