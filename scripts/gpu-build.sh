#!/usr/bin/env bash
# `make gpu-build`: the CUDA configuration, on any machine with the CUDA toolkit (nvcc), GPU or
# not. Configures BUILD_DIR (default build-gpu) with GRPO_WITH_CUDA=ON against the CUDA LibTorch
# of the pinned reference environment (.venv/: torch 2.11.0 from PyPI, built with CUDA 13.0, as
# the GPU machines' PyTorch is; scripts/make-reference-venv.sh) and builds every library, plugin,
# program and benchmark plus the GPU tests (tests/gpu) — not the CPU suite, which `make test`
# builds against the system's LibTorch (docs/gpu.md says why).
#
#   scripts/gpu-build.sh [BUILD_DIR]
# Environment: JOBS (default nproc), GRPO_VENV (default .venv), CMAKE_ARGS (more configure flags).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=$(realpath -m "${1:-$ROOT/build-gpu}")
VENV="${GRPO_VENV:-$ROOT/.venv}"
JOBS=${JOBS:-$(nproc)}

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "gpu-build: no nvcc on PATH or in /usr/local/cuda/bin: the CUDA configuration needs the CUDA toolkit" >&2
  exit 1
}
command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
[ -x "$VENV/bin/python" ] || {
  echo "gpu-build: $VENV/bin/python is missing: run scripts/install-deps.sh (it makes the venv with PyPI's CUDA LibTorch)" >&2
  exit 1
}
TORCH_PREFIX=$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
TORCH_LIB="$TORCH_PREFIX/../../lib"
TORCH_LIB=$(realpath "$TORCH_LIB")

# TorchConfig.cmake looks for libtorch.so and libc10.so with PATHS, which CMake searches after
# the system's folders: next to Debian's libtorch-dev it would name the system's copies (in
# TORCH_LIBRARIES and its "Found Torch" line). Name this LibTorch's own.
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DGRPO_WITH_CUDA=ON \
  -DGRPO_BUILD_TESTS=OFF -DGRPO_BUILD_GPU_TESTS=ON -DGRPO_TORCH_PYTHON="$VENV/bin/python" \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTORCH_LIBRARY="$TORCH_LIB/libtorch.so" -Dc10_LIBRARY="$TORCH_LIB/libc10.so" \
  ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "gpu-build: built $BUILD_DIR against LibTorch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') (CUDA code paths on)"
