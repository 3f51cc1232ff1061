// The cuda device kind: Causeway devices on NVIDIA GPUs through the CUDA
// runtime and NVIDIA's libraries. docs/CUDA.md describes it.
//
// A function compiles to a dispatch program (causeway/backend/dispatch/
// program.h), the lowering the vulkan kind uses too; a device runs its
// dispatches as CUDA kernels (kernels.h) and its matrix products on
// cuBLASLt. Each Causeway device is one CUDA stream on a GPU, with memory
// from the GPU's stream-ordered pool and a completion thread that runs
// completions once the GPU has done the work (by events, in submission
// order). Copies go through pinned staging memory. Several Causeway devices
// may share a GPU.
#ifndef CAUSEWAY_BACKEND_CUDA_DEVICE_H_
#define CAUSEWAY_BACKEND_CUDA_DEVICE_H_

#include "absl/strings/string_view.h"
#include "causeway/backend/executable.h"

namespace causeway::backend::cuda {

inline constexpr absl::string_view kKindName = "cuda";

// The kind, registered (RegisterDeviceKind) on first use. Registering and
// compiling need no GPU; CreateDevice fails with UNAVAILABLE, saying what
// is missing, where the driver or the GPU is.
const DeviceKind& Kind();

}  // namespace causeway::backend::cuda

#endif  // CAUSEWAY_BACKEND_CUDA_DEVICE_H_
