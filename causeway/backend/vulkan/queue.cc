#include "causeway/backend/vulkan/queue.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

std::atomic<int64_t> g_segment_recordings{0};

// Submissions a device keeps in flight before a new one waits.
constexpr size_t kMaxPending = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceQueue>> DeviceQueue::Create(DeviceId device, Gpu* gpu) {
  std::unique_ptr<DeviceQueue> queue(new DeviceQueue(device, gpu));
  CW_RETURN_IF_ERROR(queue->Init());
  return queue;
}

absl::Status DeviceQueue::Init() {
  VkSemaphoreTypeCreateInfo type{};
  type.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo sem{};
  sem.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sem.pNext = &type;
  if (vkCreateSemaphore(gpu_->device(), &sem, nullptr, &timeline_) != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat(id_.ToString(), ": vkCreateSemaphore failed"));
  }
  VkCommandPoolCreateInfo pool{};
  pool.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = gpu_->queue_family();
  if (vkCreateCommandPool(gpu_->device(), &pool, nullptr, &pool_) != VK_SUCCESS) {
    return absl::InternalError(absl::StrCat(id_.ToString(), ": vkCreateCommandPool failed"));
  }
  completer_ = std::thread([this] { CompletionLoop(); });
  completer_id_ = completer_.get_id();
  return absl::OkStatus();
}

DeviceQueue::~DeviceQueue() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (completer_.joinable()) completer_.join();
  if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(gpu_->device(), pool_, nullptr);
  if (timeline_ != VK_NULL_HANDLE) vkDestroySemaphore(gpu_->device(), timeline_, nullptr);
}

int64_t DeviceQueue::Recordings() {
  return g_segment_recordings.load(std::memory_order_relaxed);
}

absl::StatusOr<VkCommandBuffer> DeviceQueue::NewCommandBuffer() {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  if (!free_cbs_.empty()) {
    cb = free_cbs_.back();
    free_cbs_.pop_back();
    vkResetCommandBuffer(cb, 0);
    return cb;
  }
  VkCommandBufferAllocateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  info.commandPool = pool_;
  info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  info.commandBufferCount = 1;
  if (vkAllocateCommandBuffers(gpu_->device(), &info, &cb) != VK_SUCCESS) {
    return absl::ResourceExhaustedError(absl::StrCat(id_.ToString(), ": no command buffer"));
  }
  return cb;
}

void DeviceQueue::Submit(const std::function<absl::Status(VkCommandBuffer)>& record,
                         std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done) {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  {
    MutexLock lock(&pool_mu_);
    absl::StatusOr<VkCommandBuffer> got = NewCommandBuffer();
    if (!got.ok()) return std::move(done)(got.status());
    cb = *got;
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    vkBeginCommandBuffer(cb, &begin);
    absl::Status s = record(cb);
    vkEndCommandBuffer(cb);
    if (!s.ok()) {
      free_cbs_.push_back(cb);
      std::move(done)(std::move(s));
      return;
    }
  }
  SubmitCommandBuffer(cb, nullptr, std::move(keep), std::move(done));
}

absl::StatusOr<std::unique_ptr<DeviceQueue::Recorded>> DeviceQueue::ReuseOrRecord(
    const VulkanExecutable& exe, size_t index, bool once, int64_t table_bytes,
    RecordSegmentFn record) {
  std::unique_ptr<Recorded> rec;
  MutexLock lock(&pool_mu_);
  for (auto it = idle_.begin(); !once && it != idle_.end(); ++it) {
    if ((*it)->executable == exe.id() && (*it)->segment == index) {
      rec = std::move(*it);
      idle_.erase(it);
      break;
    }
  }
  if (rec == nullptr) {
    absl::StatusOr<std::unique_ptr<Recorded>> made = Record(exe, index, table_bytes, record);
    if (!made.ok()) return made.status();
    rec = *std::move(made);
    rec->reuse = !once;
  }
  return rec;
}

absl::StatusOr<std::unique_ptr<DeviceQueue::Recorded>> DeviceQueue::Record(
    const VulkanExecutable& exe, size_t index, int64_t table_bytes, RecordSegmentFn record) {
  g_segment_recordings.fetch_add(1, std::memory_order_relaxed);
  auto rec = std::make_unique<Recorded>();
  rec->executable = exe.id();
  rec->segment = index;
  CW_ASSIGN_OR_RETURN(rec->table,
                      gpu_->Allocate(table_bytes, true,
                                     absl::StrCat("the argument table of ", exe.function().name(),
                                                  " on ", id_.ToString())));
  CW_ASSIGN_OR_RETURN(rec->cb, NewCommandBuffer());
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  vkBeginCommandBuffer(rec->cb, &begin);
  absl::StatusOr<std::unique_ptr<DispatchTimer>> timer = record(rec->cb, rec->table->address());
  vkEndCommandBuffer(rec->cb);
  if (!timer.ok()) {
    free_cbs_.push_back(rec->cb);
    return timer.status();
  }
  if (*timer != nullptr) timers_[rec->cb] = *std::move(timer);
  return rec;
}

