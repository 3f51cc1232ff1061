// VulkanDevice's host steps (device_internal.h): what runs on the host
// between a launch's segments. Loops and conditionals launch their
// sub-functions on the device and wait for them; a collective among devices
// of one GPU is the GPU's (collectives.h), any other goes through the
// launch's CollectiveOps (the host-staged hub); a delay sleeps.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/vulkan/collectives.h"
#include "causeway/backend/vulkan/device_internal.h"
#include "causeway/base/check.h"
#include "causeway/base/fiber.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::vulkan {
namespace {

std::atomic<int64_t> g_collectives_on_gpu{0};

}  // namespace

int64_t VulkanDevice::CollectivesOnGpu() {
  return g_collectives_on_gpu.load(std::memory_order_relaxed);
}

std::pair<const VulkanAllocation*, uint64_t> VulkanDevice::Place(const Ref& r,
                                                                 const Operands& ops) const {
  switch (r.kind) {
    case Ref::Kind::kInput: return {&V(*ops.inputs[r.index]), r.offset};
    case Ref::Kind::kOutput: return {&V(*ops.outputs[r.index]), r.offset};
    case Ref::Kind::kTemp: return {ops.temp, r.offset};
    case Ref::Kind::kResident: return {ops.resident, r.offset};
    case Ref::Kind::kNone: break;
  }
  return {nullptr, 0};
}

absl::Status VulkanDevice::ReadRef(const Ref& r, const Operands& ops, void* dst, int64_t bytes) {
  const auto [a, off] = Place(r, ops);
  if (a == nullptr || bytes == 0) return absl::OkStatus();
  const BoxCopy box = BoxCopy::Flat(static_cast<int64_t>(off), a->bytes(), 0, bytes, bytes);
  const VulkanAllocation& from = *a;  // a structured binding cannot be captured (C++17)
  return Await([&](Completion c) { CopyOut(from, dst, box, std::move(c)); });
}

absl::Status VulkanDevice::WriteRef(const Ref& r, const Operands& ops, const void* src,
                                    int64_t bytes) {
  const auto [a, off] = Place(r, ops);
  if (a == nullptr || bytes == 0) return absl::OkStatus();
  const BoxCopy box = BoxCopy::Flat(0, bytes, static_cast<int64_t>(off), a->bytes(), bytes);
  auto& to = *const_cast<VulkanAllocation*>(a);  // see ReadRef
  return Await([&](Completion c) { CopyIn(src, to, box, std::move(c)); });
}

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
    if (absl::Status s = context.Stopped(absl::StrCat("while: stopped at iteration ", iteration));
        !s.ok()) {
      return s;
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
  static const absl::StatusOr<std::string> setting =
      SettingValue("CAUSEWAY_VULKAN_COLLECTIVES", "auto");
  if (!setting.ok()) return setting.status();
  const std::string_view mode = *setting;
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
          queue_->Submit(
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
  if (inst.op == ir::OpKind::kDelay) {
    std::vector<std::byte> in(static_cast<size_t>(h.in_bytes));
    CW_RETURN_IF_ERROR(ReadRef(h.in, ops, in.data(), h.in_bytes));
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
  return dispatch::RunCollectiveOnHost(
      exe, h, *context.collectives,
      [&](void* in) { return ReadRef(h.in, ops, in, h.in_bytes); },
      [&](const void* out) { return WriteRef(h.out, ops, out, h.out_bytes); });
}

}  // namespace causeway::backend::vulkan
