#!/bin/sh
# needs_venv.sh PYTHON COMMAND [ARG...]: runs COMMAND when the reference tests' PYTHON exists, else
# fails saying how to make it (rather than ctest's bare "Could not find executable"). Checked when
# the test runs, so a venv made after configuring is picked up.
if [ ! -x "$1" ]; then
  echo "$1 does not exist: run scripts/install-deps.sh (or scripts/make-reference-venv.sh) to make the reference tests' Python" >&2
  exit 1
fi
shift
exec "$@"
