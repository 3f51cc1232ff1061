#include "tools/blas_kernels.h"

#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <initializer_list>

extern "C" {
#include <cblas.h>
}

namespace causeway::tools {

namespace {

// 0: generic (SSE), 1: AVX2 and FMA, 2: AVX-512.
int CoreLevel(const char* core) {
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (strcasecmp(core, name) == 0) return 2;
  }
  for (const char* name : {"haswell", "zen"}) {
    if (strcasecmp(core, name) == 0) return 1;
  }
  return 0;
}

int CpuLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return 2;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
  return 0;
}

}  // namespace

void SelectBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* automatic = std::getenv("CAUSEWAY_BLAS_AUTO");
  if (automatic != nullptr && automatic[0] == '0') return;
  const char* core = openblas_get_corename();
  if (core == nullptr) return;
  const int cpu = CpuLevel();
  if (cpu <= CoreLevel(core)) return;
  if (setenv("OPENBLAS_CORETYPE", cpu == 2 ? "SkylakeX" : "Haswell", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: exec failed; carry on with the kernels OpenBLAS chose.
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace causeway::tools
