// CudaDevice's memory, copies and completions, and the cuda kind itself.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/cuda/device.h"
#include "causeway/backend/cuda/device_internal.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::cuda {
namespace {

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

// cuBLASLt's workspace per device (stream): what its heuristics are asked
// to fit in.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

}  // namespace

CudaAllocation::~CudaAllocation() {
  if (ptr_ == nullptr) return;
  if (device_->gpu().MakeCurrent().ok()) cudaFreeAsync(ptr_, S(device_->stream()));
}

// --- CompletionQueue ---

CompletionQueue::CompletionQueue(const Gpu* gpu, void* stream, std::string device_name)
    : gpu_(gpu), stream_(stream), device_name_(std::move(device_name)) {
  thread_ = std::thread([this] { Loop(); });
  thread_id_ = thread_.get_id();
}

CompletionQueue::~CompletionQueue() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  for (void* e : free_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

void* CompletionQueue::NewEvent() {
  if (!free_events_.empty()) {
    void* e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  // Blocking: the completion thread sleeps in cudaEventSynchronize rather
  // than spinning on a core the device streams need.
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync) !=
      cudaSuccess) {
    return nullptr;
  }
  return e;
}

void CompletionQueue::Enqueue(Completion done, Keep keep) {
  const absl::Status current = gpu_->MakeCurrent();
  mu_.Lock();
  if (std::this_thread::get_id() != thread_id_) {
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pending_.size() < kMaxPending;
    });
  }
  Pending p;
  p.done = std::move(done);
  p.keep = std::move(keep);
  p.failed = current;
  if (p.failed.ok()) {
    p.event = NewEvent();
    if (p.event == nullptr) {
      p.failed = absl::ResourceExhaustedError(
          absl::StrCat("no CUDA event could be made for ", device_name_));
    } else if (const cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(p.event),
                                                     S(stream_));
               e != cudaSuccess) {
      p.failed = CudaStatus(e, absl::StrCat("the GPU refused work of ", device_name_));
      free_events_.push_back(p.event);
      p.event = nullptr;
    }
  }
  pending_.push_back(std::move(p));
  mu_.UnlockWakingFirst();
}

absl::Status CompletionQueue::Drain() {
  CW_RETURN_IF_ERROR(gpu_->MakeCurrent());
  return CudaStatus(cudaStreamSynchronize(S(stream_)),
                    absl::StrCat("the GPU failed work of ", device_name_));
}

void CompletionQueue::Loop() {
  (void)gpu_->MakeCurrent();
  while (true) {
    Pending p;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !pending_.empty() || stopping_;
      });
      if (pending_.empty()) return;  // stopping, nothing in flight
      p.event = pending_.front().event;
    }
    absl::Status status;
    if (p.event != nullptr) {
      status = CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(p.event)),
                          absl::StrCat("the GPU failed work of ", device_name_));
    }
    {
      MutexLock lock(&mu_);
      p = std::move(pending_.front());
      pending_.pop_front();
      if (p.event != nullptr) free_events_.push_back(p.event);
    }
    if (!p.failed.ok()) status = p.failed;
    // The completion first: it may still read what `keep` holds (a
    // fetch's staging bytes).
    std::move(p.done)(std::move(status));
    p.keep.reset();
  }
}

// --- StagingPool ---

StagingPool::~StagingPool() {
  MutexLock lock(&mu_);
  for (const auto& [bytes, block] : free_) cudaFreeHost(block);
}

absl::StatusOr<std::shared_ptr<std::byte>> StagingPool::Take(int64_t bytes) {
  int64_t size = 64 << 10;
  while (size < bytes) size *= 2;
  std::byte* block = nullptr;
  {
    MutexLock lock(&mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->first == size) {
        block = it->second;
        cached_ -= size;
        free_.erase(it);
        break;
      }
    }
  }
  if (block == nullptr) {
    void* p = nullptr;
    CW_RETURN_IF_ERROR(CudaStatus(cudaMallocHost(&p, static_cast<size_t>(size)),
                                  absl::StrCat("pinned staging memory of ", size, " bytes")));
    block = static_cast<std::byte*>(p);
  }
  return std::shared_ptr<std::byte>(block, [this, size](std::byte* b) { Give(b, size); });
}

void StagingPool::Give(std::byte* block, int64_t bytes) {
  {
    MutexLock lock(&mu_);
    if (cached_ + bytes <= kMaxCachedBytes) {
      free_.emplace_back(bytes, block);
      cached_ += bytes;
      return;
    }
  }
  cudaFreeHost(block);
}

