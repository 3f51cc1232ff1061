// Internal to the cuda kind: one physical NVIDIA GPU, shared by the
// Causeway devices made on it. It owns the GPU's stream-ordered memory pool
// (cudaMallocFromPoolAsync; never managed memory), which keeps freed memory
// for reuse instead of returning it to the driver, and says what the GPU is.
// The CUDA runtime is linked statically; the driver is the machine's.
#ifndef CAUSEWAY_BACKEND_CUDA_GPU_H_
#define CAUSEWAY_BACKEND_CUDA_GPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/backend/device.h"

namespace causeway::backend::cuda {

// OK for cudaSuccess (0); otherwise the error as a Status naming `what`:
// RESOURCE_EXHAUSTED for out of memory, UNAVAILABLE where there is no
// usable driver or GPU, INTERNAL for the rest (an illegal address, a
// failed launch: the GPU's context is then lost for good).
absl::Status CudaStatus(int error, absl::string_view what);

// Thread-safe; never destroyed (the process's GPUs are made once).
class Gpu {
 public:
  // This machine's CUDA GPUs, one line each ("NVIDIA H100 80GB HBM3, sm_90,
  // driver 13.0, 79.1 GiB"), or UNAVAILABLE saying why there are none (no
  // driver, a driver older than the runtime, no GPU).
  static absl::StatusOr<std::vector<std::string>> List();
  // GPU `index` (of List()), made on first use. UNAVAILABLE as List;
  // INVALID_ARGUMENT for an index past them.
  static absl::StatusOr<Gpu*> Get(int index);
  static int Count();

  int index() const { return index_; }
  const DeviceDescription& description() const { return description_; }
  // The pool devices allocate from (a cudaMemPool_t).
  void* pool() const { return pool_; }
  // Bytes free on the GPU now (cudaMemGetInfo), 0 if unknown.
  int64_t FreeBytes() const;
  // Makes this GPU the calling thread's current device: every CUDA call
  // of the kind's threads (device streams, completion threads, whoever
  // frees an allocation) is preceded by it.
  absl::Status MakeCurrent() const;

 private:
  Gpu(int index, DeviceDescription description, void* pool)
      : index_(index), description_(std::move(description)), pool_(pool) {}

  const int index_;
  const DeviceDescription description_;
  void* const pool_;
};

}  // namespace causeway::backend::cuda

#endif  // CAUSEWAY_BACKEND_CUDA_GPU_H_
