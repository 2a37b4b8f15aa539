# Sourced by scripts/gpu-bundle.sh and scripts/gpu-check.sh: the shared libraries a GPU machine
# has of its own — the C/C++ runtime and the kernel's vDSO (Ubuntu 24.04's are newer than Debian
# 12's, so backward compatible). The bundle leaves them out; the dry run allows only them from
# outside the bundle and LibTorch/CUDA.
# shellcheck disable=SC2034
GRPO_SYSTEM_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so)'
