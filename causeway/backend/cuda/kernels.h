// Internal to the cuda kind: the dispatch kernels (causeway/backend/
// dispatch/kernels.h states each one's contract) as CUDA kernels, compiled
// by nvcc for sm_80 and sm_90 (with PTX), and the matrix products on
// cuBLASLt. Plain types only, so that the kind's C++ needs no CUDA header
// to call them; every function enqueues work on a stream and returns at
// once.
#ifndef CAUSEWAY_BACKEND_CUDA_KERNELS_H_
#define CAUSEWAY_BACKEND_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "causeway/backend/dispatch/kernels.h"

namespace causeway::backend::cuda {

// One dispatch with its operands resolved to device addresses.
struct KernelArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  const void* d = nullptr;
  void* out = nullptr;
  // The dispatch's int32 parameter block in device memory (null: none),
  // and the same block's bytes on the host, for what is decided when the
  // work is enqueued (a matrix product's shapes, a fused run's operands).
  const int32_t* params = nullptr;
  const int32_t* host_params = nullptr;
  uint32_t n = 0, op = 0, x = 0, y = 0;
  // The lowering's workgroup counts (what the vulkan kind dispatches); a
  // kernel chooses its own grid.
  uint32_t groups[3] = {1, 1, 1};
  // kFusedF32: the launch's argument table, the device address of each
  // slot (dispatch::TableSlot: the launch's inputs, then its outputs, its
  // temporaries, its resident image), which the parameter block's (slot,
  // offset) pairs name.
  const void* const* table = nullptr;
  int table_size = 0;
};

// What the kernels share on one GPU: a cuBLASLt handle (cublasLtHandle_t)
// and a workspace for it in device memory.
struct Libraries {
  void* cublaslt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // TF32 tensor-core products for f32 (CUBLAS_COMPUTE_32F_FAST_TF32);
  // false: full f32 (CUBLAS_COMPUTE_32F), as the other kinds compute.
  bool tf32 = false;
};

// Enqueues `kernel` over `args` on `stream` (a cudaStream_t). Returns 0 once
// enqueued, else an error code (a cudaError_t, or a cuBLASLt status for a
// matrix product) with `*error` saying what failed and why.
int Launch(dispatch::Kernel kernel, const KernelArgs& args, const Libraries& libs,
           void* stream, std::string* error);

// Enqueues a kernel that keeps the GPU busy for `micros` microseconds (the
// IR's delay), by the GPU's global timer. Returns as Launch.
int LaunchDelay(int64_t micros, void* stream, std::string* error);

}  // namespace causeway::backend::cuda

#endif  // CAUSEWAY_BACKEND_CUDA_KERNELS_H_
