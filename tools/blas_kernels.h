// Choosing OpenBLAS's kernels for this CPU before any computation runs.
#ifndef CAUSEWAY_TOOLS_BLAS_KERNELS_H_
#define CAUSEWAY_TOOLS_BLAS_KERNELS_H_

#include <string>

namespace causeway::tools {

// OpenBLAS picks its GEMM kernels from the CPU model when the library loads.
// Debian bookworm's OpenBLAS 0.3.21 does not know recent CPUs: it falls back
// to its generic SSE3 kernels ("Prescott") on recent Xeons, 2-3x slower than
// the AVX2 or AVX-512 ones, and to its AVX2 kernels ("Haswell") on AMD Zen 5,
// half the speed of its AVX-512 ones there. If the CPU can run a wider
// kernel than the one chosen (AVX-512: SkylakeX; AVX2 and FMA: Haswell) and
// OPENBLAS_CORETYPE is unset, this sets it and re-executes the program with
// the same arguments, so the library loads again with those kernels. It
// returns (doing nothing) in every other case, including when re-executing
// fails.
// CAUSEWAY_BLAS_AUTO=0 turns it off. Call first thing in main().
void SelectBlasKernels(char** argv);

// The OpenBLAS kernels this process runs with, for the start of a command's
// output: the library's core name, the widest this CPU can run, and whether
// OPENBLAS_CORETYPE holds the library to narrower ones than that.
struct BlasKernels {
  std::string core;      // OpenBLAS's name, e.g. "Haswell"
  std::string cpu_best;  // "SkylakeX", "Haswell" or "generic"
  bool narrowed = false;
};
BlasKernels DescribeBlasKernels();
// One line, no newline: "BLAS: OpenBLAS Haswell kernels (AVX2)", or, when
// narrowed, a warning naming OPENBLAS_CORETYPE and the measured cost.
std::string BlasKernelsLine(const BlasKernels& blas);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_BLAS_KERNELS_H_
