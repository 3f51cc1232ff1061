// CudaDevice's launches: a dispatch program's segments enqueued on the
// stream as CUDA kernels and cuBLASLt products, and what runs on the host
// between them (host steps): collectives through the launch's
// CollectiveOps (the host-staged hub), loops and conditionals as launches
// of their sub-programs with the host reading only the condition or the
// selector. A delay is a kernel that holds the GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/cuda/device.h"
#include "causeway/backend/cuda/device_internal.h"
#include "causeway/base/status_macros.h"

namespace causeway::backend::cuda {
namespace {

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

std::byte* CudaDevice::Operands::At(const dispatch::Ref& r) const {
  if (r.kind == dispatch::Ref::Kind::kNone) return nullptr;
  const uint32_t slot = dispatch::TableSlot(r, inputs, outputs);
  if (slot >= table.size() || table[slot] == nullptr) return nullptr;
  return static_cast<std::byte*>(const_cast<void*>(table[slot])) + r.offset;
}

absl::StatusOr<const std::byte*> CudaDevice::MakeResident(const dispatch::Program& program,
                                                          bool nested) {
  absl::StatusOr<void*> uploaded = program.Resident(
      gpu_, [&](const std::vector<std::byte>& image) -> absl::StatusOr<std::shared_ptr<void>> {
        CW_RETURN_IF_ERROR(gpu_->MakeCurrent());
        void* p = nullptr;
        CW_RETURN_IF_ERROR(CudaStatus(
            cudaMalloc(&p, image.size()),
            absl::StrCat("the constants of ", program.function().name(), " on ", id_.ToString())));
        const Gpu* gpu = gpu_;
        std::shared_ptr<void> kept(p, [gpu](void* q) {
          if (gpu->MakeCurrent().ok()) cudaFree(q);
        });
        CW_RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy(p, image.data(), image.size(), cudaMemcpyHostToDevice),
            absl::StrCat("uploading the constants of ", program.function().name())));
        return kept;
      });
  if (!uploaded.ok()) return uploaded.status();
  const auto* resident = static_cast<const std::byte*>(*uploaded);
  if (nested) {
    for (const dispatch::ControlFlow& cf : program.control()) {
      for (const auto& sub : cf.subs) CW_RETURN_IF_ERROR(MakeResident(*sub, true).status());
    }
  }
  return resident;
}

absl::Status CudaDevice::Load(const Executable& executable) {
  const auto* program = dynamic_cast<const dispatch::Program*>(&executable);
  if (program == nullptr || program->kind() != kKindName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading ", executable.function().name(), " on ", id_.ToString(),
        ": the executable was compiled for another kind of device"));
  }
  absl::StatusOr<const std::byte*> resident = MakeResident(*program, true);
  if (!resident.ok()) return Annotate(resident.status(), absl::StrCat("on ", id_.ToString()));
  return absl::OkStatus();
}

void CudaDevice::Launch(const Executable& executable,
                        absl::Span<const DeviceAllocation* const> inputs,
                        absl::Span<DeviceAllocation* const> outputs, const RunContext& context,
                        Completion done) {
  if (absl::Status s = CheckLaunchOperands(executable, inputs, outputs, id_); !s.ok()) {
    return std::move(done)(std::move(s));
  }
  const auto* program = dynamic_cast<const dispatch::Program*>(&executable);
  if (program == nullptr || program->kind() != kKindName) {
    return std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "launch of ", executable.function().name(), " on ", id_.ToString(),
        ": the executable was compiled for another kind of device")));
  }
  Operands ops;
  ops.inputs = inputs.size();
  ops.outputs = outputs.size();
  for (const DeviceAllocation* a : inputs) {
    if (absl::Status s = Mine(*a); !s.ok()) return std::move(done)(std::move(s));
    ops.table.push_back(static_cast<const CudaAllocation*>(a)->ptr());
  }
  for (DeviceAllocation* a : outputs) {
    if (absl::Status s = Mine(*a); !s.ok()) return std::move(done)(std::move(s));
    ops.table.push_back(static_cast<CudaAllocation*>(a)->ptr());
  }
  absl::Status s = gpu_->MakeCurrent();
  if (s.ok()) {
    absl::StatusOr<const std::byte*> resident = MakeResident(*program, false);
    ops.table.push_back(nullptr);  // temporaries: Enqueue's own
    ops.table.push_back(resident.ok() ? *resident : nullptr);
    s = resident.status();
  }
  if (s.ok()) s = Enqueue(*program, std::move(ops), context);
  // Whatever was enqueued runs before `done`, which then may free the
  // buffers it wrote.
  completions_->Enqueue([s, done = std::move(done)](absl::Status gpu) mutable {
    std::move(done)(s.ok() ? std::move(gpu) : s);
  });
}