// --- CudaDevice: memory and copies ---

CudaDevice::CudaDevice(const DeviceSpec& spec, Gpu* gpu) : id_(spec.id), gpu_(gpu) {
  description_ = gpu->description();
  description_.kind = std::string(kKindName);
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const DeviceSpec& spec, Gpu* gpu) {
  auto device = std::unique_ptr<CudaDevice>(new CudaDevice(spec, gpu));
  const std::string name = spec.id.ToString();
  CW_RETURN_IF_ERROR(gpu->MakeCurrent());
  cudaStream_t stream = nullptr;
  CW_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                absl::StrCat("making the stream of ", name)));
  device->stream_ = stream;
  cublasLtHandle_t lt = nullptr;
  if (const cublasStatus_t s = cublasLtCreate(&lt); s != CUBLAS_STATUS_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("cuBLASLt could not start for ", name,
                                               " (cublasStatus_t ", static_cast<int>(s), ")"));
  }
  device->libraries_.cublaslt = lt;
  CW_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&device->libraries_.workspace, kWorkspaceBytes),
                                absl::StrCat("cuBLASLt's workspace on ", name)));
  device->libraries_.workspace_bytes = kWorkspaceBytes;
  device->completions_ = std::make_unique<CompletionQueue>(gpu, stream, name);
  return device;
}

CudaDevice::~CudaDevice() {
  completions_.reset();  // drains what is in flight
  if (!gpu_->MakeCurrent().ok()) return;
  if (stream_ != nullptr) cudaStreamSynchronize(S(stream_));
  if (libraries_.workspace != nullptr) cudaFree(libraries_.workspace);
  if (libraries_.cublaslt != nullptr) {
    cublasLtDestroy(static_cast<cublasLtHandle_t>(libraries_.cublaslt));
  }
  if (stream_ != nullptr) cudaStreamDestroy(S(stream_));
}

absl::Status CudaDevice::Mine(const DeviceAllocation& a) const {
  const auto* c = dynamic_cast<const CudaAllocation*>(&a);
  if (c == nullptr || c->device() != this) {
    return absl::InvalidArgumentError(
        absl::StrCat("an allocation of another device was given to ", id_.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> CudaDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocating ", bytes, " bytes on ", id_.ToString()));
  }
  void* p = nullptr;
  if (bytes > 0) {
    CW_RETURN_IF_ERROR(gpu_->MakeCurrent());
    CW_RETURN_IF_ERROR(CudaStatus(
        cudaMallocFromPoolAsync(&p, static_cast<size_t>(bytes),
                                static_cast<cudaMemPool_t>(gpu_->pool()), S(stream_)),
        absl::StrCat("allocating ", bytes, " bytes on ", id_.ToString(), " (",
                     description_.name, ")")));
  }
  return std::unique_ptr<DeviceAllocation>(std::make_unique<CudaAllocation>(this, p, bytes));
}

absl::Status CudaDevice::EnqueueBox(const void* src, void* dst, const BoxCopy& box) {
  const size_t rank = box.extent.size();
  const int64_t eb = box.element_bytes;
  if (box.bytes() == 0) return absl::OkStatus();
  // The innermost dimensions both arrays hold whole are one contiguous run
  // with the first that is not.
  size_t k = rank;  // dims [k, rank) make the run
  int64_t run = eb;
  while (k > 0) {
    const size_t d = k - 1;
    run *= box.extent[d];
    k = d;
    if (box.extent[d] != box.src_dims[d] || box.extent[d] != box.dst_dims[d]) break;
  }
  std::vector<int64_t> src_stride(rank, eb), dst_stride(rank, eb);
  for (size_t d = rank; d-- > 1;) {
    src_stride[d - 1] = src_stride[d] * box.src_dims[d];
    dst_stride[d - 1] = dst_stride[d] * box.dst_dims[d];
  }
  // One 2-D copy per coordinate of the dimensions outside [k-1, rank).
  const size_t rows_dim = k > 0 ? k - 1 : 0;
  const int64_t height = k > 0 ? box.extent[rows_dim] : 1;
  const int64_t src_pitch = k > 0 ? src_stride[rows_dim] : run;
  const int64_t dst_pitch = k > 0 ? dst_stride[rows_dim] : run;
  const size_t outer = k > 0 ? rows_dim : 0;
  std::vector<int64_t> c(outer, 0);
  const auto* s = static_cast<const std::byte*>(src);
  auto* t = static_cast<std::byte*>(dst);
  while (true) {
    int64_t so = 0, to = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t at = d < outer ? c[d] : 0;
      so += (box.src_offset[d] + at) * src_stride[d];
      to += (box.dst_offset[d] + at) * dst_stride[d];
    }
    CW_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy2DAsync(t + to, static_cast<size_t>(dst_pitch), s + so,
                          static_cast<size_t>(src_pitch), static_cast<size_t>(run),
                          static_cast<size_t>(height), cudaMemcpyDefault, S(stream_)),
        absl::StrCat("a copy on ", id_.ToString())));
    size_t d = outer;
    while (d > 0 && ++c[d - 1] == box.extent[d - 1]) c[--d] = 0;
    if (d == 0) break;
  }
  return absl::OkStatus();
}

