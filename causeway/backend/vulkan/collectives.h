// Internal to the vulkan kind: the commands a device records besides its
// dispatches (barriers, box copies), and a collective among Causeway devices of one
// GPU, done by the GPU. The devices of one GPU share one device memory and
// one address space, so the member that arrives last (CollectiveOps::
// MeetOnDevices) records the whole collective into one command buffer of
// its own device: the reduction shader (kernels.h, kMembers*) reads every
// member's operand by address and writes every result in one pass, and
// the other collectives are buffer copies between the members' buffers.
// No byte crosses into host memory. Groups that span GPUs or processes take
// the host-staged hub instead (device_steps.cc decides, the same way on
// every member).
#ifndef CAUSEWAY_BACKEND_VULKAN_COLLECTIVES_H_
#define CAUSEWAY_BACKEND_VULKAN_COLLECTIVES_H_

#include <vulkan/vulkan.h>

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "causeway/backend/device.h"
#include "causeway/backend/vulkan/gpu.h"
#include "causeway/ir/function.h"

namespace causeway::backend::vulkan {

// Records a memory barrier: writes of stages `from` (`from_access`) made
// visible to `to` (`to_access`).
void Barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags from_access,
             VkPipelineStageFlags to, VkAccessFlags to_access);

// Calls `fn(src_byte, dst_byte, bytes)` for each contiguous run of `box`
// (its innermost dimension), in row-major order.
void ForEachRun(const BoxCopy& box, absl::FunctionRef<void(int64_t, int64_t, int64_t)> fn);

// Records copies of `box` from `from` (its array at byte `from_offset`) to
// `to` (at `to_offset`), runs that follow each other merged, as one
// vkCmdCopyBuffer. Nothing for an empty box.
void RecordBoxCopy(VkCommandBuffer cb, const VulkanAllocation& from, uint64_t from_offset,
                   const VulkanAllocation& to, uint64_t to_offset, const BoxCopy& box);

// One member's operand and result: where they lie in device memory.
struct MemberOperands {
  const VulkanAllocation* in = nullptr;
  uint64_t in_offset = 0;
  const VulkanAllocation* out = nullptr;
  uint64_t out_offset = 0;
};

// The most members a group done on the GPU may have (the address table of
// the reduction is one vkCmdUpdateBuffer of at most 64 KiB).
inline constexpr int64_t kMaxGpuMembers = 4096;

// Bytes of device memory the collective needs besides its operands and
// results: the address table, and reduce_scatter's whole reduction or
// collective_permute's zeros.
int64_t CollectiveScratchBytes(const ir::Instruction& inst, const ir::Shape& in_shape,
                               int64_t members);

// Records collective `inst` (operand shape `in_shape`) over `members`, in
// rank order, into `cb`, using `scratch` (at least CollectiveScratchBytes).
// REQUIRES: the shapes fit the group (CheckCollectiveShapes), and `cb` is
// between the device's opening and closing barriers.
absl::Status RecordCollective(VkCommandBuffer cb, Gpu& gpu, const ir::Instruction& inst,
                              const ir::Shape& in_shape,
                              absl::Span<const MemberOperands* const> members,
                              const VulkanAllocation& scratch);

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_COLLECTIVES_H_
