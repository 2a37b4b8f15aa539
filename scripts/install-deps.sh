#!/usr/bin/env bash
# Installs the Debian packages grpo-cpp needs to build, test and run, then the references the
# parity tests compare against: the reference tokenizers and JavaScript ports from the project's
# reference data (scripts/fetch-reference-tokenizers.sh, into .cache/; no npm registry) and the
# pinned Python environment .venv/ (scripts/make-reference-venv.sh: torch, transformers, peft,
# tokenizers from PyPI). Idempotent: packages already installed are left alone, `apt-get update`
# runs only when one is missing, and each reference step is skipped when its result is present
# (a second run takes about a second). Works as root, or through sudo otherwise.
#
#   scripts/install-deps.sh             build + test dependencies (what `make test` needs)
#   scripts/install-deps.sh --fuzz      also clang and its sanitizer/libFuzzer runtime
#   scripts/install-deps.sh --fixtures  also python3-torch (regenerates model test fixtures)
#   scripts/install-deps.sh --no-references   the packages only: what building and running need
#                                       (`make demo`), without the test references (~3 GB of PyPI)
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ make cmake binutils
  # LibTorch (CPU build) and its c10d Gloo transport
  libtorch-dev libgloo-dev
  # Debian's LibTorch calls BLAS through the libblas.so.3 alternative, which is the slow
  # reference BLAS unless OpenBLAS is installed (measured on 2 cores, 1024x1024 fp32 matmul:
  # ~5 GFLOP/s reference vs ~185 GFLOP/s OpenBLAS). The OpenMP build matches LibTorch's libgomp.
  libopenblas0-openmp
  # config, logging, plugins, CLI
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  # tokenizer: PCRE2 runs the pre-tokenizer regexes of tokenizer.json (Unicode classes
  # \p{L}, \p{N}, lookahead; JIT-compiled), utf8proc gives the NFC normalizer Qwen uses
  libpcre2-dev libutf8proc-dev
  # verifiers: GiNaC is the CAS behind the math verifier's symbolic equivalence; CLD2 detects
  # the response language for ifeval (it agreed with the reference's langdetect on 31/31
  # language instructions); bubblewrap builds code_exec's sandbox (namespaces, read-only /usr,
  # private /tmp, no network), also for python_reward's workers; python3 runs the sandboxed
  # programs and the Python reward functions
  libginac-dev libcld2-dev bubblewrap python3
  # HTTP for grpo-serve (the OpenAI-compatible server), the `openai` rollout backend and the
  # llm_judge verifier: cpp-httplib's threaded server, chunked responses (server-sent events)
  # and client with connect/read time-outs, one header plus its Debian-built library
  libcpp-httplib-dev
  # the curves PNG of a run (core/metrics/plot.cpp draws with cairo; DejaVu Sans labels;
  # pkg-config finds cairo for CMake)
  libcairo2-dev fonts-dejavu-core pkg-config
  # tests and benchmarks; python3-jinja2 is the reference the chat-template tests compare the
  # Jinja engine against (transformers renders chat templates with it)
  libgtest-dev libgmock-dev libbenchmark-dev python3-jinja2
  # valgrind: the plugin-lifetime test runs under it
  valgrind
  # faster rebuilds
  ccache
  # /usr/bin/time -v: peak memory in bench/sandbox/flood_memory.sh
  time
  # the GPU bundle (scripts/gpu-bundle.sh) points its binaries at the libraries beside them
  patchelf
  # node runs Hugging Face's JavaScript tokenizer and Jinja ports in the parity tests (installed
  # offline from the reference data); python3-venv makes .venv/ for the Python references
  nodejs npm python3-venv
)

REFERENCES=1
for arg in "$@"; do
  case "$arg" in
    # libFuzzer and the sanitizer runtimes ship with clang's runtime package
    --fuzz) PACKAGES+=(clang libclang-rt-14-dev) ;;
    # the independent model reference (tests/fixtures/models/generate.py)
    --fixtures) PACKAGES+=(python3-torch) ;;
    --no-references) REFERENCES=0 ;;
    *) echo "install-deps: unknown option '$arg' (expected --fuzz, --fixtures or --no-references)" >&2; exit 2 ;;
  esac
done

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    # node/npm may come from outside Debian (e.g. NodeSource): accept them when on PATH
    if { [ "$pkg" = nodejs ] && command -v node >/dev/null 2>&1; } ||
       { [ "$pkg" = npm ] && command -v npm >/dev/null 2>&1; }; then
      continue
    fi
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
else
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing packages (${missing[*]}) and not root, and sudo is not available" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$REFERENCES" = 1 ]; then
  "$(dirname "$0")/fetch-reference-tokenizers.sh"
  "$(dirname "$0")/make-reference-venv.sh"
fi
