// The CPU backend: compiles an ir::Function once into an Executable (the
// device seam's, causeway/backend/executable.h) that a device thread runs
// over its own shards, with Eigen and BLAS kernels.
#ifndef CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_
#define CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/backend/executable.h"
#include "causeway/ir/function.h"

namespace causeway::backend::cpu {

using backend::CollectiveOps;
using backend::Executable;
using backend::RunContext;

inline constexpr absl::string_view kKindName = "cpu";

// Verifies `function` and compiles it. INVALID_ARGUMENT if it does not
// verify. Chains of element-wise ops run fused, over chunks that stay in
// cache, unless `fuse_elementwise` is false (for comparing the two).
absl::StatusOr<std::shared_ptr<const Executable>> Compile(const ir::Function& function,
                                                          bool fuse_elementwise = true);

// The CPU device kind, registered (RegisterDeviceKind) on first use.
const DeviceKind& Kind();

}  // namespace causeway::backend::cpu

#endif  // CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_
