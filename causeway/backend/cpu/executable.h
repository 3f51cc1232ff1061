// The CPU backend: compiles an ir::Function once into an Executable (the
// device seam's, causeway/backend/executable.h) that a device thread runs
// over its own shards, with Eigen and BLAS kernels.
#ifndef CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_
#define CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "causeway/backend/executable.h"
#include "causeway/ir/function.h"

namespace causeway::backend::cpu {

using backend::CollectiveOps;
using backend::Executable;
using backend::RunContext;

inline constexpr absl::string_view kKindName = "cpu";

// The cpu kind's executables: run over host memory on the calling thread.
class HostExecutable : public Executable {
 public:
  // Runs the function. `inputs[i]` points at parameter i's bytes (row-major,
  // shape function().parameter_shape(i)); `outputs[i]` at preallocated space
  // for result i. Inputs are never written. Thread-safe: concurrent runs do
  // not share temporaries.
  virtual absl::Status Run(absl::Span<const void* const> inputs,
                           absl::Span<void* const> outputs,
                           const RunContext& context) const = 0;

 protected:
  explicit HostExecutable(ir::Function function) : Executable(std::move(function)) {}
};

// Verifies `function` and compiles it. INVALID_ARGUMENT if it does not
// verify. Chains of element-wise ops run fused, over chunks that stay in
// cache, unless `fuse_elementwise` is false (for comparing the two).
absl::StatusOr<std::shared_ptr<const HostExecutable>> Compile(const ir::Function& function,
                                                              bool fuse_elementwise = true);

// `executable` as the cpu kind's, or INVALID_ARGUMENT naming its function
// when another kind compiled it.
absl::StatusOr<const HostExecutable*> AsHost(const Executable& executable);

// The CPU device kind, registered (RegisterDeviceKind) on first use.
const DeviceKind& Kind();

}  // namespace causeway::backend::cpu

#endif  // CAUSEWAY_BACKEND_CPU_EXECUTABLE_H_