absl::Status CudaDevice::Enqueue(const dispatch::Program& program, Operands ops,
                                 const RunContext& context) {
  const size_t temp_slot = ops.inputs + ops.outputs;
  void* own_temp = nullptr;
  if (ops.table[temp_slot] == nullptr && program.temporary_bytes() > 0) {
    CW_RETURN_IF_ERROR(CudaStatus(
        cudaMallocFromPoolAsync(&own_temp, static_cast<size_t>(program.temporary_bytes()),
                                static_cast<cudaMemPool_t>(gpu_->pool()), S(stream_)),
        absl::StrCat("the temporaries of ", program.function().name(), " (",
                     program.temporary_bytes(), " bytes) on ", id_.ToString())));
    ops.table[temp_slot] = own_temp;
  }
  absl::Status status;
  for (const dispatch::Segment& segment : program.segments()) {
    status = EnqueueSegment(program, segment, ops);
    if (status.ok() && segment.has_host_step) {
      status = RunHostStep(program, segment.host, ops, context);
    }
    if (!status.ok()) break;
  }
  // Stream-ordered: the temporaries go back to the pool after the work
  // enqueued before, which still reads them.
  if (own_temp != nullptr) cudaFreeAsync(own_temp, S(stream_));
  return status;
}

absl::Status CudaDevice::EnqueueSegment(const dispatch::Program& program,
                                        const dispatch::Segment& segment, const Operands& ops) {
  const std::vector<std::byte>& image = program.resident_image();
  for (size_t i = 0; i < segment.dispatches.size(); ++i) {
    const dispatch::Dispatch& d = segment.dispatches[i];
    KernelArgs args;
    args.a = ops.At(d.a);
    args.b = ops.At(d.b);
    args.c = ops.At(d.c);
    args.d = ops.At(d.d);
    args.out = ops.At(d.out);
    if (d.params.kind == dispatch::Ref::Kind::kResident) {
      args.params = reinterpret_cast<const int32_t*>(ops.At(d.params));
      args.host_params = reinterpret_cast<const int32_t*>(image.data() + d.params.offset);
    }
    args.n = d.n;
    args.op = d.op;
    args.x = d.x;
    args.y = d.y;
    for (int g = 0; g < 3; ++g) args.groups[g] = d.groups[static_cast<size_t>(g)];
    args.table = ops.table.data();
    args.table_size = static_cast<int>(ops.table.size());
    std::string error;
    if (const int e = cuda::Launch(d.kernel, args, libraries_, stream_, &error); e != 0) {
      return absl::InternalError(absl::StrCat("dispatch ", i, " (", dispatch::KernelName(d.kernel),
                                              ") of ", program.function().name(), " on ",
                                              id_.ToString(), ": ", error));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::Read(const void* from, void* to, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CW_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDefault, S(stream_)),
      absl::StrCat("a read from ", id_.ToString())));
  return completions_->Drain();
}

absl::Status CudaDevice::Write(const void* from, void* to, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  CW_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDefault, S(stream_)),
      absl::StrCat("a write to ", id_.ToString())));
  // The host memory is the caller's: it must not change before the copy.
  return completions_->Drain();
}

absl::Status CudaDevice::RunHostStep(const dispatch::Program& program, const dispatch::HostStep& h,
                                     const Operands& ops, const RunContext& context) {
  if (h.control >= 0) {
    return RunControlFlow(program.control()[static_cast<size_t>(h.control)], ops, context);
  }
  const ir::Instruction& inst =
      program.function().instructions()[static_cast<size_t>(h.instruction)];
  if (inst.op == ir::OpKind::kDelay) {
    // The GPU is held, not the host: the operand passes through.
    if (h.in_bytes > 0) {
      CW_RETURN_IF_ERROR(CudaStatus(
          cudaMemcpyAsync(ops.At(h.out), ops.At(h.in), static_cast<size_t>(h.in_bytes),
                          cudaMemcpyDeviceToDevice, S(stream_)),
          absl::StrCat("a delay on ", id_.ToString())));
    }
    std::string error;
    if (const int e = LaunchDelay(inst.delay_us, stream_, &error); e != 0) {
      return absl::InternalError(absl::StrCat("a delay on ", id_.ToString(), ": ", error));
    }
    return absl::OkStatus();
  }
  if (context.collectives == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        ir::OpName(inst.op), " needs RunContext::collectives, which is null"));
  }
  return dispatch::RunCollectiveOnHost(
      program, h, *context.collectives,
      [&](void* in) { return Read(ops.At(h.in), in, h.in_bytes); },
      [&](const void* out) { return Write(out, ops.At(h.out), h.out_bytes); });
}