void CudaDevice::CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
                        Completion done) {
  absl::Status s = Mine(dst);
  if (s.ok()) s = box.Validate(box.src_array_bytes(), dst.bytes());
  absl::StatusOr<std::shared_ptr<std::byte>> staging =
      s.ok() ? staging_.Take(box.bytes()) : absl::StatusOr<std::shared_ptr<std::byte>>(s);
  if (s.ok()) s = staging.status();
  if (s.ok()) s = gpu_->MakeCurrent();
  if (!s.ok()) return std::move(done)(std::move(s));
  // The box, dense, into pinned memory; then from there into place.
  BoxCopy dense = box;
  dense.dst_dims = box.extent;
  dense.dst_offset.assign(box.extent.size(), 0);
  CopyHostBox(src, staging->get(), dense);
  BoxCopy from_dense = box;
  from_dense.src_dims = box.extent;
  from_dense.src_offset.assign(box.extent.size(), 0);
  s = EnqueueBox(staging->get(), static_cast<CudaAllocation&>(dst).ptr(), from_dense);
  completions_->Enqueue(
      [s, done = std::move(done)](absl::Status gpu) mutable {
        std::move(done)(s.ok() ? std::move(gpu) : s);
      },
      *std::move(staging));
}

void CudaDevice::CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
                         Completion done) {
  absl::Status s = Mine(src);
  if (s.ok()) s = box.Validate(src.bytes(), box.dst_array_bytes());
  absl::StatusOr<std::shared_ptr<std::byte>> staging =
      s.ok() ? staging_.Take(box.bytes()) : absl::StatusOr<std::shared_ptr<std::byte>>(s);
  if (s.ok()) s = staging.status();
  if (s.ok()) s = gpu_->MakeCurrent();
  if (!s.ok()) return std::move(done)(std::move(s));
  BoxCopy to_dense = box;
  to_dense.dst_dims = box.extent;
  to_dense.dst_offset.assign(box.extent.size(), 0);
  s = EnqueueBox(static_cast<const CudaAllocation&>(src).ptr(), staging->get(), to_dense);
  BoxCopy from_dense = box;
  from_dense.src_dims = box.extent;
  from_dense.src_offset.assign(box.extent.size(), 0);
  std::byte* staged = staging->get();
  completions_->Enqueue(
      [s, staged, dst, from_dense, done = std::move(done)](absl::Status gpu) mutable {
        if (s.ok() && gpu.ok()) CopyHostBox(staged, dst, from_dense);
        std::move(done)(s.ok() ? std::move(gpu) : s);
      },
      *std::move(staging));
}

void CudaDevice::CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst,
                            const BoxCopy& box, Completion done) {
  absl::Status s = Mine(src);
  if (s.ok()) s = Mine(dst);
  if (s.ok()) s = box.Validate(src.bytes(), dst.bytes());
  if (s.ok()) s = gpu_->MakeCurrent();
  if (!s.ok()) return std::move(done)(std::move(s));
  s = EnqueueBox(static_cast<const CudaAllocation&>(src).ptr(),
                 static_cast<CudaAllocation&>(dst).ptr(), box);
  completions_->Enqueue([s, done = std::move(done)](absl::Status gpu) mutable {
    std::move(done)(s.ok() ? std::move(gpu) : s);
  });
}

