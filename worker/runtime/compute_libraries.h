// Which BLAS and which CPU kernels this process computes with, as loaded (not as built): Debian's
// LibTorch and python3-torch call BLAS through the libblas.so.3 alternative, so the same program
// runs on the reference BLAS on one machine and on OpenBLAS on the next, 50x apart in sgemm. A
// trainer prints this once at start-up and warns when the reference BLAS does the work.
//
// Found through the dynamic linker (dlsym in the process's global scope, dladdr for the file):
// OpenBLAS and MKL by the functions each exports, Debian's BLIS and reference BLAS (netlib) by
// the folder of the libblas.so.3 that sgemm_ comes from. oneDNN, which LibTorch uses for
// convolutions, by its version and the instruction set it dispatches to. No LibTorch needed.
#pragma once

#include <optional>
#include <string>

namespace ddl {

struct ComputeLibraries {
  // The BLAS: "OpenBLAS 0.3.21", "BLIS (blis-pthread)", "MKL", "the reference BLAS (netlib)",
  // "an unrecognised BLAS", or empty when no sgemm_ is loaded.
  std::string blas;
  std::string blas_file;            // the file sgemm_ comes from, links resolved
  std::string blas_kernels;         // OpenBLAS's core ("Haswell")
  std::optional<int> blas_threads;  // as the library reports them
  bool reference_blas = false;
  std::string onednn;      // "oneDNN 2.6.3 (avx512_core_bf16)", or empty when not loaded
  std::string cpu_vector;  // the CPU's widest vector extension: "AVX-512", "AVX2", "SSE"
};

ComputeLibraries detect_compute_libraries();

// Sets the BLAS's own thread count (OpenBLAS, MKL; BLIS's setter is not exported by Debian's
// libblas.so.3) to `threads`; false when the BLAS has no such call. A trainer gives it its
// intra-op thread count: OpenBLAS otherwise takes OMP_NUM_THREADS or every core, and its
// results depend on its thread count, so the same job run under launch, mpirun or srun would end
// with different parameters.
bool set_blas_threads(int threads);

// One line: "BLAS: OpenBLAS 0.3.21, Haswell kernels, 1 thread(s)
// (/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3); oneDNN 2.6.3 (avx512_core_bf16);
// CPU: AVX-512".
std::string describe(const ComputeLibraries& libs);

// The warning for the reference BLAS (empty otherwise): what it costs and how to fix it.
std::string reference_blas_warning(const ComputeLibraries& libs);

}  // namespace ddl
