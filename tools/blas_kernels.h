// Choosing OpenBLAS's kernels for this CPU before any computation runs.
#ifndef CAUSEWAY_TOOLS_BLAS_KERNELS_H_
#define CAUSEWAY_TOOLS_BLAS_KERNELS_H_

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

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_BLAS_KERNELS_H_
