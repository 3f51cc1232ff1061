// Internal to the cuda kind: the Device of one Causeway device on a GPU
// (device.h). Its jobs are split by file: memory and copies in device.cc,
// launches (dispatches, host steps, loops and conditionals) in
// device_launch.cc; completions are the CompletionQueue's.
#ifndef CAUSEWAY_BACKEND_CUDA_DEVICE_INTERNAL_H_
#define CAUSEWAY_BACKEND_CUDA_DEVICE_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "causeway/backend/cuda/gpu.h"
#include "causeway/backend/cuda/kernels.h"
#include "causeway/backend/device.h"
#include "causeway/backend/dispatch/program.h"
#include "causeway/base/mutex.h"

namespace causeway::backend::cuda {

class CudaDevice;

// Bytes of one device's memory: a block of its GPU's pool.
class CudaAllocation final : public DeviceAllocation {
 public:
  CudaAllocation(CudaDevice* device, void* ptr, int64_t bytes)
      : DeviceAllocation(bytes), device_(device), ptr_(ptr) {}
  // Frees the block in the order of its device's stream (cudaFreeAsync):
  // work enqueued before on that stream still sees it.
  ~CudaAllocation() override;
  void* ptr() const { return ptr_; }
  CudaDevice* device() const { return device_; }

 private:
  CudaDevice* const device_;
  void* const ptr_;
};

// Runs completions on a thread of its own once the work enqueued on a
// stream before them has finished: Enqueue records an event on the stream
// and the thread waits for the events in order. Thread-safe. Bounded: an
// Enqueue waits while kMaxPending are outstanding, except on the
// completion thread itself (a completion that starts more work).
class CompletionQueue {
 public:
  static constexpr size_t kMaxPending = 1024;
  // What a completion keeps alive until it ran (staging memory).
  using Keep = std::shared_ptr<void>;

  CompletionQueue(const Gpu* gpu, void* stream, std::string device_name);
  // Waits for everything enqueued, then stops the thread.
  ~CompletionQueue();

  // `done` runs once the work enqueued on the stream so far has finished,
  // with its error (the stream's sticky error, naming the device) or OK.
  void Enqueue(Completion done, Keep keep = nullptr);
  // Waits until the work enqueued on the stream so far has finished.
  absl::Status Drain();

 private:
  struct Pending {
    void* event = nullptr;  // cudaEvent_t
    Completion done;
    Keep keep;
    absl::Status failed;  // the event could not be recorded
  };
  void Loop();
  void* NewEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Gpu* const gpu_;
  void* const stream_;
  const std::string device_name_;
  Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> free_events_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

// Pinned (page-locked) host memory for copies, kept for reuse in blocks of
// powers of two up to kMaxCachedBytes in all. Thread-safe.
class StagingPool {
 public:
  static constexpr int64_t kMaxCachedBytes = int64_t{256} << 20;
  ~StagingPool();
  // A block of at least `bytes`, returned to the pool when the last
  // reference goes.
  absl::StatusOr<std::shared_ptr<std::byte>> Take(int64_t bytes);

 private:
  void Give(std::byte* block, int64_t bytes);
  Mutex mu_;
  std::vector<std::pair<int64_t, std::byte*>> free_ ABSL_GUARDED_BY(mu_);
  int64_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

class CudaDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const DeviceSpec& spec, Gpu* gpu);
  ~CudaDevice() override;

  const DeviceDescription& description() const override { return description_; }
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) override;
  void CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
              Completion done) override;
  void CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
               Completion done) override;
  void CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst, const BoxCopy& box,
                  Completion done) override;
  void CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                  const BoxCopy& box, Completion done) override;
  absl::Status Load(const Executable& executable) override;
  void Launch(const Executable& executable, absl::Span<const DeviceAllocation* const> inputs,
              absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
              Completion done) override;
  // A stream runs its work in order: the next launches are enqueued while
  // the GPU runs the last.
  int max_launches_in_flight() const override { return 4; }

  const Gpu& gpu() const { return *gpu_; }
  void* stream() const { return stream_; }

 private:
  friend class CudaAllocation;
  CudaDevice(const DeviceSpec& spec, Gpu* gpu);

  // One launch's buffers as device addresses: the argument table
  // (dispatch::TableSlot order: inputs, outputs, temporaries, resident).
  struct Operands {
    std::vector<const void*> table;
    size_t inputs = 0, outputs = 0;
    std::byte* At(const dispatch::Ref& r) const;
  };

  // INVALID_ARGUMENT unless `a` is one of this device's allocations.
  absl::Status Mine(const DeviceAllocation& a) const;
  // The program's resident image on this GPU (its sub-programs' too when
  // `nested`).
  absl::StatusOr<const std::byte*> MakeResident(const dispatch::Program& program, bool nested);
  // Enqueues `program` over `ops` (its temporaries in ops, or its own when
  // the temporaries slot is null) on the stream; host steps wait for the
  // stream first. Returns once everything is enqueued.
  absl::Status Enqueue(const dispatch::Program& program, Operands ops, const RunContext& context);
  absl::Status EnqueueSegment(const dispatch::Program& program, const dispatch::Segment& segment,
                              const Operands& ops);
  absl::Status RunHostStep(const dispatch::Program& program, const dispatch::HostStep& h,
                           const Operands& ops, const RunContext& context);
  absl::Status RunControlFlow(const dispatch::ControlFlow& cf, const Operands& ops,
                              const RunContext& context);
  // Synchronous copies between device addresses and host memory, on the
  // stream (after what is enqueued).
  absl::Status Read(const void* from, void* to, int64_t bytes);
  absl::Status Write(const void* from, void* to, int64_t bytes);
  // Enqueues the copies of `box` between two row-major arrays at `src` and
  // `dst` (device or pinned host memory), as the fewest 2-D copies.
  absl::Status EnqueueBox(const void* src, void* dst, const BoxCopy& box);

  const DeviceId id_;
  Gpu* const gpu_;
  DeviceDescription description_;
  void* stream_ = nullptr;  // cudaStream_t
  Libraries libraries_;     // cuBLASLt handle and this stream's workspace
  StagingPool staging_;
  std::unique_ptr<CompletionQueue> completions_;
};

}  // namespace causeway::backend::cuda

#endif  // CAUSEWAY_BACKEND_CUDA_DEVICE_INTERNAL_H_
