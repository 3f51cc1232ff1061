// The device kinds built into this build of Causeway: `cpu` always, and
// `vulkan` when it was built with Vulkan (CAUSEWAY_HAVE_VULKAN). Processes
// that make devices or compile for them (workers, embedded clusters, the
// client's compiler) register them once before looking a kind up.
#ifndef CAUSEWAY_BACKEND_BUILTIN_KINDS_H_
#define CAUSEWAY_BACKEND_BUILTIN_KINDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace causeway::backend {

// Registers the built-in kinds (RegisterDeviceKind). Idempotent,
// thread-safe, and touches no device: a kind whose hardware is missing
// fails only when a device of it is made.
void RegisterBuiltinKinds();

// This machine's GPUs as the GPU kind sees them, one line each ("0:
// llvmpipe (LLVM 15.0.6, 256 bits), driver ..., 2.0 GiB"), or UNAVAILABLE
// saying why there are none (also when this build has no GPU kind).
absl::StatusOr<std::vector<std::string>> ListGpus();

// Makes every device of the GPU kind made by this process use GPU `index`
// of ListGpus() (by default device i uses GPU i modulo their number).
// INVALID_ARGUMENT naming the GPUs there are when `index` is not one of
// them; UNAVAILABLE when there are none. Call before devices are made.
absl::Status SelectGpu(int index);

}  // namespace causeway::backend

#endif  // CAUSEWAY_BACKEND_BUILTIN_KINDS_H_
