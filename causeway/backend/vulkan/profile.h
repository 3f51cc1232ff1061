// Internal to the vulkan kind: CAUSEWAY_VULKAN_PROFILE=1 times every
// dispatch on the GPU (timestamp queries around it) and prints, when the
// process exits, the GPU time per kernel and selector (stderr), heaviest
// first. Off by default: it adds two timestamps and a query read per
// dispatch.
#ifndef CAUSEWAY_BACKEND_VULKAN_PROFILE_H_
#define CAUSEWAY_BACKEND_VULKAN_PROFILE_H_

#include <vulkan/vulkan.h>

#include <cstdint>
#include <vector>

#include "causeway/backend/vulkan/kernels.h"

namespace causeway::backend::vulkan {

class Gpu;

// The timestamps of one command buffer's dispatches.
class DispatchTimer {
 public:
  // Null unless CAUSEWAY_VULKAN_PROFILE=1 and `gpu`'s queue can time work.
  static DispatchTimer* Create(const Gpu& gpu, size_t dispatches);
  // Whether CAUSEWAY_VULKAN_PROFILE=1 (launches are then recorded afresh,
  // each with its own timestamps).
  static bool Enabled();
  ~DispatchTimer();
  DispatchTimer(const DispatchTimer&) = delete;
  DispatchTimer& operator=(const DispatchTimer&) = delete;

  void Reset(VkCommandBuffer cb);
  // Records the timestamps around dispatch `i` (one of `dispatches`).
  void Before(VkCommandBuffer cb, size_t i);
  void After(VkCommandBuffer cb, size_t i, Kernel kernel, uint32_t op);
  // After the command buffer completed: adds the times to the process's
  // totals.
  void Collect();

 private:
  DispatchTimer(const Gpu& gpu, VkQueryPool pool, size_t dispatches);
  const Gpu& gpu_;
  VkQueryPool pool_;
  std::vector<uint32_t> keys_;  // kernel << 8 | op, per dispatch
};

}  // namespace causeway::backend::vulkan

#endif  // CAUSEWAY_BACKEND_VULKAN_PROFILE_H_
