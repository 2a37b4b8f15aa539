// Which BLAS does LibTorch call? Debian's LibTorch goes through the libblas.so.3
// alternative, which is the reference BLAS (tens of times slower) unless OpenBLAS is
// installed. grpo-run checks this at start-up and warns loudly.
#pragma once

#include <string>

namespace grpo::core {

struct BlasInfo {
  std::string library_path;  // the resolved libblas/openblas/mkl file mapped in this process
  std::string implementation;  // "OpenBLAS", "MKL", "BLIS", "reference", "unknown"
  std::string details;       // e.g. openblas_get_config()
  bool is_reference = false;
  std::string openblas_core;     // openblas_get_corename(): the kernel set OpenBLAS chose
  // Set when OpenBLAS chose kernels older than the CPU supports (it does on VMs that mask
  // the CPU model): the OPENBLAS_CORETYPE value to use instead.
  std::string suggested_coretype;
};

// Inspects the libraries mapped into this process (LibTorch is linked, so its BLAS is).
BlasInfo detect_blas();

// Logs the BLAS in use and LibTorch's thread count; a loud warning for the reference BLAS.
void log_blas_status();

}  // namespace grpo::core
