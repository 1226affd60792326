#pragma once
/// \file lm/blas.hpp
/// Which BLAS the process's matrix products run on. Debian's libtorch does its float products
/// (linear layers, attention scores, their gradients) through the system's libblas.so.3, an
/// alternative that Debian points at the best implementation installed: the reference one
/// (netlib, package libblas3) unless OpenBLAS or BLIS is there. For train_lm that choice is the
/// speed and the bits: on a Xeon with AVX-512 the 128-token setting of docs/training-lm.md trains
/// at 6100 tokens per CPU-second on the reference BLAS (0.019 of the FMA roofline; 90 % of the
/// time in its sgemm_) and 48 400 on OpenBLAS 0.3.21 (libopenblas0-openmp; 0.15). Runs are
/// reproducible bit for bit only on the same BLAS (and, for OpenBLAS, the same kernel family,
/// which it picks from the CPU): the library, its configuration string and the kernel family go
/// into every train_lm output's provenance.

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <string>

namespace kvphase::lm {

struct blas_info {
  std::string name;     ///< "openblas", "blis", "reference" (netlib), or "unknown"
  std::string library;  ///< the file that provides sgemm_, symlinks resolved ("" if none is loaded)
  std::string config;   ///< OpenBLAS: openblas_get_config() and the kernel family (openblas_get_corename())
};

/// The BLAS that provides sgemm_ in this process (see the file comment). Its name comes from the
/// symbols of that library and its own dependencies (Debian's OpenBLAS libblas.so.3 is a thin
/// wrapper over libopenblas.so.0), not from the whole process: libtorch also loads LAPACK, which
/// may be OpenBLAS's while sgemm_ is the reference one.
inline blas_info blas_backend() {
  blas_info b{.name = "unknown", .library = "", .config = ""};
  void* const gemm = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (!gemm || !::dladdr(gemm, &info) || !info.dli_fname) return b;
  char real[PATH_MAX];
  b.library = ::realpath(info.dli_fname, real) ? std::string(real) : std::string(info.dli_fname);
  void* const lib = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);  // already loaded: no new load
  if (!lib) return b;
  using text_fn = char* (*)();
  if (void* const cfg = ::dlsym(lib, "openblas_get_config")) {
    b.name = "openblas";
    b.config = reinterpret_cast<text_fn>(cfg)();
    if (void* const core = ::dlsym(lib, "openblas_get_corename"))
      b.config += std::string(" (kernels: ") + reinterpret_cast<text_fn>(core)() + ")";
  } else if (::dlsym(lib, "bli_info_get_version_str")) {
    b.name = "blis";
  } else if (b.library.find("/blas/libblas.so") != std::string::npos) {
    b.name = "reference";  // Debian's netlib build (package libblas3)
  }
  ::dlclose(lib);
  return b;
}

}  // namespace kvphase::lm