void DeviceQueue::Idle(std::unique_ptr<Recorded> rec) {
  if (!rec->reuse) {
    free_cbs_.push_back(rec->cb);
    return;
  }
  idle_.push_front(std::move(rec));
  if (idle_.size() > kMaxIdleRecorded) {
    free_cbs_.push_back(idle_.back()->cb);
    idle_.pop_back();
  }
}

void DeviceQueue::SubmitRecorded(std::unique_ptr<Recorded> rec,
                                 std::vector<std::unique_ptr<VulkanAllocation>> keep,
                                 Completion done) {
  const VkCommandBuffer cb = rec->cb;
  SubmitCommandBuffer(cb, std::move(rec), std::move(keep), std::move(done));
}

void DeviceQueue::SubmitCommandBuffer(VkCommandBuffer cb, std::unique_ptr<Recorded> rec,
                                      std::vector<std::unique_ptr<VulkanAllocation>> keep,
                                      Completion done) {
  VkResult r;
  {
    // Released waking the completion thread first: the work may complete,
    // and its waiter destroy this device (and this queue), before an
    // Unlock() that notifies after releasing has left the mutex (a copy to
    // a peer submits here from the other device's thread).
    mu_.Lock();
    // Bounded: wait for the GPU to finish older work, unless this is the
    // completion thread (a completion starting more work), which is what
    // would finish it.
    if (std::this_thread::get_id() != completer_id_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return pending_.size() < kMaxPending;
      });
    }
    const uint64_t value = submitted_ + 1;
    VkTimelineSemaphoreSubmitInfo timeline{};
    timeline.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
    timeline.signalSemaphoreValueCount = 1;
    timeline.pSignalSemaphoreValues = &value;
    VkSubmitInfo submit{};
    submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    submit.pNext = &timeline;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cb;
    submit.signalSemaphoreCount = 1;
    submit.pSignalSemaphores = &timeline_;
    r = gpu_->Submit(submit);
    if (r == VK_SUCCESS) {
      submitted_ = value;
      pending_.push_back(Pending{value, cb, std::move(rec), std::move(keep), std::move(done)});
      mu_.UnlockWakingFirst();
      return;
    }
    mu_.UnlockWakingFirst();
  }
  {
    MutexLock pool_lock(&pool_mu_);
    if (rec != nullptr) {
      Idle(std::move(rec));
    } else {
      free_cbs_.push_back(cb);
    }
  }
  std::move(done)(absl::InternalError(absl::StrCat(
      "the GPU refused work for ", id_.ToString(), " (VkResult ", static_cast<int>(r),
      r == VK_ERROR_DEVICE_LOST ? ": device lost)" : ")")));
}

void DeviceQueue::CompletionLoop() {
  while (true) {
    uint64_t value;
    {
      MutexLock lock(&mu_);
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !pending_.empty() || stopping_;
      });
      if (pending_.empty()) return;  // stopping, nothing in flight
      value = pending_.front().value;
    }
    VkSemaphoreWaitInfo wait{};
    wait.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
    wait.semaphoreCount = 1;
    wait.pSemaphores = &timeline_;
    wait.pValues = &value;
    absl::Status status;
    while (true) {
      const VkResult r = vkWaitSemaphores(gpu_->device(), &wait, 100'000'000);  // 100 ms
      if (r == VK_SUCCESS) break;
      if (r == VK_TIMEOUT) continue;
      status = absl::InternalError(absl::StrCat(
          "the GPU failed work of ", id_.ToString(), " (VkResult ", static_cast<int>(r),
          r == VK_ERROR_DEVICE_LOST ? ": device lost)" : ")"));
      break;
    }
    Pending done;
    {
      MutexLock lock(&mu_);
      done = std::move(pending_.front());
      pending_.pop_front();
    }
    std::unique_ptr<DispatchTimer> timer;
    {
      MutexLock lock(&pool_mu_);
      if (done.recorded != nullptr) {
        Idle(std::move(done.recorded));
      } else {
        free_cbs_.push_back(done.cb);
      }
      if (auto it = timers_.find(done.cb); it != timers_.end()) {
        timer = std::move(it->second);
        timers_.erase(it);
      }
    }
    if (timer != nullptr && status.ok()) timer->Collect();
    // The completion first: it may still read what `keep` holds (a
    // fetch's staging bytes), which another device could be given again
    // as soon as it is freed.
    std::move(done.done)(std::move(status));
    done.keep.clear();
  }
}

absl::Status DeviceQueue::AwaitSubmitted() {
  uint64_t value;
  {
    MutexLock lock(&mu_);
    value = submitted_;
  }
  if (value == 0) return absl::OkStatus();
  VkSemaphoreWaitInfo wait{};
  wait.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wait.semaphoreCount = 1;
  wait.pSemaphores = &timeline_;
  wait.pValues = &value;
  while (true) {
    const VkResult r = vkWaitSemaphores(gpu_->device(), &wait, 100'000'000);  // 100 ms
    if (r == VK_SUCCESS) return absl::OkStatus();
    if (r == VK_TIMEOUT) continue;
    return absl::InternalError(absl::StrCat("the GPU failed work of ", id_.ToString(),
                                            " (VkResult ", static_cast<int>(r),
                                            r == VK_ERROR_DEVICE_LOST ? ": device lost)" : ")"));
  }
}

}  // namespace causeway::backend::vulkan