void CudaDevice::CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                            const BoxCopy& box, Completion done) {
  auto* other = dynamic_cast<CudaDevice*>(&peer);
  if (other == nullptr || other->gpu_ != gpu_) {
    // Another kind, or another GPU: through the host.
    Device::CopyToPeer(src, peer, dst, box, std::move(done));
    return;
  }
  absl::Status s = Mine(src);
  if (s.ok()) s = other->Mine(dst);
  if (s.ok()) s = box.Validate(src.bytes(), dst.bytes());
  if (s.ok()) s = gpu_->MakeCurrent();
  if (!s.ok()) return std::move(done)(std::move(s));
  // The destination is the peer's: its stream made it (stream-ordered
  // memory), so this stream waits for the peer's work so far, copies, and
  // the peer's stream waits for the copy before anything it does next
  // (a launch reading it, the free).
  cudaEvent_t peer_ready = nullptr, copied = nullptr;
  s = CudaStatus(cudaEventCreateWithFlags(&peer_ready, cudaEventDisableTiming),
                 "an event for a copy between devices of one GPU");
  if (s.ok()) {
    s = CudaStatus(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming),
                   "an event for a copy between devices of one GPU");
  }
  if (s.ok()) s = CudaStatus(cudaEventRecord(peer_ready, S(other->stream_)), "a peer copy");
  if (s.ok()) s = CudaStatus(cudaStreamWaitEvent(S(stream_), peer_ready, 0), "a peer copy");
  if (s.ok()) {
    s = EnqueueBox(static_cast<const CudaAllocation&>(src).ptr(),
                   static_cast<CudaAllocation&>(dst).ptr(), box);
  }
  if (s.ok()) s = CudaStatus(cudaEventRecord(copied, S(stream_)), "a peer copy");
  if (s.ok()) s = CudaStatus(cudaStreamWaitEvent(S(other->stream_), copied, 0), "a peer copy");
  // Destroying an event with work pending on it is allowed: it is released
  // once that work is done.
  if (peer_ready != nullptr) cudaEventDestroy(peer_ready);
  if (copied != nullptr) cudaEventDestroy(copied);
  completions_->Enqueue([s, done = std::move(done)](absl::Status gpu) mutable {
    std::move(done)(s.ok() ? std::move(gpu) : s);
  });
}

// --- The kind ---

namespace {

std::atomic<int> g_selected_gpu{-1};

// --gpu N, else CAUSEWAY_CUDA_GPU=N, else -1.
absl::StatusOr<int> ChosenGpu() {
  int index = g_selected_gpu.load();
  if (index >= 0) return index;
  return SettingIndex("CAUSEWAY_CUDA_GPU");
}

absl::StatusOr<Gpu*> GpuFor(const DeviceSpec& spec) {
  CW_ASSIGN_OR_RETURN(int index, ChosenGpu());
  if (index < 0) {
    const int n = Gpu::Count();
    index = n > 0 ? spec.local_index % n : 0;
  }
  return Gpu::Get(index);
}

class CudaKind final : public DeviceKind {
 public:
  absl::string_view name() const override { return kKindName; }
  absl::StatusOr<std::shared_ptr<const Executable>> Compile(
      const ir::Function& function) const override {
    CW_ASSIGN_OR_RETURN(std::shared_ptr<const dispatch::Program> program,
                        dispatch::Program::Compile(function, {std::string(kKindName), true}));
    return std::shared_ptr<const Executable>(std::move(program));
  }
  absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) const override {
    CW_ASSIGN_OR_RETURN(Gpu * gpu, GpuFor(spec));
    CW_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, CudaDevice::Create(spec, gpu));
    return std::unique_ptr<Device>(std::move(device));
  }
  absl::StatusOr<DeviceDescription> Describe(const DeviceSpec& spec) const override {
    CW_ASSIGN_OR_RETURN(Gpu * gpu, GpuFor(spec));
    return gpu->description();
  }
  absl::StatusOr<std::vector<std::string>> ListDevices() const override { return Gpu::List(); }
  absl::Status SelectDevice(int index) const override {
    if (index >= 0) {
      CW_ASSIGN_OR_RETURN(std::vector<std::string> gpus, Gpu::List());
      if (index >= static_cast<int>(gpus.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("no CUDA GPU ", index, ": this machine has ", gpus.size()));
      }
    }
    g_selected_gpu.store(index);
    return absl::OkStatus();
  }
};

}  // namespace

const DeviceKind& Kind() {
  static const DeviceKind& kind = RegisterDeviceKind(std::make_unique<CudaKind>());
  return kind;
}

}  // namespace causeway::backend::cuda
