// The vulkan kind (device.h): VulkanDevice's set-up and launches
// (device_internal.h; its copies are in device_copies.cc, its host steps in
// device_steps.cc, its submissions in queue.cc), the kind and its GPU
// selection.
#include "causeway/backend/vulkan/device.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/vulkan/collectives.h"
#include "causeway/backend/vulkan/device_internal.h"
#include "causeway/backend/vulkan/executable.h"
#include "causeway/backend/vulkan/gpu.h"
#include "causeway/backend/vulkan/kernels.h"
#include "causeway/backend/vulkan/profile.h"
#include "causeway/backend/vulkan/queue.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

std::atomic<int> g_selected_gpu{-1};

}  // namespace

VulkanDevice::VulkanDevice(const DeviceSpec& spec, Gpu* gpu) : id_(spec.id), gpu_(gpu) {
  description_ = gpu->description();
  description_.kind = std::string(kKindName);
}

absl::Status VulkanDevice::Init() {
  CW_ASSIGN_OR_RETURN(queue_, DeviceQueue::Create(id_, gpu_));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> VulkanDevice::Allocate(int64_t bytes) {
  CW_ASSIGN_OR_RETURN(std::unique_ptr<VulkanAllocation> a,
                      gpu_->Allocate(bytes, false, id_.ToString()));
  return std::unique_ptr<DeviceAllocation>(std::move(a));
}

absl::Status VulkanDevice::Mine(const DeviceAllocation& a) const {
  const auto* v = dynamic_cast<const VulkanAllocation*>(&a);
  if (v == nullptr || &v->gpu() != gpu_) {
    return absl::InvalidArgumentError(
        absl::StrCat("an allocation of another device was given to ", id_.ToString()));
  }
  return absl::OkStatus();
}

void VulkanDevice::Begin(VkCommandBuffer cb) {
  Barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
          VK_ACCESS_MEMORY_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
              VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
}

void VulkanDevice::End(VkCommandBuffer cb) {
  Barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
}

void VulkanDevice::FillTable(const VulkanAllocation& table, const Operands& ops) const {
  auto* t = reinterpret_cast<uint64_t*>(table.host());
  size_t k = 0;
  for (const DeviceAllocation* a : ops.inputs) t[k++] = V(*a).address();
  for (DeviceAllocation* a : ops.outputs) t[k++] = V(*a).address();
  t[k++] = ops.temp != nullptr ? ops.temp->address() : 0;
  t[k++] = ops.resident != nullptr ? ops.resident->address() : 0;
}

absl::StatusOr<std::unique_ptr<DispatchTimer>> VulkanDevice::RecordSegment(
    VkCommandBuffer cb, const Segment& seg, const Operands& ops, uint64_t table) {
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
  return timer;
}

void VulkanDevice::SubmitSegment(const VulkanExecutable& exe, size_t index, const Operands& ops,
                                 std::vector<std::unique_ptr<VulkanAllocation>> keep,
                                 Completion done) {
  const bool profiled = DispatchTimer::Enabled();
  absl::StatusOr<std::unique_ptr<DeviceQueue::Recorded>> rec = queue_->ReuseOrRecord(
      exe, index, profiled, static_cast<int64_t>(TableSlots(ops) * sizeof(uint64_t)),
      [&](VkCommandBuffer cb, uint64_t table) {
        return RecordSegment(cb, exe.segments()[index], ops, table);
      });
  if (!rec.ok()) return std::move(done)(rec.status());
  FillTable(*(*rec)->table, ops);
  queue_->SubmitRecorded(*std::move(rec), std::move(keep), std::move(done));
}

absl::StatusOr<const VulkanAllocation*> VulkanDevice::MakeResident(const VulkanExecutable& exe,
                                                                   bool nested) {
  absl::StatusOr<void*> uploaded = exe.Resident(
      gpu_, [&](const std::vector<std::byte>& image) -> absl::StatusOr<std::shared_ptr<void>> {
        const int64_t n = static_cast<int64_t>(image.size());
        CW_ASSIGN_OR_RETURN(std::unique_ptr<VulkanAllocation> to,
                            gpu_->Allocate(n, false,
                                           absl::StrCat("the constants of ",
                                                        exe.function().name())));
        const BoxCopy box = BoxCopy::Flat(0, n, 0, to->bytes(), n);
        CW_RETURN_IF_ERROR(
            Await([&](Completion c) { CopyIn(image.data(), *to, box, std::move(c)); }));
        return std::shared_ptr<void>(std::shared_ptr<VulkanAllocation>(std::move(to)));
      });
  if (!uploaded.ok()) return uploaded.status();
  const auto* resident = static_cast<const VulkanAllocation*>(*uploaded);
  if (!nested) return resident;
  for (const ControlFlow& cf : exe.control()) {
    for (const auto& sub : cf.subs) CW_RETURN_IF_ERROR(MakeResident(*sub, true).status());
  }
  return resident;
}

absl::Status VulkanDevice::Load(const Executable& executable) {
  const auto* exe = dynamic_cast<const VulkanExecutable*>(&executable);
  if (exe == nullptr || exe->kind() != kKindName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading ", executable.function().name(), " on ", id_.ToString(),
        ": the executable was compiled for another kind of device"));
  }
  absl::StatusOr<const VulkanAllocation*> resident = MakeResident(*exe, true);
  if (!resident.ok()) return Annotate(resident.status(), absl::StrCat("on ", id_.ToString()));
  return absl::OkStatus();
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
  if (exe == nullptr || exe->kind() != kKindName) {
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
  absl::StatusOr<const VulkanAllocation*> resident = MakeResident(*exe, false);
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
  // Host steps between segments: run them here, in order, once what the
  // launches before this one wrote is there.
  if (absl::Status s = queue_->AwaitSubmitted(); !s.ok()) return std::move(done)(std::move(s));
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

namespace {

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
                        VulkanExecutable::Compile(function, {std::string(kKindName), FuseElementwise()}));
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
  absl::StatusOr<std::vector<std::string>> ListDevices() const override { return Gpu::List(); }
  absl::Status SelectDevice(int index) const override { return SelectGpu(index); }

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
      CW_ASSIGN_OR_RETURN(index, SettingIndex("CAUSEWAY_VULKAN_GPU"));
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

int64_t CollectivesOnGpu() { return VulkanDevice::CollectivesOnGpu(); }

int64_t SegmentRecordings() { return DeviceQueue::Recordings(); }

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
