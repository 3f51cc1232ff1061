// Internal to the vulkan kind: its Device, shared by the files that define
// it: device.cc (set-up, launches and the kind), device_copies.cc (copies)
// and device_steps.cc (host steps between a launch's segments: loops and
// conditionals, collectives). Its submissions go through its DeviceQueue
// (queue.h). Private to causeway/backend/vulkan.
#ifndef CAUSEWAY_BACKEND_VULKAN_DEVICE_INTERNAL_H_
#define CAUSEWAY_BACKEND_VULKAN_DEVICE_INTERNAL_H_

#include <vulkan/vulkan.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/backend/device.h"
#include "causeway/backend/executable.h"
#include "causeway/backend/vulkan/device.h"
#include "causeway/backend/vulkan/executable.h"
#include "causeway/backend/vulkan/gpu.h"
#include "causeway/backend/vulkan/profile.h"
#include "causeway/backend/vulkan/queue.h"

namespace causeway::backend::vulkan {

// Launches a device stream keeps started ahead of the GPU: enough that the
// queue holds the next launch while the host finishes the last.
inline constexpr int kLaunchesInFlight = 4;

inline const VulkanAllocation& V(const DeviceAllocation& a) {
  return static_cast<const VulkanAllocation&>(a);
}

// One Causeway device on a GPU (device.h): one submission order, its
// DeviceQueue, sharing the GPU's queue, memory pool and pipelines with the
// other devices there. Made by the kind's CreateDevice, then Init; owned by
// the caller. Thread-safe: what its operations share is the queue's, under
// the queue's locks.
class VulkanDevice final : public Device {
 public:
  VulkanDevice(const DeviceSpec& spec, Gpu* gpu);
  // Makes the device's queue (DeviceQueue::Create, whose errors it
  // returns). REQUIRES: called once, before any other operation.
  absl::Status Init();

  const DeviceDescription& description() const override { return description_; }

  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) override;

  // Copies (device_copies.cc).
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
  // Launches of one device are submissions to the GPU's queue, each opening
  // with a barrier on all earlier work (Begin), so they run in start order.
  int max_launches_in_flight() const override { return kLaunchesInFlight; }

  // Collectives done by a GPU so far in this process (vulkan::
  // CollectivesOnGpu; device_steps.cc).
  static int64_t CollectivesOnGpu();

 private:
  // Operands of one launch, resolved.
  struct Operands {
    absl::Span<const DeviceAllocation* const> inputs;
    absl::Span<DeviceAllocation* const> outputs;
    const VulkanAllocation* temp = nullptr;
    const VulkanAllocation* resident = nullptr;
  };

  absl::Status Mine(const DeviceAllocation& a) const;

  // Work submitted before (copies, launches) is visible to what follows.
  static void Begin(VkCommandBuffer cb);
  // What the commands wrote is visible to the host once they completed.
  static void End(VkCommandBuffer cb);

  absl::Status RecordCopy(VkCommandBuffer cb, const VulkanAllocation& from,
                          const VulkanAllocation& to, const BoxCopy& box);

  // The allocation and byte offset of a Ref (host steps).
  std::pair<const VulkanAllocation*, uint64_t> Place(const Ref& r, const Operands& ops) const;

  static uint32_t Slot(const Ref& r, const Operands& ops) {
    return TableSlot(r, ops.inputs.size(), ops.outputs.size());
  }
  static size_t TableSlots(const Operands& ops) {
    return ops.inputs.size() + ops.outputs.size() + 2;
  }
  // The addresses of this launch's buffers, slot by slot, into `table`.
  void FillTable(const VulkanAllocation& table, const Operands& ops) const;

  // Records `seg`'s dispatches into `cb`, their operands as offsets into
  // the slots of the argument table at `table` (kernels.h, Push), so the
  // commands outlive this launch: the timer of the dispatches, or null
  // (DeviceQueue::RecordSegmentFn; runs with the queue's pool locked).
  absl::StatusOr<std::unique_ptr<DispatchTimer>> RecordSegment(VkCommandBuffer cb,
                                                               const Segment& seg,
                                                               const Operands& ops,
                                                               uint64_t table);
  // Submits segment `index` of `exe` over `ops`: its command buffer as
  // recorded by an earlier launch when one is idle, else recorded now (and
  // kept for later launches); only the argument table is written per
  // launch. With dispatch timing (CAUSEWAY_VULKAN_PROFILE) it is recorded
  // for this launch alone, with its timestamps.
  void SubmitSegment(const VulkanExecutable& exe, size_t index, const Operands& ops,
                     std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done);

  // Bytes between a Ref and host memory, waiting for them (host steps).
  absl::Status ReadRef(const Ref& r, const Operands& ops, void* dst, int64_t bytes);
  absl::Status WriteRef(const Ref& r, const Operands& ops, const void* src, int64_t bytes);

  absl::Status RunHostStep(const VulkanExecutable& exe, const HostStep& h, const Operands& ops,
                           const RunContext& context);
  // A collective host step among devices of this GPU, done by the GPU
  // (collectives.h) when every member of its group is one: true once done.
  // False, having done nothing, for a group the hub serves: members on
  // other GPUs or in other processes, a GPU that is a CPU, or as
  // CAUSEWAY_VULKAN_COLLECTIVES (gpu, host; auto when unset) says.
  absl::StatusOr<bool> CollectiveOnGpu(const VulkanExecutable& exe, const HostStep& h,
                                       const Operands& ops, CollectiveOps& c);
  // Launch after its checks; with `temp` (a view of the caller's
  // temporaries, at least the executable's temporary_bytes()) instead of
  // temporaries of its own when not null.
  void LaunchOn(const VulkanExecutable& executable,
                absl::Span<const DeviceAllocation* const> inputs,
                absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
                const VulkanAllocation* temp, Completion done);
  // The executable's resident image on this device's GPU, uploaded the
  // first time (its control flow's sub-functions too when `nested`).
  absl::StatusOr<const VulkanAllocation*> MakeResident(const VulkanExecutable& exe, bool nested);
  // A loop or conditional (ControlFlow): launches of its sub-functions on
  // this device, over views of the caller's buffers, waited for here.
  absl::Status RunControlFlow(const ControlFlow& cf, const Operands& ops,
                              const RunContext& context);

  const DeviceId id_;
  Gpu* const gpu_;
  DeviceDescription description_;
  // Set by Init. Last, so destroyed first: its completion thread has run
  // every completion before the rest of the device goes.
  std::unique_ptr<DeviceQueue> queue_;
};

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_DEVICE_INTERNAL_H_
