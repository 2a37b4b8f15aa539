#!/usr/bin/env bash
# `make gpu-bundle`: what a GPU machine needs to run the GPU check without installing anything,
# in one archive small enough to carry there (docs/gpu.md). The GPU machines have Ubuntu 24.04,
# the NVIDIA driver, CUDA 13.0 and a Python with PyTorch 2.11 + transformers + peft, but none of
# our Debian packages and no network: the archive holds the programs of the CUDA build
# (scripts/gpu-build.sh) and every shared library they need that is neither LibTorch/CUDA (taken
# from that machine's PyTorch at run time) nor the C/C++ runtime (glibc, libstdc++, libgcc_s:
# Ubuntu 24.04's are newer than Debian 12's, so backward compatible).
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT]      (defaults: build-gpu, BUILD_DIR/grpo-gpu-bundle.tar.xz)
#
# Layout inside the archive (grpo-gpu-bundle/), the same as the build tree so that grpo-run finds
# its plugins beside it:
#   bin/                 the GPU tests, the programs the check runs, the GPU benchmark
#   lib/                 libgrpo-*.so, lib/grpo/plugins/*.so
#   deps/                Debian's shared libraries they link (yaml-cpp, spdlog, fmt, Boost, GiNaC,
#                        cairo, PCRE2, utf8proc, CLD2, cpp-httplib, ...)
#   BUNDLE.txt           what was built, from which commit, against which LibTorch
# Every ELF file's RUNPATH is rewritten to $ORIGIN-relative folders of the bundle (patchelf), so
# only LibTorch's folders go on LD_LIBRARY_PATH there (scripts/gpu-check.sh --bundle).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR=$(realpath -m "${1:-$ROOT/build-gpu}")
OUT=$(realpath -m "${2:-$BUILD_DIR/grpo-gpu-bundle.tar.xz}")
VENV="${GRPO_VENV:-$ROOT/.venv}"
# What the check runs: the GPU tests, the programs of the LoRA parity cases (make-lora-parity-cases.sh),
# grpo-run, and the benchmarks of bench/gpu.
PROGRAMS=(grpo_gpu_tests grpo-run grpo-sft grpo-export grpo_bench_gpu_step grpo_bench_moe_experts)
# Where a GPU machine has its own copy (GRPO_SYSTEM_LIBS).
# shellcheck source=scripts/gpu-system-libs.sh
. "$ROOT/scripts/gpu-system-libs.sh"

die() { echo "gpu-bundle: $*" >&2; exit 1; }
command -v patchelf >/dev/null || die "patchelf is missing (scripts/install-deps.sh installs it)"
[ -f "$BUILD_DIR/CMakeCache.txt" ] || die "$BUILD_DIR is not a build folder: run make gpu-build first"
grep -q '^GRPO_WITH_CUDA:STRING=ON' "$BUILD_DIR/CMakeCache.txt" || die "$BUILD_DIR is not a CUDA build (GRPO_WITH_CUDA=ON): run make gpu-build"
TORCH_LIB=$("$VENV/bin/python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
TORCH_VERSION=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
NVIDIA_LIBS=$(ls -d "$(dirname "$TORCH_LIB")"/../nvidia/*/lib 2>/dev/null | paste -sd: -)

stage=$(mktemp -d "${TMPDIR:-/tmp}/grpo-gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
B="$stage/grpo-gpu-bundle"
mkdir -p "$B/bin" "$B/lib/grpo/plugins" "$B/deps"
for p in "${PROGRAMS[@]}"; do
  [ -x "$BUILD_DIR/bin/$p" ] || die "$BUILD_DIR/bin/$p is missing: run make gpu-build"
  cp "$BUILD_DIR/bin/$p" "$B/bin/"
done
cp -P "$BUILD_DIR"/lib/libgrpo*.so* "$B/lib/" 2>/dev/null || true
cp "$BUILD_DIR"/lib/grpo/plugins/*.so "$B/lib/grpo/plugins/"

# The libraries the programs need, resolved as they are here, less LibTorch/CUDA and the system's.
mapfile -t elves < <(find "$B" -type f \( -name '*.so*' -o -perm -u+x \))
declare -A deps=()
for f in "${elves[@]}"; do
  while read -r name _ path _; do
    [ -n "${path:-}" ] || continue
    [[ "$name" =~ $GRPO_SYSTEM_LIBS ]] && continue
    case "$path" in
      "$BUILD_DIR"/*|"$TORCH_LIB"/*|*/nvidia/*|/usr/local/cuda*) continue ;;
      "not") die "$f needs $name, which is not found here" ;;
    esac
    deps[$name]=$path
  done < <(LD_LIBRARY_PATH="$BUILD_DIR/lib:$TORCH_LIB${NVIDIA_LIBS:+:$NVIDIA_LIBS}" ldd "$f" | grep '=>')
done
for name in "${!deps[@]}"; do cp -L "${deps[$name]}" "$B/deps/$name"; done

# Point every ELF at the bundle's own folders; strip what a run does not need.
for f in "$B"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN/../deps' "$f"; done
for f in "$B"/lib/*.so*; do [ -L "$f" ] || patchelf --set-rpath '$ORIGIN:$ORIGIN/../deps' "$f"; done
for f in "$B"/lib/grpo/plugins/*.so; do patchelf --set-rpath '$ORIGIN/../..:$ORIGIN/../../../deps' "$f"; done
for f in "$B"/deps/*; do patchelf --set-rpath '$ORIGIN' "$f"; done
find "$B" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} +

{
  echo "grpo-cpp GPU bundle"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(lscpu | sed -n 's/^Model name: *//p' | head -n1)"
  echo "libtorch: $TORCH_VERSION"
  echo "programs: ${PROGRAMS[*]}"
  echo "plugins: $(cd "$B/lib/grpo/plugins" && ls | paste -sd' ' -)"
  echo "deps: $(cd "$B/deps" && ls | paste -sd' ' -)"
} > "$B/BUNDLE.txt"

mkdir -p "$(dirname "$OUT")"
tar -C "$stage" -cf - grpo-gpu-bundle | xz -T0 -6 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "gpu-bundle: $OUT ($(du -m "$OUT" | cut -f1) MiB; unpacked $(du -sm "$B" | cut -f1) MiB: ${#PROGRAMS[@]} programs, $(ls "$B/lib/grpo/plugins" | wc -l) plugins, ${#deps[@]} libraries)"
