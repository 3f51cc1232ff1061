// VulkanDevice's copies (device_internal.h): host copies where device memory
// is mapped into the host, else staged through host-visible memory and
// submitted to the device's queue.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/vulkan/collectives.h"
#include "causeway/backend/vulkan/device_internal.h"

namespace causeway::backend::vulkan {

void VulkanDevice::CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
                          Completion done) {
  absl::Status s = Mine(dst);
  if (s.ok()) s = box.Validate(box.src_array_bytes(), dst.bytes());
  if (!s.ok() || gpu_->memory_is_mapped()) {
    if (s.ok()) CopyHostBox(src, V(dst).host(), box);
    std::move(done)(std::move(s));
    return;
  }
  // Staged: the box, dense, into host-visible memory, then one GPU copy
  // per run.
  absl::StatusOr<std::unique_ptr<VulkanAllocation>> staging =
      gpu_->Allocate(box.bytes(), true, absl::StrCat("staging for ", id_.ToString()));
  if (!staging.ok()) {
    std::move(done)(staging.status());
    return;
  }
  BoxCopy dense = box;
  dense.dst_dims = box.extent;
  dense.dst_offset.assign(box.extent.size(), 0);
  CopyHostBox(src, (*staging)->host(), dense);
  BoxCopy gpu_box = box;
  gpu_box.src_dims = box.extent;
  gpu_box.src_offset.assign(box.extent.size(), 0);
  const VulkanAllocation& from = **staging;
  const VulkanAllocation& to = V(dst);
  std::vector<std::unique_ptr<VulkanAllocation>> keep;
  keep.push_back(std::move(*staging));
  queue_->Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, from, to, gpu_box); },
                 std::move(keep), std::move(done));
}

void VulkanDevice::CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
                           Completion done) {
  absl::Status s = Mine(src);
  if (s.ok()) s = box.Validate(src.bytes(), box.dst_array_bytes());
  if (!s.ok() || gpu_->memory_is_mapped()) {
    if (s.ok()) CopyHostBox(V(src).host(), dst, box);
    std::move(done)(std::move(s));
    return;
  }
  absl::StatusOr<std::unique_ptr<VulkanAllocation>> staging =
      gpu_->Allocate(box.bytes(), true, absl::StrCat("staging for ", id_.ToString()));
  if (!staging.ok()) {
    std::move(done)(staging.status());
    return;
  }
  BoxCopy gpu_box = box;
  gpu_box.dst_dims = box.extent;
  gpu_box.dst_offset.assign(box.extent.size(), 0);
  BoxCopy host_box = box;
  host_box.src_dims = box.extent;
  host_box.src_offset.assign(box.extent.size(), 0);
  const std::byte* staged = (*staging)->host();
  const VulkanAllocation& to = **staging;
  std::vector<std::unique_ptr<VulkanAllocation>> keep;
  keep.push_back(std::move(*staging));
  queue_->Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), to, gpu_box); },
                 std::move(keep),
                 [staged, dst, host_box = std::move(host_box), done = std::move(done)](
                     absl::Status status) mutable {
                   if (status.ok()) CopyHostBox(staged, dst, host_box);
                   std::move(done)(std::move(status));
                 });
}

void VulkanDevice::CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst,
                              const BoxCopy& box, Completion done) {
  absl::Status s = Mine(src);
  if (s.ok()) s = Mine(dst);
  if (s.ok()) s = box.Validate(src.bytes(), dst.bytes());
  if (!s.ok() || gpu_->memory_is_mapped()) {
    if (s.ok()) CopyHostBox(V(src).host(), V(dst).host(), box);
    std::move(done)(std::move(s));
    return;
  }
  queue_->Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), V(dst), box); },
                 {}, std::move(done));
}

void VulkanDevice::CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                              const BoxCopy& box, Completion done) {
  auto* other = dynamic_cast<VulkanDevice*>(&peer);
  if (other == nullptr || other->gpu_ != gpu_) {
    Device::CopyToPeer(src, peer, dst, box, std::move(done));
    return;
  }
  // Both on this GPU: one device memory, one copy.
  absl::Status s = Mine(src);
  if (s.ok()) s = other->Mine(dst);
  if (s.ok()) s = box.Validate(src.bytes(), dst.bytes());
  if (!s.ok() || gpu_->memory_is_mapped()) {
    if (s.ok()) CopyHostBox(V(src).host(), V(dst).host(), box);
    std::move(done)(std::move(s));
    return;
  }
  queue_->Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), V(dst), box); },
                 {}, std::move(done));
}

absl::Status VulkanDevice::RecordCopy(VkCommandBuffer cb, const VulkanAllocation& from,
                                      const VulkanAllocation& to, const BoxCopy& box) {
  Begin(cb);
  RecordBoxCopy(cb, from, 0, to, 0, box);
  End(cb);
  return absl::OkStatus();
}

}  // namespace causeway::backend::vulkan
