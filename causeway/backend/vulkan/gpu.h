// Internal to the vulkan kind: one physical GPU as the kind uses it. A Gpu
// owns the logical device, its compute queue (shared by every Causeway
// device on this GPU, submissions serialised by a lock), the compute
// pipelines of the embedded kernels (made on first use) and a
// sub-allocator of device memory: large blocks from the driver, carved
// into 256-byte-aligned ranges, so that a shard costs no driver
// allocation. Gpus are made once per process and physical device (Get) and
// live until the process ends.
#ifndef CAUSEWAY_BACKEND_VULKAN_GPU_H_
#define CAUSEWAY_BACKEND_VULKAN_GPU_H_

#include <vulkan/vulkan.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/backend/device.h"
#include "causeway/backend/vulkan/kernels.h"
#include "causeway/base/mutex.h"

namespace causeway::backend::vulkan {

class Gpu;

// A range of one block of device memory. Destroying it returns the range.
class VulkanAllocation final : public DeviceAllocation {
 public:
  ~VulkanAllocation() override;
  Gpu& gpu() const { return *gpu_; }
  VkBuffer buffer() const { return buffer_; }
  uint64_t offset() const { return offset_; }     // within buffer()
  uint64_t address() const { return address_; }   // buffer device address
  std::byte* host() const { return host_; }       // null unless mapped

 private:
  friend class Gpu;
  VulkanAllocation(Gpu* gpu, int block, int64_t bytes, uint64_t reserved, VkBuffer buffer,
                   uint64_t offset, uint64_t address, std::byte* host)
      : DeviceAllocation(bytes), gpu_(gpu), block_(block), reserved_(reserved), buffer_(buffer),
        offset_(offset), address_(address), host_(host) {}
  Gpu* const gpu_;
  const int block_;  // -1: a view (Gpu::View), which frees nothing
  const uint64_t reserved_;
  const VkBuffer buffer_;
  const uint64_t offset_;
  const uint64_t address_;
  std::byte* const host_;
};

class Gpu {
 public:
  // The physical devices this process sees, one line each (name, driver,
  // Vulkan version, device-local memory), or UNAVAILABLE naming what is
  // missing (no loader, no driver, no device).
  static absl::StatusOr<std::vector<std::string>> List();
  // GPU `index` (of List()), made on first use. UNAVAILABLE as List, or
  // when the device lacks what the kind needs (Vulkan 1.2, buffer device
  // addresses, timeline semaphores, 8-bit storage, 64-bit integers),
  // naming it.
  static absl::StatusOr<Gpu*> Get(int index);

  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  int index() const { return index_; }
  VkDevice device() const { return device_; }
  uint32_t queue_family() const { return queue_family_; }
  const DeviceDescription& description() const { return description_; }
  // Whether device memory is mapped into the host (lavapipe, integrated
  // GPUs): copies then run on the host, with no staging.
  bool memory_is_mapped() const { return mapped_memory_ && !force_staging_; }
  // Whether the device is a CPU (lavapipe): the CPU variants of the
  // kernels (kernels.h, ChooseVariant) then run in place of the GPU ones.
  // CAUSEWAY_VULKAN_KERNELS=gpu keeps the GPU ones (tests of them here).
  bool cpu_kernels() const { return cpu_kernels_; }
  // Whether the Vulkan device is a CPU (lavapipe), whatever the kernels.
  bool is_cpu() const { return is_cpu_; }
  // Nanoseconds per tick of a timestamp query on the compute queue; 0 when
  // that queue cannot time work.
  double timestamp_ns_per_tick() const { return timestamp_ns_per_tick_; }

  // `bytes` of device memory (device-local; host-visible staging memory if
  // `staging`). RESOURCE_EXHAUSTED naming `who` when the driver has none.
  absl::StatusOr<std::unique_ptr<VulkanAllocation>> Allocate(int64_t bytes, bool staging,
                                                             const std::string& who);
  // `bytes` of `base` from byte `offset`, as an allocation of its own (a
  // sub-function's operands and results inside its caller's buffers). The
  // memory stays `base`'s: the view frees nothing and must not outlive it.
  // REQUIRES: offset + bytes <= base.bytes().
  std::unique_ptr<VulkanAllocation> View(const VulkanAllocation& base, uint64_t offset,
                                         int64_t bytes);

  // The compute pipeline of `kernel`, made on first use; its layout takes
  // the 88-byte Push constants and no descriptor sets.
  absl::StatusOr<VkPipeline> Pipeline(Kernel kernel);
  VkPipelineLayout pipeline_layout() const { return layout_; }

  // Submits to the queue, serialised with every other device of this GPU.
  VkResult Submit(const VkSubmitInfo& submit);

 private:
  friend class VulkanAllocation;
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    uint64_t size = 0;
    uint64_t address = 0;
    std::byte* host = nullptr;
    bool staging = false;
    bool dedicated = false;           // one allocation's; freed when it is
    uint64_t used = 0;
    std::map<uint64_t, uint64_t> free;  // offset -> size, coalesced
  };

  Gpu(int index, VkPhysicalDevice physical);
  absl::Status Init();
  // A new block of at least `bytes`; its index in blocks_.
  absl::StatusOr<int> NewBlock(uint64_t bytes, bool staging, bool dedicated)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Free(int block, uint64_t offset, uint64_t size);

  const int index_;
  const VkPhysicalDevice physical_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  uint32_t device_type_ = 0;   // memory type index of device memory
  uint32_t staging_type_ = 0;  // host-visible, coherent
  bool mapped_memory_ = false;
  // CAUSEWAY_VULKAN_STAGING=1: test the staging path (and poison freed
  // staging bytes).
  bool force_staging_ = false;
  double timestamp_ns_per_tick_ = 0;
  bool cpu_kernels_ = false;
  bool is_cpu_ = false;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  DeviceDescription description_;

  Mutex queue_mu_;
  Mutex mu_;
  std::vector<Block> blocks_ ABSL_GUARDED_BY(mu_);
  std::array<VkPipeline, static_cast<size_t>(Kernel::kNumKernels)> pipelines_
      ABSL_GUARDED_BY(mu_){};
};

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_GPU_H_
