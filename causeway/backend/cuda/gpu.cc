#include "causeway/backend/cuda/gpu.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "causeway/backend/cuda/device.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::cuda {

absl::Status CudaStatus(int error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const auto e = static_cast<cudaError_t>(error);
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {

struct Machine {
  absl::Status status;
  std::vector<std::string> lines;
  std::vector<DeviceDescription> descriptions;
};

// What the driver says, asked once.
const Machine& TheMachine() {
  static const Machine* const machine = [] {
    auto* m = new Machine;
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      m->status = CudaStatus(e, "the cuda device kind found no GPU");
      cudaGetLastError();  // not sticky: clear it
      return m;
    }
    if (count == 0) {
      m->status = absl::UnavailableError("the cuda device kind found no GPU (the driver sees none)");
      return m;
    }
    int driver = 0;
    cudaDriverGetVersion(&driver);
    for (int i = 0; i < count; ++i) {
      cudaDeviceProp p{};
      if (const cudaError_t e = cudaGetDeviceProperties(&p, i); e != cudaSuccess) {
        m->status = CudaStatus(e, absl::StrCat("reading the properties of CUDA GPU ", i));
        return m;
      }
      DeviceDescription d;
      d.kind = std::string(kKindName);
      d.name = p.name;
      d.driver = absl::StrFormat("CUDA driver %d.%d, sm_%d%d", driver / 1000, (driver % 1000) / 10,
                                 p.major, p.minor);
      d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
      m->lines.push_back(absl::StrFormat("%s, sm_%d%d, CUDA driver %d.%d, %.1f GiB", p.name,
                                         p.major, p.minor, driver / 1000, (driver % 1000) / 10,
                                         static_cast<double>(p.totalGlobalMem) / (1u << 30)));
      m->descriptions.push_back(std::move(d));
    }
    return m;
  }();
  return *machine;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Gpu::List() {
  const Machine& m = TheMachine();
  CW_RETURN_IF_ERROR(m.status);
  return m.lines;
}

int Gpu::Count() {
  const Machine& m = TheMachine();
  return m.status.ok() ? static_cast<int>(m.lines.size()) : 0;
}

absl::StatusOr<Gpu*> Gpu::Get(int index) {
  const Machine& m = TheMachine();
  CW_RETURN_IF_ERROR(m.status);
  if (index < 0 || index >= static_cast<int>(m.lines.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("no CUDA GPU ", index, ": this machine has ", m.lines.size()));
  }
  static Mutex mu;
  static std::vector<Gpu*>* const gpus = new std::vector<Gpu*>;  // never destroyed
  MutexLock lock(&mu);
  if (gpus->empty()) gpus->resize(m.lines.size(), nullptr);
  Gpu*& gpu = (*gpus)[static_cast<size_t>(index)];
  if (gpu != nullptr) return gpu;
  CW_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(index), absl::StrCat("selecting CUDA GPU ", index)));
  // A pool of the GPU's own, keeping what is freed (the store's budget
  // bounds what is held) rather than handing it back at every sync.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = index;
  cudaMemPool_t pool = nullptr;
  CW_RETURN_IF_ERROR(CudaStatus(cudaMemPoolCreate(&pool, &props),
                                absl::StrCat("making a memory pool on CUDA GPU ", index)));
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  CW_RETURN_IF_ERROR(CudaStatus(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                                absl::StrCat("setting up the memory pool of CUDA GPU ", index)));
  gpu = new Gpu(index, m.descriptions[static_cast<size_t>(index)], pool);
  return gpu;
}

int64_t Gpu::FreeBytes() const {
  if (!MakeCurrent().ok()) return 0;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free);
}

absl::Status Gpu::MakeCurrent() const {
  return CudaStatus(cudaSetDevice(index_), absl::StrCat("selecting CUDA GPU ", index_));
}

}  // namespace causeway::backend::cuda
