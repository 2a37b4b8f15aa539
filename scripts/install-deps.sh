#!/usr/bin/env bash
# Installs the Debian packages grpo-cpp needs to build, test and run. Idempotent: packages
# already installed are left alone, and `apt-get update` runs only when one is missing.
# Works as root, or through sudo otherwise.
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
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # valgrind: the plugin-lifetime test runs under it
  valgrind
  # faster rebuilds
  ccache
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

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
