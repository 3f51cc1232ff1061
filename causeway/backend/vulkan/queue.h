// Internal to the vulkan kind: one Causeway device's submission order on its
// GPU (device_internal.h, VulkanDevice, owns one). A DeviceQueue holds the
// device's timeline semaphore, its command pool with the free and the idle
// recorded command buffers, the submissions in flight and the completion
// thread that runs their completions once the GPU finished them. The GPU's
// queue, memory pool and pipelines are shared with the other devices there
// (gpu.h); what goes into a command buffer (copies, dispatches,
// collectives) is the device's to record.
#ifndef CAUSEWAY_BACKEND_VULKAN_QUEUE_H_
#define CAUSEWAY_BACKEND_VULKAN_QUEUE_H_

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/backend/device.h"
#include "causeway/backend/vulkan/executable.h"
#include "causeway/backend/vulkan/gpu.h"
#include "causeway/backend/vulkan/profile.h"
#include "causeway/base/mutex.h"

namespace causeway::backend::vulkan {

// The submissions of one device, in order, each signalling the next value
// of the device's timeline semaphore. Owned by its device (VulkanDevice).
// Thread-safe: any thread may submit, the completion thread included (a
// completion starting more work); completions run on the completion thread.
class DeviceQueue {
 public:
  // A command buffer recorded once for one segment of one executable, with
  // its argument table (kernels.h, Push): later launches of that segment
  // write their buffers' addresses into the table and submit it again.
  struct Recorded {
    uint64_t executable = 0;  // VulkanExecutable::id()
    size_t segment = 0;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    std::unique_ptr<VulkanAllocation> table;  // host-visible: one address per slot
    bool reuse = true;                        // false: freed once done (profiled)
  };

  // Records a segment's dispatches into `cb`, their operands as offsets
  // into the slots of the argument table at device address `table`: the
  // timer of those dispatches (collected once the GPU ran them), or null
  // when they are not timed. Runs with the command pool locked.
  using RecordSegmentFn = absl::FunctionRef<absl::StatusOr<std::unique_ptr<DispatchTimer>>(
      VkCommandBuffer cb, uint64_t table)>;

  // The queue of device `device` on `gpu`, its completion thread started.
  // INTERNAL when the driver makes no semaphore or command pool.
  static absl::StatusOr<std::unique_ptr<DeviceQueue>> Create(DeviceId device, Gpu* gpu);
  // Returns once every submission completed (the completion thread runs
  // what is still in flight), then frees the command pool and semaphore.
  // REQUIRES: nothing is submitted any more.
  ~DeviceQueue();
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  // Records with `record` and submits one command buffer; `done` runs on the
  // completion thread when the GPU finished it (or at once with the error
  // if recording or submitting failed). `keep` lives until then.
  void Submit(const std::function<absl::Status(VkCommandBuffer)>& record,
              std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done);

  // Segment `index` of `exe`: its command buffer as recorded by an earlier
  // launch when one is idle, else recorded now with `record` into a new
  // command buffer with a new argument table of `table_bytes` (kept for
  // later launches). With `once` (dispatch timing, CAUSEWAY_VULKAN_PROFILE)
  // it is recorded for this launch alone and freed once done. Errors: those
  // of allocating the table (RESOURCE_EXHAUSTED) or the command buffer, and
  // of `record`.
  absl::StatusOr<std::unique_ptr<Recorded>> ReuseOrRecord(const VulkanExecutable& exe,
                                                          size_t index, bool once,
                                                          int64_t table_bytes,
                                                          RecordSegmentFn record);
  // Submits `rec`'s command buffer, as Submit; it goes back among the idle
  // ones (at most kMaxIdleRecorded, the least recently used beyond that
  // freed) once the GPU finished it.
  void SubmitRecorded(std::unique_ptr<Recorded> rec,
                      std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done);

  // Waits until the GPU finished everything submitted for this device so
  // far: what a host step does first, since it reads and writes through
  // the host what launches still in flight may be writing. INTERNAL when
  // the GPU failed the work.
  absl::Status AwaitSubmitted();

  // Segments recorded by ReuseOrRecord so far in this process, on every
  // device (vulkan::SegmentRecordings).
  static int64_t Recordings();

 private:
  // Idle recorded command buffers kept, the most recently used first.
  static constexpr size_t kMaxIdleRecorded = 64;

  struct Pending {
    uint64_t value = 0;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    std::unique_ptr<Recorded> recorded;  // set: cb is its, back to idle_ when done
    std::vector<std::unique_ptr<VulkanAllocation>> keep;
    Completion done;
  };

  DeviceQueue(DeviceId device, Gpu* gpu) : id_(device), gpu_(gpu) {}
  absl::Status Init();

  // A command buffer of the pool, reset, or an error.
  absl::StatusOr<VkCommandBuffer> NewCommandBuffer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_);
  absl::StatusOr<std::unique_ptr<Recorded>> Record(const VulkanExecutable& exe, size_t index,
                                                   int64_t table_bytes, RecordSegmentFn record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_);
  // A finished recorded command buffer back among the idle ones; the least
  // recently used beyond kMaxIdleRecorded is freed.
  void Idle(std::unique_ptr<Recorded> rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_);
  // Submits the recorded `cb` (`rec`'s if set); as Submit.
  void SubmitCommandBuffer(VkCommandBuffer cb, std::unique_ptr<Recorded> rec,
                           std::vector<std::unique_ptr<VulkanAllocation>> keep,
                           Completion done);
  void CompletionLoop();

  const DeviceId id_;
  Gpu* const gpu_;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::thread completer_;
  std::thread::id completer_id_;  // set before any operation starts

  Mutex pool_mu_;  // the command pool is externally synchronised
  std::vector<VkCommandBuffer> free_cbs_ ABSL_GUARDED_BY(pool_mu_);
  std::list<std::unique_ptr<Recorded>> idle_ ABSL_GUARDED_BY(pool_mu_);
  // CAUSEWAY_VULKAN_PROFILE=1: the timers of command buffers in flight.
  std::map<VkCommandBuffer, std::unique_ptr<DispatchTimer>> timers_ ABSL_GUARDED_BY(pool_mu_);

  Mutex mu_;
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_QUEUE_H_