// As the vulkan kind's: the carry lives in two packed sets, the
// instruction's own result and a spare, which the body writes in turn; the
// host reads one byte per iteration, the condition. The spare, the
// condition and the sub-programs' temporaries lie in the caller's
// temporaries (dispatch::ControlFlow).
absl::Status CudaDevice::RunControlFlow(const dispatch::ControlFlow& cf, const Operands& ops,
                                        const RunContext& context) {
  std::byte* const sub_temp = cf.sub_temp_bytes > 0 ? ops.At(cf.sub_temp) : nullptr;
  auto launch = [&](const dispatch::Program& sub, const std::vector<std::byte*>& in,
                    const std::vector<std::byte*>& out) -> absl::Status {
    CW_ASSIGN_OR_RETURN(const std::byte* resident, MakeResident(sub, false));
    Operands sub_ops;
    sub_ops.inputs = in.size();
    sub_ops.outputs = out.size();
    for (std::byte* p : in) sub_ops.table.push_back(p);
    for (std::byte* p : out) sub_ops.table.push_back(p);
    sub_ops.table.push_back(sub.temporary_bytes() > 0 ? sub_temp : nullptr);
    sub_ops.table.push_back(resident);
    return Enqueue(sub, std::move(sub_ops), context);
  };
  auto results = [&](const dispatch::Ref& base) {
    std::vector<std::byte*> v;
    std::byte* at = ops.At(base);
    for (size_t k = 0; k < cf.shapes.size(); ++k) v.push_back(at + cf.offsets[k]);
    return v;
  };
  std::vector<std::byte*> args;
  for (const dispatch::Ref& r : cf.operands) args.push_back(ops.At(r));
  if (!cf.is_while) {
    // The selector: a pred (any non-zero byte: branch 0) or an i32 clamped
    // to the branches.
    size_t branch;
    if (cf.operand_bytes[0] == 1) {
      uint8_t pred = 0;
      CW_RETURN_IF_ERROR(Read(args[0], &pred, 1));
      branch = pred != 0 ? 0 : 1;
    } else {
      int32_t index = 0;
      CW_RETURN_IF_ERROR(Read(args[0], &index, 4));
      branch = static_cast<size_t>(
          std::clamp<int32_t>(index, 0, static_cast<int32_t>(cf.subs.size()) - 1));
    }
    const std::vector<std::byte*> rest(args.begin() + 1, args.end());
    absl::Status s = launch(*cf.subs[branch], rest, results(cf.out));
    return s.ok() ? s : Annotate(s, absl::StrCat("conditional, branch ", branch));
  }
  std::vector<std::byte*> sets[2] = {results(cf.out), results(cf.spare)};
  for (size_t k = 0; k < args.size(); ++k) {
    const int64_t bytes = cf.shapes[k].byte_size();
    if (bytes == 0) continue;
    CW_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(sets[0][k], args[k], static_cast<size_t>(bytes),
                                                  cudaMemcpyDeviceToDevice, S(stream_)),
                                  absl::StrCat("a loop's carry on ", id_.ToString())));
  }
  const std::vector<std::byte*> go = {ops.At(cf.go)};
  int cur = 0;
  for (int64_t iteration = 0;; ++iteration) {
    if (absl::Status s = context.Stopped(absl::StrCat("while: stopped at iteration ", iteration));
        !s.ok()) {
      return s;
    }
    absl::Status s = launch(*cf.subs[0], sets[cur], go);
    uint8_t more = 0;
    if (s.ok()) s = Read(go[0], &more, 1);
    if (!s.ok()) return Annotate(s, absl::StrCat("while, cond of iteration ", iteration));
    if (more == 0) break;
    s = launch(*cf.subs[1], sets[cur], sets[1 - cur]);
    if (!s.ok()) return Annotate(s, absl::StrCat("while, body of iteration ", iteration));
    cur = 1 - cur;
  }
  if (cur == 1 && cf.offsets.back() > 0) {
    CW_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(ops.At(cf.out), ops.At(cf.spare), static_cast<size_t>(cf.offsets.back()),
                        cudaMemcpyDeviceToDevice, S(stream_)),
        absl::StrCat("a loop's result on ", id_.ToString())));
  }
  return absl::OkStatus();
}

}  // namespace causeway::backend::cuda
