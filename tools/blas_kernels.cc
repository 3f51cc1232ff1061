#include "tools/blas_kernels.h"

#include <strings.h>
#include <unistd.h>

#include <cstdlib>

extern "C" {
#include <cblas.h>
}

namespace causeway::tools {

void SelectBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* automatic = std::getenv("CAUSEWAY_BLAS_AUTO");
  if (automatic != nullptr && automatic[0] == '0') return;
  const char* core = openblas_get_corename();
  if (core == nullptr || strcasecmp(core, "prescott") != 0) return;
  __builtin_cpu_init();
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    better = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    better = "Haswell";
  }
  if (better == nullptr) return;
  if (setenv("OPENBLAS_CORETYPE", better, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: exec failed; carry on with the generic kernels.
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace causeway::tools
