#include "causeway/backend/vulkan/device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/vulkan/collectives.h"
#include "causeway/backend/vulkan/executable.h"
#include "causeway/backend/vulkan/gpu.h"
#include "causeway/backend/vulkan/profile.h"
#include "causeway/base/check.h"
#include "causeway/base/fiber.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

std::atomic<int> g_selected_gpu{-1};
std::atomic<int64_t> g_collectives_on_gpu{0};
std::atomic<int64_t> g_segment_recordings{0};

// Submissions a device keeps in flight before a new one waits.
constexpr size_t kMaxPending = 256;

const VulkanAllocation& V(const DeviceAllocation& a) {
  return static_cast<const VulkanAllocation&>(a);
}

class VulkanDevice final : public Device {
 public:
  VulkanDevice(const DeviceSpec& spec, Gpu* gpu) : id_(spec.id), gpu_(gpu) {
    description_ = gpu->description();
    description_.kind = std::string(kKindName);
  }

  absl::Status Init() {
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

  ~VulkanDevice() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (completer_.joinable()) completer_.join();
    if (pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(gpu_->device(), pool_, nullptr);
    if (timeline_ != VK_NULL_HANDLE) vkDestroySemaphore(gpu_->device(), timeline_, nullptr);
  }

  const DeviceDescription& description() const override { return description_; }

  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(int64_t bytes) override {
    CW_ASSIGN_OR_RETURN(std::unique_ptr<VulkanAllocation> a,
                        gpu_->Allocate(bytes, false, id_.ToString()));
    return std::unique_ptr<DeviceAllocation>(std::move(a));
  }

  void CopyIn(const void* src, DeviceAllocation& dst, const BoxCopy& box,
              Completion done) override {
    absl::Status s = Mine(dst);
    if (s.ok()) s = box.Validate(box.src_array_bytes(), dst.bytes());
    if (!s.ok() || gpu_->memory_is_mapped()) {
      if (s.ok()) cpu::CopyHostBox(src, V(dst).host(), box);
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
    cpu::CopyHostBox(src, (*staging)->host(), dense);
    BoxCopy gpu_box = box;
    gpu_box.src_dims = box.extent;
    gpu_box.src_offset.assign(box.extent.size(), 0);
    const VulkanAllocation& from = **staging;
    const VulkanAllocation& to = V(dst);
    std::vector<std::unique_ptr<VulkanAllocation>> keep;
    keep.push_back(std::move(*staging));
    Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, from, to, gpu_box); },
           std::move(keep), std::move(done));
  }

  void CopyOut(const DeviceAllocation& src, void* dst, const BoxCopy& box,
               Completion done) override {
    absl::Status s = Mine(src);
    if (s.ok()) s = box.Validate(src.bytes(), box.dst_array_bytes());
    if (!s.ok() || gpu_->memory_is_mapped()) {
      if (s.ok()) cpu::CopyHostBox(V(src).host(), dst, box);
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
    Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), to, gpu_box); },
           std::move(keep),
           [staged, dst, host_box = std::move(host_box), done = std::move(done)](
               absl::Status status) mutable {
             if (status.ok()) cpu::CopyHostBox(staged, dst, host_box);
             std::move(done)(std::move(status));
           });
  }

  void CopyWithin(const DeviceAllocation& src, DeviceAllocation& dst, const BoxCopy& box,
                  Completion done) override {
    absl::Status s = Mine(src);
    if (s.ok()) s = Mine(dst);
    if (s.ok()) s = box.Validate(src.bytes(), dst.bytes());
    if (!s.ok() || gpu_->memory_is_mapped()) {
      if (s.ok()) cpu::CopyHostBox(V(src).host(), V(dst).host(), box);
      std::move(done)(std::move(s));
      return;
    }
    Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), V(dst), box); }, {},
           std::move(done));
  }

  void CopyToPeer(const DeviceAllocation& src, Device& peer, DeviceAllocation& dst,
                  const BoxCopy& box, Completion done) override {
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
      if (s.ok()) cpu::CopyHostBox(V(src).host(), V(dst).host(), box);
      std::move(done)(std::move(s));
      return;
    }
    Submit([&](VkCommandBuffer cb) { return RecordCopy(cb, V(src), V(dst), box); }, {},
           std::move(done));
  }

  void Launch(const Executable& executable, absl::Span<const DeviceAllocation* const> inputs,
              absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
              Completion done) override;

 private:
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
  // Idle recorded command buffers kept, the most recently used first.
  static constexpr size_t kMaxIdleRecorded = 64;

  struct Pending {
    uint64_t value = 0;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    std::unique_ptr<Recorded> recorded;  // set: cb is its, back to idle_ when done
    std::vector<std::unique_ptr<VulkanAllocation>> keep;
    Completion done;
  };

  // Operands of one launch, resolved.
  struct Operands {
    absl::Span<const DeviceAllocation* const> inputs;
    absl::Span<DeviceAllocation* const> outputs;
    const VulkanAllocation* temp = nullptr;
    const VulkanAllocation* resident = nullptr;
  };

  absl::Status Mine(const DeviceAllocation& a) const {
    const auto* v = dynamic_cast<const VulkanAllocation*>(&a);
    if (v == nullptr || &v->gpu() != gpu_) {
      return absl::InvalidArgumentError(
          absl::StrCat("an allocation of another device was given to ", id_.ToString()));
    }
    return absl::OkStatus();
  }

  // Work submitted before (copies, launches) is visible to what follows.
  static void Begin(VkCommandBuffer cb) {
    Barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
            VK_ACCESS_MEMORY_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  }
  // What the commands wrote is visible to the host once they completed.
  static void End(VkCommandBuffer cb) {
    Barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }

  absl::Status RecordCopy(VkCommandBuffer cb, const VulkanAllocation& from,
                          const VulkanAllocation& to, const BoxCopy& box) {
    Begin(cb);
    RecordBoxCopy(cb, from, 0, to, 0, box);
    End(cb);
    return absl::OkStatus();
  }

  // The allocation and byte offset of a Ref (host steps).
  std::pair<const VulkanAllocation*, uint64_t> Place(const Ref& r, const Operands& ops) const {
    switch (r.kind) {
      case Ref::Kind::kInput: return {&V(*ops.inputs[r.index]), r.offset};
      case Ref::Kind::kOutput: return {&V(*ops.outputs[r.index]), r.offset};
      case Ref::Kind::kTemp: return {ops.temp, r.offset};
      case Ref::Kind::kResident: return {ops.resident, r.offset};
      case Ref::Kind::kNone: break;
    }
    return {nullptr, 0};
  }

  static uint32_t Slot(const Ref& r, const Operands& ops) {
    return TableSlot(r, ops.inputs.size(), ops.outputs.size());
  }
  static size_t TableSlots(const Operands& ops) {
    return ops.inputs.size() + ops.outputs.size() + 2;
  }
  // The addresses of this launch's buffers, slot by slot, into `table`.
  void FillTable(const VulkanAllocation& table, const Operands& ops) const {
    auto* t = reinterpret_cast<uint64_t*>(table.host());
    size_t k = 0;
    for (const DeviceAllocation* a : ops.inputs) t[k++] = V(*a).address();
    for (DeviceAllocation* a : ops.outputs) t[k++] = V(*a).address();
    t[k++] = ops.temp != nullptr ? ops.temp->address() : 0;
    t[k++] = ops.resident != nullptr ? ops.resident->address() : 0;
  }

  // Records `seg`'s dispatches into `cb`, their operands as offsets into
  // the slots of the argument table at `table` (kernels.h, Push), so the
  // commands outlive this launch.
  absl::Status RecordSegment(VkCommandBuffer cb, const Segment& seg, const Operands& ops,
                             uint64_t table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_) {
    Begin(cb);
    std::unique_ptr<DispatchTimer> timer(DispatchTimer::Create(*gpu_, seg.dispatches.size()));
    if (timer != nullptr) timer->Reset(cb);
    VkPipeline bound = VK_NULL_HANDLE;
    for (size_t i = 0; i < seg.dispatches.size(); ++i) {
      const Dispatch& d = seg.dispatches[i];
      const Variant v = ChooseVariant(d.kernel, d.n, d.x, d.groups, gpu_->cpu_kernels());
      CW_ASSIGN_OR_RETURN(VkPipeline p, gpu_->Pipeline(v.kernel));
      if (p != bound) {
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
        bound = p;
      }
      Push push;
      push.table = table;
      push.a = d.a.offset;
      push.b = d.b.offset;
      push.c = d.c.offset;
      push.d = d.d.offset;
      push.out = d.out.offset;
      push.params = d.params.offset;
      push.slots[0] = Slot(d.a, ops) | Slot(d.b, ops) << 16;
      push.slots[1] = Slot(d.c, ops) | Slot(d.d, ops) << 16;
      push.slots[2] = Slot(d.out, ops) | Slot(d.params, ops) << 16;
      push.n = d.n;
      push.op = d.op;
      push.x = d.x;
      push.y = d.y;
      vkCmdPushConstants(cb, gpu_->pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                         sizeof(Push), &push);
      if (timer != nullptr) timer->Before(cb, i);
      vkCmdDispatch(cb, v.groups[0], v.groups[1], v.groups[2]);
      if (timer != nullptr) timer->After(cb, i, v.kernel, d.op);
      Barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    }
    End(cb);
    if (timer != nullptr) timers_[cb] = std::move(timer);
    return absl::OkStatus();
  }

  // Bytes between a Ref and host memory, waiting for them (host steps).
  absl::Status ReadRef(const Ref& r, const Operands& ops, void* dst, int64_t bytes) {
    const auto [a, off] = Place(r, ops);
    if (a == nullptr || bytes == 0) return absl::OkStatus();
    const BoxCopy box = BoxCopy::Flat(static_cast<int64_t>(off), a->bytes(), 0, bytes, bytes);
    const VulkanAllocation& from = *a;  // a structured binding cannot be captured (C++17)
    return Await([&](Completion c) { CopyOut(from, dst, box, std::move(c)); });
  }
  absl::Status WriteRef(const Ref& r, const Operands& ops, const void* src, int64_t bytes) {
    const auto [a, off] = Place(r, ops);
    if (a == nullptr || bytes == 0) return absl::OkStatus();
    const BoxCopy box = BoxCopy::Flat(0, bytes, static_cast<int64_t>(off), a->bytes(), bytes);
    auto& to = *const_cast<VulkanAllocation*>(a);  // see ReadRef
    return Await([&](Completion c) { CopyIn(src, to, box, std::move(c)); });
  }

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
  // A loop or conditional (ControlFlow): launches of its sub-functions on
  // this device, over views of the caller's buffers, waited for here.
  absl::Status RunControlFlow(const ControlFlow& cf, const Operands& ops,
                              const RunContext& context);

  // A command buffer of the pool, reset, or an error.
  absl::StatusOr<VkCommandBuffer> NewCommandBuffer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_) {
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

  // Records with `record` and submits one command buffer; `done` runs on the
  // completion thread when the GPU finished it (or at once with the error
  // if recording or submitting failed). `keep` lives until then.
  void Submit(const std::function<absl::Status(VkCommandBuffer)>& record,
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
    SubmitRecorded(cb, nullptr, std::move(keep), std::move(done));
  }

  // Submits segment `index` of `exe` over `ops`: its command buffer as
  // recorded by an earlier launch when one is idle, else recorded now (and
  // kept for later launches); only the argument table is written per
  // launch. With dispatch timing (CAUSEWAY_VULKAN_PROFILE) it is recorded
  // for this launch alone, with its timestamps.
  void SubmitSegment(const VulkanExecutable& exe, size_t index, const Operands& ops,
                     std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done) {
    const bool profiled = DispatchTimer::Enabled();
    std::unique_ptr<Recorded> rec;
    {
      MutexLock lock(&pool_mu_);
      for (auto it = idle_.begin(); !profiled && it != idle_.end(); ++it) {
        if ((*it)->executable == exe.id() && (*it)->segment == index) {
          rec = std::move(*it);
          idle_.erase(it);
          break;
        }
      }
      if (rec == nullptr) {
        absl::StatusOr<std::unique_ptr<Recorded>> made = Record(exe, index, ops);
        if (!made.ok()) return std::move(done)(made.status());
        rec = *std::move(made);
        rec->reuse = !profiled;
      }
    }
    FillTable(*rec->table, ops);
    const VkCommandBuffer cb = rec->cb;
    SubmitRecorded(cb, std::move(rec), std::move(keep), std::move(done));
  }

  absl::StatusOr<std::unique_ptr<Recorded>> Record(const VulkanExecutable& exe, size_t index,
                                                   const Operands& ops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_) {
    g_segment_recordings.fetch_add(1, std::memory_order_relaxed);
    auto rec = std::make_unique<Recorded>();
    rec->executable = exe.id();
    rec->segment = index;
    CW_ASSIGN_OR_RETURN(
        rec->table,
        gpu_->Allocate(static_cast<int64_t>(TableSlots(ops) * sizeof(uint64_t)), true,
                       absl::StrCat("the argument table of ", exe.function().name(), " on ",
                                    id_.ToString())));
    CW_ASSIGN_OR_RETURN(rec->cb, NewCommandBuffer());
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    vkBeginCommandBuffer(rec->cb, &begin);
    absl::Status s = RecordSegment(rec->cb, exe.segments()[index], ops, rec->table->address());
    vkEndCommandBuffer(rec->cb);
    if (!s.ok()) {
      free_cbs_.push_back(rec->cb);
      return s;
    }
    return rec;
  }

  // A finished recorded command buffer back among the idle ones; the least
  // recently used beyond kMaxIdleRecorded is freed.
  void Idle(std::unique_ptr<Recorded> rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool_mu_) {
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

  // Submits the recorded `cb` (`rec`'s if set); as Submit.
  void SubmitRecorded(VkCommandBuffer cb, std::unique_ptr<Recorded> rec,
                      std::vector<std::unique_ptr<VulkanAllocation>> keep, Completion done) {
    VkResult r;
    {
      // Released waking the completion thread first: the work may complete,
      // and its waiter destroy this device, before an Unlock() that notifies
      // after releasing has left the mutex (a copy to a peer submits here
      // from the other device's thread).
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

  void CompletionLoop() {
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

  const DeviceId id_;
  Gpu* const gpu_;
  DeviceDescription description_;
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

// The carry lives in two packed sets, the instruction's own result and a
// spare; the body writes the other one and they swap, so no iteration
// copies, and the final carry is copied only when it ends in the spare. The
// host reads one byte per iteration: the condition. The spare, the
// condition and the sub-functions' temporaries lie in the caller's
// temporaries (ControlFlow), so the store's budget for the launch covers
// them.
absl::Status VulkanDevice::RunControlFlow(const ControlFlow& cf, const Operands& ops,
                                          const RunContext& context) {
  std::vector<std::unique_ptr<VulkanAllocation>> keep;  // views, before what they view ends
  auto view = [&](const Ref& r, int64_t bytes) {
    const auto [a, off] = Place(r, ops);
    CW_CHECK(a != nullptr) << "a control-flow operand outside the launch's buffers";
    keep.push_back(gpu_->View(*a, off, bytes));
    return keep.back().get();
  };
  VulkanAllocation* sub_temp = cf.sub_temp_bytes > 0 ? view(cf.sub_temp, cf.sub_temp_bytes)
                                                      : nullptr;
  auto launch = [&](const VulkanExecutable& sub, absl::Span<DeviceAllocation* const> in,
                    absl::Span<DeviceAllocation* const> out) {
    std::vector<const DeviceAllocation*> inputs(in.begin(), in.end());
    return Await(
        [&](Completion c) { LaunchOn(sub, inputs, out, context, sub_temp, std::move(c)); });
  };
  // The packed results, and each operand as an allocation of its own.
  auto results = [&](const Ref& base) {
    std::vector<DeviceAllocation*> v;
    for (size_t k = 0; k < cf.shapes.size(); ++k) {
      Ref r = base;
      r.offset += static_cast<uint64_t>(cf.offsets[k]);
      v.push_back(view(r, cf.shapes[k].byte_size()));
    }
    return v;
  };
  std::vector<DeviceAllocation*> args;
  for (size_t k = 0; k < cf.operands.size(); ++k) {
    args.push_back(view(cf.operands[k], cf.operand_bytes[k]));
  }
  if (!cf.is_while) {
    // The selector: a pred (any non-zero byte is true: branch 0) or an i32
    // clamped to the branches.
    size_t branch;
    if (cf.operand_bytes[0] == 1) {
      uint8_t pred = 0;
      CW_RETURN_IF_ERROR(ReadRef(cf.operands[0], ops, &pred, 1));
      branch = pred != 0 ? 0 : 1;
    } else {
      int32_t index = 0;
      CW_RETURN_IF_ERROR(ReadRef(cf.operands[0], ops, &index, 4));
      branch = static_cast<size_t>(
          std::clamp<int32_t>(index, 0, static_cast<int32_t>(cf.subs.size()) - 1));
    }
    absl::Status s = launch(*cf.subs[branch], absl::MakeSpan(args).subspan(1), results(cf.out));
    return s.ok() ? s : Annotate(s, absl::StrCat("conditional, branch ", branch));
  }
  std::vector<DeviceAllocation*> sets[2] = {results(cf.out), results(cf.spare)};
  for (size_t k = 0; k < args.size(); ++k) {
    const int64_t bytes = cf.shapes[k].byte_size();
    const BoxCopy box = BoxCopy::Flat(0, bytes, 0, bytes, bytes);
    CW_RETURN_IF_ERROR(
        Await([&](Completion c) { CopyWithin(*args[k], *sets[0][k], box, std::move(c)); }));
  }
  DeviceAllocation* const go[] = {view(cf.go, 1)};
  const BoxCopy go_box = BoxCopy::Flat(0, 1, 0, 1, 1);
  int cur = 0;
  for (int64_t iteration = 0;; ++iteration) {
    if (context.stop != nullptr && context.stop->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat("while: stopped at iteration ", iteration,
                                               ": the device is shutting down"));
    }
    absl::Status s = launch(*cf.subs[0], sets[cur], go);
    uint8_t more = 0;
    if (s.ok()) {
      s = Await([&](Completion c) { CopyOut(*go[0], &more, go_box, std::move(c)); });
    }
    if (!s.ok()) return Annotate(s, absl::StrCat("while, cond of iteration ", iteration));
    if (more == 0) break;
    s = launch(*cf.subs[1], sets[cur], sets[1 - cur]);
    if (!s.ok()) return Annotate(s, absl::StrCat("while, body of iteration ", iteration));
    cur = 1 - cur;
  }
  if (cur == 1) {
    const int64_t total = cf.offsets.back();
    DeviceAllocation* from = view(cf.spare, total);
    DeviceAllocation* to = view(cf.out, total);
    const BoxCopy box = BoxCopy::Flat(0, total, 0, total, total);
    CW_RETURN_IF_ERROR(Await([&](Completion c) { CopyWithin(*from, *to, box, std::move(c)); }));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> VulkanDevice::CollectiveOnGpu(const VulkanExecutable& exe,
                                                   const HostStep& h, const Operands& ops,
                                                   CollectiveOps& c) {
  // CAUSEWAY_VULKAN_COLLECTIVES: gpu, host, or auto (unset): the GPU
  // unless it is a CPU (lavapipe), where the hub, reading the mapped bytes
  // in place, is 6-17x faster (docs/BENCHMARKS.md).
  static const std::string_view mode = [] {
    const char* v = std::getenv("CAUSEWAY_VULKAN_COLLECTIVES");
    return std::string_view(v == nullptr ? "auto" : v);
  }();
  if (mode == "host" || (mode != "gpu" && gpu_->is_cpu())) return false;
  const auto& instructions = exe.function().instructions();
  const ir::Instruction& inst = instructions[static_cast<size_t>(h.instruction)];
  // Every member sees the same group and shapes, so all decide alike.
  absl::StatusOr<CollectiveGroup> group = c.GroupOf(inst.axes);
  if (!group.ok() || !group->local()) return false;
  const auto g = static_cast<int64_t>(group->devices.size());
  if (g > kMaxGpuMembers) return false;
  for (Device* d : group->devices) {
    const auto* member = dynamic_cast<const VulkanDevice*>(d);
    if (member == nullptr || member->gpu_ != gpu_) return false;
  }
  const ir::Shape& in_shape = instructions[static_cast<size_t>(inst.operands[0])].shape;
  if (absl::Status s = CheckCollectiveShapes(inst.op, in_shape, inst.shape, inst.dimension,
                                             inst.concat_dimension, inst.source_target_pairs, g);
      !s.ok()) {
    return Annotate(s, absl::StrCat(ir::OpName(inst.op), " #", h.collective_index, " in ",
                                    exe.function().name(), " on ", id_.ToString()));
  }
  const auto [in, in_offset] = Place(h.in, ops);
  const auto [out, out_offset] = Place(h.out, ops);
  const MemberOperands mine{in, in_offset, out, out_offset};
  CW_RETURN_IF_ERROR(c.MeetOnDevices(
      h.collective_index, inst.axes, inst.op, &mine,
      [&](absl::Span<const void* const> all) -> absl::Status {
        // The last member to arrive: the whole collective on its device.
        std::vector<const MemberOperands*> members;
        members.reserve(all.size());
        for (const void* m : all) members.push_back(static_cast<const MemberOperands*>(m));
        CW_ASSIGN_OR_RETURN(
            std::unique_ptr<VulkanAllocation> scratch,
            gpu_->Allocate(CollectiveScratchBytes(inst, in_shape, g), false,
                           absl::StrCat("a collective's scratch on ", id_.ToString())));
        g_collectives_on_gpu.fetch_add(1, std::memory_order_relaxed);
        return Await([&](Completion done) {
          Submit(
              [&](VkCommandBuffer cb) {
                Begin(cb);
                absl::Status s = RecordCollective(cb, *gpu_, inst, in_shape, members, *scratch);
                End(cb);
                return s;
              },
              {}, std::move(done));
        });
      }));
  return true;
}

absl::Status VulkanDevice::RunHostStep(const VulkanExecutable& exe, const HostStep& h,
                                       const Operands& ops, const RunContext& context) {
  if (h.control >= 0) {
    return RunControlFlow(exe.control()[static_cast<size_t>(h.control)], ops, context);
  }
  const ir::Instruction& inst = exe.function().instructions()[static_cast<size_t>(h.instruction)];
  if (inst.op != ir::OpKind::kDelay && context.collectives != nullptr) {
    absl::StatusOr<bool> done = CollectiveOnGpu(exe, h, ops, *context.collectives);
    if (!done.ok() || *done) return done.status();
  }
  std::vector<std::byte> in(static_cast<size_t>(h.in_bytes));
  CW_RETURN_IF_ERROR(ReadRef(h.in, ops, in.data(), h.in_bytes));
  if (inst.op == ir::OpKind::kDelay) {
    const fiber::Deadline deadline =
        std::chrono::steady_clock::now() + std::chrono::microseconds(inst.delay_us);
    CW_RETURN_IF_ERROR(WriteRef(h.out, ops, in.data(), h.out_bytes));
    fiber::SleepUntil(deadline);
    return absl::OkStatus();
  }
  if (context.collectives == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        ir::OpName(inst.op), " needs RunContext::collectives, which is null"));
  }
  CollectiveOps& c = *context.collectives;
  const ir::Shape& in_shape =
      exe.function().instructions()[static_cast<size_t>(inst.operands[0])].shape;
  if (inst.op == ir::OpKind::kAllReduce) {
    CW_RETURN_IF_ERROR(c.AllReduce(h.collective_index, inst.axes, inst.reduce_kind, inst.shape,
                                   in.data()));
    return WriteRef(h.out, ops, in.data(), h.out_bytes);
  }
  std::vector<std::byte> out(static_cast<size_t>(h.out_bytes));
  switch (inst.op) {
    case ir::OpKind::kAllGather:
      CW_RETURN_IF_ERROR(c.AllGather(h.collective_index, inst.axes, in_shape, inst.shape,
                                     inst.dimension, in.data(), out.data()));
      break;
    case ir::OpKind::kReduceScatter:
      CW_RETURN_IF_ERROR(c.ReduceScatter(h.collective_index, inst.axes, inst.reduce_kind,
                                         in_shape, inst.shape, inst.dimension, in.data(),
                                         out.data()));
      break;
    case ir::OpKind::kAllToAll:
      CW_RETURN_IF_ERROR(c.AllToAll(h.collective_index, inst.axes, in_shape, inst.shape,
                                    inst.dimension, inst.concat_dimension, in.data(),
                                    out.data()));
      break;
    case ir::OpKind::kCollectivePermute:
      CW_RETURN_IF_ERROR(c.CollectivePermute(h.collective_index, inst.axes, inst.shape,
                                             inst.source_target_pairs, in.data(), out.data()));
      break;
    default:
      return absl::InternalError(absl::StrCat("not a host step: ", ir::OpName(inst.op)));
  }
  return WriteRef(h.out, ops, out.data(), h.out_bytes);
}

void VulkanDevice::Launch(const Executable& executable,
                          absl::Span<const DeviceAllocation* const> inputs,
                          absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
                          Completion done) {
  if (absl::Status s = CheckLaunchOperands(executable, inputs, outputs, id_); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  const auto* exe = dynamic_cast<const VulkanExecutable*>(&executable);
  if (exe == nullptr) {
    std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "launch of ", executable.function().name(), " on ", id_.ToString(),
        ": the executable was compiled for another kind of device")));
    return;
  }
  for (const DeviceAllocation* a : inputs) {
    if (absl::Status s = Mine(*a); !s.ok()) return std::move(done)(std::move(s));
  }
  for (const DeviceAllocation* a : outputs) {
    if (absl::Status s = Mine(*a); !s.ok()) return std::move(done)(std::move(s));
  }
  LaunchOn(*exe, inputs, outputs, context, nullptr, std::move(done));
}

void VulkanDevice::LaunchOn(const VulkanExecutable& executable,
                            absl::Span<const DeviceAllocation* const> inputs,
                            absl::Span<DeviceAllocation* const> outputs,
                            const RunContext& context, const VulkanAllocation* temp,
                            Completion done) {
  const VulkanExecutable* const exe = &executable;
  absl::StatusOr<const VulkanAllocation*> resident =
      exe->Resident(*gpu_, [this](const std::vector<std::byte>& image, VulkanAllocation& to) {
        const int64_t n = static_cast<int64_t>(image.size());
        const BoxCopy box = BoxCopy::Flat(0, n, 0, to.bytes(), n);
        return Await([&](Completion c) { CopyIn(image.data(), to, box, std::move(c)); });
      });
  if (!resident.ok()) return std::move(done)(resident.status());
  std::vector<std::unique_ptr<VulkanAllocation>> keep;
  Operands ops{inputs, outputs, temp, *resident};
  if (ops.temp == nullptr && exe->temporary_bytes() > 0) {
    absl::StatusOr<std::unique_ptr<VulkanAllocation>> temp = gpu_->Allocate(
        exe->temporary_bytes(), false,
        absl::StrCat("the temporaries of ", exe->function().name(), " on ", id_.ToString()));
    if (!temp.ok()) return std::move(done)(temp.status());
    ops.temp = temp->get();
    keep.push_back(std::move(*temp));
  }
  const std::vector<Segment>& segments = exe->segments();
  if (segments.size() == 1) {
    // No host step: one submission, completed by the GPU.
    SubmitSegment(*exe, 0, ops, std::move(keep), std::move(done));
    return;
  }
  // Host steps between segments: run them here, in order.
  for (size_t index = 0; index < segments.size(); ++index) {
    const Segment& seg = segments[index];
    if (!seg.dispatches.empty()) {
      absl::Status s =
          Await([&](Completion c) { SubmitSegment(*exe, index, ops, {}, std::move(c)); });
      if (!s.ok()) return std::move(done)(std::move(s));
    }
    if (seg.has_host_step) {
      if (absl::Status s = RunHostStep(*exe, seg.host, ops, context); !s.ok()) {
        return std::move(done)(std::move(s));
      }
    }
  }
  keep.clear();
  std::move(done)(absl::OkStatus());
}

int GpuCount() {
  absl::StatusOr<std::vector<std::string>> gpus = Gpu::List();
  return gpus.ok() ? static_cast<int>(gpus->size()) : 0;
}

class VulkanKind final : public DeviceKind {
 public:
  absl::string_view name() const override { return kKindName; }
  absl::StatusOr<std::shared_ptr<const Executable>> Compile(
      const ir::Function& function) const override {
    CW_ASSIGN_OR_RETURN(std::shared_ptr<const VulkanExecutable> exe,
                        VulkanExecutable::Compile(function, FuseElementwise()));
    return std::shared_ptr<const Executable>(std::move(exe));
  }
  absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) const override {
    CW_ASSIGN_OR_RETURN(Gpu * gpu, GpuFor(spec));
    auto device = std::make_unique<VulkanDevice>(spec, gpu);
    CW_RETURN_IF_ERROR(device->Init());
    return std::unique_ptr<Device>(std::move(device));
  }
  // The GPU's own description: making a device for it would take a queue
  // and memory.
  absl::StatusOr<DeviceDescription> Describe(const DeviceSpec& spec) const override {
    CW_ASSIGN_OR_RETURN(Gpu * gpu, GpuFor(spec));
    DeviceDescription d = gpu->description();
    d.kind = std::string(kKindName);
    return d;
  }

 private:
  // Whether compiled functions fuse runs of element-wise ops: not where
  // every GPU the devices may run on is a CPU running the CPU variants
  // (lavapipe: llvmpipe runs the fused kernel's interpreter switch in full
  // for every op, 6x the time of the single-op dispatches it replaces;
  // docs/BENCHMARKS.md). CAUSEWAY_VULKAN_KERNELS=gpu keeps fusion there too.
  static bool FuseElementwise() {
    absl::StatusOr<int> chosen = ChosenGpu();
    std::vector<int> used;
    if (chosen.ok() && *chosen >= 0) {
      used.push_back(*chosen);
    } else {
      for (int i = 0; i < GpuCount(); ++i) used.push_back(i);
    }
    if (used.empty()) return true;
    for (int i : used) {
      absl::StatusOr<Gpu*> gpu = Gpu::Get(i);
      if (!gpu.ok() || !(*gpu)->cpu_kernels()) return true;
    }
    return false;
  }
  // --gpu N or CAUSEWAY_VULKAN_GPU=N; -1 for neither.
  static absl::StatusOr<int> ChosenGpu() {
    int index = g_selected_gpu.load();
    if (index < 0) {
      // CAUSEWAY_VULKAN_GPU=N: the default of SelectGpu for processes
      // without the flag (tests, Python).
      if (const char* env = std::getenv("CAUSEWAY_VULKAN_GPU"); env != nullptr && *env != '\0') {
        int chosen = -1;
        if (!absl::SimpleAtoi(env, &chosen) || chosen < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("CAUSEWAY_VULKAN_GPU=", env, " is not a GPU index (causeway gpus)"));
        }
        index = chosen;
      }
    }
    return index;
  }
  // The physical GPU device `spec` runs on: --gpu N, CAUSEWAY_VULKAN_GPU=N,
  // or the devices spread over every GPU by local index.
  static absl::StatusOr<Gpu*> GpuFor(const DeviceSpec& spec) {
    CW_ASSIGN_OR_RETURN(int index, ChosenGpu());
    if (index < 0) {
      const int n = GpuCount();
      index = n > 0 ? spec.local_index % n : 0;
    }
    return Gpu::Get(index);
  }
};

}  // namespace

const DeviceKind& Kind() {
  static const DeviceKind& kind = RegisterDeviceKind(std::make_unique<VulkanKind>());
  return kind;
}

int64_t CollectivesOnGpu() { return g_collectives_on_gpu.load(std::memory_order_relaxed); }

int64_t SegmentRecordings() { return g_segment_recordings.load(std::memory_order_relaxed); }

absl::Status SelectGpu(int gpu) {
  if (gpu >= 0) {
    CW_ASSIGN_OR_RETURN(std::vector<std::string> gpus, Gpu::List());
    if (gpu >= static_cast<int>(gpus.size())) {
      std::string known;
      for (size_t i = 0; i < gpus.size(); ++i) {
        absl::StrAppend(&known, i == 0 ? "" : "; ", i, ": ", gpus[i]);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("no GPU ", gpu, ": this machine has ", gpus.size(), " (", known, ")"));
    }
  }
  g_selected_gpu.store(gpu);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListGpus() { return Gpu::List(); }

}  // namespace causeway::backend::vulkan
