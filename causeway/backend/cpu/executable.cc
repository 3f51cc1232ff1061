#include "causeway/backend/cpu/executable.h"

#include "causeway/backend/cpu/device.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/buffer_plan.h"
#include "causeway/backend/cpu/kernels.h"
#include "causeway/base/fiber.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/convolution.h"
#include "causeway/ir/verifier.h"

namespace causeway::backend::cpu {
namespace {

using ir::Instruction;
using ir::OpKind;

constexpr std::align_val_t kArenaAlignment{64};

struct ArenaDeleter {
  void operator()(std::byte* p) const { ::operator delete[](p, kArenaAlignment); }
};
using ArenaPtr = std::unique_ptr<std::byte[], ArenaDeleter>;

// Flushes denormal floats to zero (results and inputs) on this thread while
// it lives, as XLA's CPU backend does: arithmetic on denormals is up to two
// orders of magnitude slower, and training produces them (softmax tails,
// small gradients). The previous mode is restored on exit.
class FlushDenormals {
 public:
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtz = 0x8000;  // flush-to-zero
  static constexpr unsigned kDaz = 0x0040;  // denormals-are-zero
  const unsigned saved_;
#endif
};

void CopyBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

absl::Status RunCollective(const Step& step, const Instruction& inst,
                           const ir::Shape& in_shape, const void* in, void* out,
                           CollectiveOps& ops);

// What a control-flow instruction runs: its sub-functions, compiled, and
// where its packed results lie.
struct ControlFlow {
  std::vector<std::shared_ptr<const HostExecutable>> subs;
  std::vector<ir::Shape> shapes;
  std::vector<int64_t> offsets;  // one per result, then the total
  bool is_while = false;
};

class CpuExecutable final : public HostExecutable {
 public:
  CpuExecutable(ir::Function function, ExecutionPlan plan,
                std::vector<ControlFlow> control_flow)
      : HostExecutable(std::move(function)),
        plan_(std::move(plan)),
        control_flow_(std::move(control_flow)) {
    temporary_bytes_ = plan_.arena_bytes;
    int64_t nested = 0;
    for (const ControlFlow& cf : control_flow_) {
      int64_t sub = 0;
      for (const auto& e : cf.subs) sub = std::max(sub, e->temporary_bytes());
      // A loop's second carry buffer (the first is its packed result, in
      // the arena, as a conditional's results are).
      const int64_t carry = cf.is_while ? cf.offsets.back() : 0;
      if (!cf.subs.empty()) nested = std::max(nested, carry + sub);
    }
    temporary_bytes_ += nested;
  }

  absl::Status Run(absl::Span<const void* const> inputs, absl::Span<void* const> outputs,
                   const RunContext& context) const override;
  int64_t temporary_bytes() const override { return temporary_bytes_; }

 private:
  // Pointers of one run.
  struct Buffers {
    absl::Span<const void* const> inputs;
    absl::Span<void* const> outputs;
    std::byte* arena;
  };

  const void* Resolve(const BufferLocation& loc, const Buffers& buffers) const;
  void* ResolveMutable(const BufferLocation& loc, const Buffers& buffers) const;
  absl::Status RunStep(const Step& step, const Buffers& buffers,
                       const RunContext& context) const;
  absl::Status RunFused(const Step& step, const Buffers& buffers,
                        const RunContext& context) const;
  absl::Status RunWhile(const Step& step, const Buffers& buffers,
                        const RunContext& context) const;
  absl::Status RunConditional(const Step& step, const Buffers& buffers,
                              const RunContext& context) const;
  const ir::Shape& OperandShape(const Instruction& inst, size_t k) const {
    return function().instructions()[inst.operands[k]].shape;
  }

  // Arenas of finished runs, kept for the next ones: a fresh arena of many
  // megabytes costs a page fault per 4 KiB page on first touch, every run.
  // At most kMaxCachedArenas are kept (one per concurrently running device
  // is typical); a run that finds none allocates.
  ArenaPtr AcquireArena() const;
  void ReleaseArena(ArenaPtr arena) const;
  static constexpr size_t kMaxCachedArenas = 4;

  const ExecutionPlan plan_;
  // Indexed by instruction; empty entries for instructions that are not
  // control flow.
  const std::vector<ControlFlow> control_flow_;
  int64_t temporary_bytes_ = 0;
  mutable Mutex arenas_mu_;
  mutable std::vector<ArenaPtr> free_arenas_ ABSL_GUARDED_BY(arenas_mu_);
};

ArenaPtr CpuExecutable::AcquireArena() const {
  {
    MutexLock lock(&arenas_mu_);
    if (!free_arenas_.empty()) {
      ArenaPtr arena = std::move(free_arenas_.back());
      free_arenas_.pop_back();
      return arena;
    }
  }
  return ArenaPtr(static_cast<std::byte*>(::operator new[](
      static_cast<size_t>(plan_.arena_bytes), kArenaAlignment, std::nothrow)));
}

void CpuExecutable::ReleaseArena(ArenaPtr arena) const {
  if (arena == nullptr) return;
  MutexLock lock(&arenas_mu_);
  if (free_arenas_.size() < kMaxCachedArenas) free_arenas_.push_back(std::move(arena));
}

const void* CpuExecutable::Resolve(const BufferLocation& loc,
                                   const Buffers& buffers) const {
  switch (loc.kind) {
    case BufferLocation::Kind::kInput:
      return buffers.inputs[loc.index];
    case BufferLocation::Kind::kConstant:
      return function().instructions()[loc.index].literal.data();
    case BufferLocation::Kind::kOutput:
    case BufferLocation::Kind::kArena:
      return ResolveMutable(loc, buffers);
  }
  return nullptr;
}

void* CpuExecutable::ResolveMutable(const BufferLocation& loc,
                                    const Buffers& buffers) const {
  if (loc.kind == BufferLocation::Kind::kOutput) return buffers.outputs[loc.index];
  CW_CHECK(loc.kind == BufferLocation::Kind::kArena) << "writing a read-only buffer";
  return buffers.arena + loc.index;
}

// Elements a fused step computes at a time: each op's chunk of values stays
// in the L1 cache until the next op reads it.
constexpr int64_t kFusedChunk = 1024;

absl::Status CpuExecutable::RunFused(const Step& step, const Buffers& buffers,
                                     const RunContext& context) const {
  const int64_t n = step.fused_elements;
  const size_t m = step.fused.size();
  struct Span {
    const std::byte* begin;
    const std::byte* end;
  };
  auto span = [](const void* p, int64_t floats) {
    const auto* b = static_cast<const std::byte*>(p);
    return Span{b, b + floats * static_cast<int64_t>(sizeof(float))};
  };
  std::vector<float*> out(m, nullptr);
  std::vector<std::array<const float*, 2>> outside(m, {nullptr, nullptr});
  std::vector<Span> writes;
  for (size_t j = 0; j < m; ++j) {
    const FusedOp& op = step.fused[j];
    const Step& s = step.unfused[j];
    if (op.store) {
      out[j] = static_cast<float*>(ResolveMutable(s.result, buffers));
      writes.push_back(span(out[j], n));
    }
    for (size_t k = 0; k < s.operands.size(); ++k) {
      if (op.from[k] < 0) outside[j][k] = static_cast<const float*>(Resolve(s.operands[k], buffers));
    }
  }
  // Chunk by chunk, an op writes element i before a later op reads element
  // i' > i of another value. That is the unfused order's result unless a
  // written buffer overlaps a value read from outside other than exactly
  // (the same dense elements, which an earlier op read before the write).
  for (size_t j = 0; j < m; ++j) {
    const Step& s = step.unfused[j];
    for (size_t k = 0; k < s.operands.size(); ++k) {
      if (step.fused[j].from[k] >= 0) continue;
      const int64_t row = s.operand_row[k];
      const Span r = span(outside[j][k], row > 0 ? row : n);
      for (const Span& w : writes) {
        if (w.begin < r.end && r.begin < w.end && !(w.begin == r.begin && row == 0)) {
          for (const Step& u : step.unfused) CW_RETURN_IF_ERROR(RunStep(u, buffers, context));
          return absl::OkStatus();
        }
      }
    }
  }
  // Scratch slots, then one chunk per operand for a repeated row.
  // Aligned as the arena's slices are (and chunks start at multiples of 4
  // KiB), so that Eigen computes the same elements with its vector code as
  // it does op by op; its scalar code may round transcendentals apart.
  thread_local std::vector<float> scratch_storage;
  const size_t need = static_cast<size_t>((step.fused_scratch + 2) * kFusedChunk);
  constexpr size_t kAlignFloats = static_cast<size_t>(kArenaAlignment) / sizeof(float);
  if (scratch_storage.size() < need + kAlignFloats) scratch_storage.resize(need + kAlignFloats);
  float* const scratch_base = scratch_storage.data();
  const size_t misalign =
      (reinterpret_cast<uintptr_t>(scratch_base) / sizeof(float)) % kAlignFloats;
  float* const scratch = scratch_base + (misalign == 0 ? 0 : kAlignFloats - misalign);
  float* const rows = scratch + step.fused_scratch * kFusedChunk;
  for (int64_t c = 0; c < n; c += kFusedChunk) {
    const int64_t len = std::min(kFusedChunk, n - c);
    auto value = [&](int j) -> float* {
      const FusedOp& op = step.fused[j];
      return op.store ? out[j] + c : scratch + op.scratch * kFusedChunk;
    };
    for (size_t j = 0; j < m; ++j) {
      const FusedOp& op = step.fused[j];
      const Step& s = step.unfused[j];
      const OpKind kind = function().instructions()[s.instruction].op;
      const float* a[2] = {nullptr, nullptr};
      int64_t repeat[2] = {0, 0};
      for (size_t k = 0; k < s.operands.size(); ++k) {
        const int64_t row = s.operand_row[k];
        if (op.from[k] >= 0) {
          a[k] = value(op.from[k]);
        } else if (row == 0) {
          a[k] = outside[j][k] + c;
        } else if (row == 1 || (c % row == 0 && len % row == 0)) {
          a[k] = outside[j][k];  // whole rows from the row's start
          repeat[k] = row;
        } else {
          // The row's elements at this chunk's positions: one row from
          // the chunk's phase, then doubled.
          float* r = rows + k * kFusedChunk;
          const float* src = outside[j][k];
          const int64_t at = c % row, first = std::min(row, len);
          const int64_t head = std::min(row - at, first);
          std::memcpy(r, src + at, static_cast<size_t>(head) * sizeof(float));
          std::memcpy(r + head, src, static_cast<size_t>(first - head) * sizeof(float));
          for (int64_t done = first; done < len; done *= 2) {
            std::memcpy(r + done, r, static_cast<size_t>(std::min(done, len - done)) * sizeof(float));
          }
          a[k] = r;
        }
      }
      float* y = value(static_cast<int>(j));
      if (s.operands.size() == 1) {
        kernels::Unary(kind, ir::DType::kF32, a[0], y, len);
      } else if (repeat[0] > 0 || repeat[1] > 0) {
        kernels::BinaryRepeated(kind, a[0], repeat[0], a[1], repeat[1], y, len);
      } else {
        kernels::Binary(kind, ir::DType::kF32, a[0], a[1], y, len);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuExecutable::RunStep(const Step& step, const Buffers& buffers,
                                    const RunContext& context) const {
  if (!step.fused.empty()) return RunFused(step, buffers, context);
  const Instruction& inst = function().instructions()[step.instruction];
  void* out = ResolveMutable(step.result, buffers);
  const void* a = step.operands.empty() ? nullptr : Resolve(step.operands[0], buffers);
  const ir::Shape& a_shape =
      inst.operands.empty() ? inst.shape : function().instructions()[inst.operands[0]].shape;
  const int64_t n = inst.shape.num_elements();
  switch (inst.op) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMax:
    case OpKind::kMin:
    case OpKind::kPow:
      if (step.operand_row[0] > 0 || step.operand_row[1] > 0) {
        kernels::BinaryRepeated(inst.op, static_cast<const float*>(a), step.operand_row[0],
                                static_cast<const float*>(Resolve(step.operands[1], buffers)),
                                step.operand_row[1], static_cast<float*>(out), n);
        return absl::OkStatus();
      }
      kernels::Binary(inst.op, inst.shape.dtype, a, Resolve(step.operands[1], buffers), out,
                      n);
      return absl::OkStatus();
    case OpKind::kNeg:
    case OpKind::kExp:
    case OpKind::kAbs:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kAtan:
    case OpKind::kErf:
    case OpKind::kLogistic:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kSign:
    case OpKind::kFloor:
      kernels::Unary(inst.op, inst.shape.dtype, a, out, n);
      return absl::OkStatus();
    case OpKind::kCompare:
      kernels::Compare(inst.comparison, a_shape.dtype, a, Resolve(step.operands[1], buffers),
                       out, n);
      return absl::OkStatus();
    case OpKind::kSelect:
      kernels::Select(a, Resolve(step.operands[1], buffers),
                      Resolve(step.operands[2], buffers), out, n,
                      ir::ByteSize(inst.shape.dtype));
      return absl::OkStatus();
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
      kernels::Reduce(inst.op, a_shape, inst.dims, a, out);
      return absl::OkStatus();
    case OpKind::kIota:
      kernels::Iota(inst.shape, inst.dimension, out);
      return absl::OkStatus();
    case OpKind::kSlice:
      kernels::Slice(a_shape, inst.starts, inst.window_strides, inst.shape, a, out);
      return absl::OkStatus();
    case OpKind::kConcatenate: {
      std::vector<int64_t> offset(inst.shape.dims.size(), 0);
      for (size_t k = 0; k < step.operands.size(); ++k) {
        const ir::Shape& part = OperandShape(inst, k);
        kernels::CopyInto(part, Resolve(step.operands[k], buffers), inst.shape, offset, out);
        offset[inst.dimension] += part.dims[inst.dimension];
      }
      return absl::OkStatus();
    }
    case OpKind::kPad: {
      const int64_t eb = ir::ByteSize(inst.shape.dtype);
      kernels::Fill(Resolve(step.operands[1], buffers), eb, n, out);
      kernels::CopyInto(a_shape, a, inst.shape, inst.pad_low, out);
      return absl::OkStatus();
    }
    case OpKind::kGather: {
      const ir::Shape& idx = OperandShape(inst, 1);
      kernels::Gather(a_shape, inst.dimension,
                      static_cast<const int32_t*>(Resolve(step.operands[1], buffers)),
                      idx.num_elements(), a, out);
      return absl::OkStatus();
    }
    case OpKind::kScatterAdd: {
      const ir::Shape& idx = OperandShape(inst, 1);
      kernels::ScatterAdd(a_shape, inst.dimension,
                          static_cast<const int32_t*>(Resolve(step.operands[1], buffers)),
                          idx.num_elements(), a, Resolve(step.operands[2], buffers), out);
      return absl::OkStatus();
    }
    case OpKind::kDotGeneral:
      kernels::DotGeneral(inst, a_shape, OperandShape(inst, 1), a,
                          Resolve(step.operands[1], buffers), out);
      return absl::OkStatus();
    case OpKind::kRngUniform:
      kernels::RngUniform(*static_cast<const int32_t*>(a), n, static_cast<float*>(out));
      return absl::OkStatus();
    case OpKind::kRngNormal:
      kernels::RngNormal(*static_cast<const int32_t*>(a), n, static_cast<float*>(out));
      return absl::OkStatus();
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
      if (context.collectives == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            ir::OpName(inst.op), " needs RunContext::collectives, which is null"));
      }
      return RunCollective(step, inst, a_shape, a, out, *context.collectives);
    case OpKind::kBroadcast:
      kernels::BroadcastInDim(a_shape, inst.dims, inst.shape, a, out);
      return absl::OkStatus();
    case OpKind::kReshape:
      CopyBytes(out, a, inst.shape.byte_size());
      return absl::OkStatus();
    case OpKind::kTranspose:
      kernels::Transpose(a_shape, inst.dims, a, out);
      return absl::OkStatus();
    case OpKind::kReduceSum:
      kernels::ReduceSum(a_shape, inst.dims, a, out);
      return absl::OkStatus();
    case OpKind::kMatmul:
      kernels::Matmul(inst.shape.dtype, a_shape.dims[0], a_shape.dims[1],
                      inst.shape.dims[1], a, Resolve(step.operands[1], buffers), out);
      return absl::OkStatus();
    case OpKind::kConvert:
      kernels::Convert(a_shape.dtype, inst.shape.dtype, a, out, n);
      return absl::OkStatus();
    case OpKind::kDelay: {
      // The deadline is fixed before anything else so the copy counts
      // toward the delay rather than adding to it.
      // On a fiber (a device of a pool, causeway/base/fiber.h) only the
      // fiber sleeps.
      const fiber::Deadline deadline =
          std::chrono::steady_clock::now() + std::chrono::microseconds(inst.delay_us);
      CopyBytes(out, a, inst.shape.byte_size());
      fiber::SleepUntil(deadline);
      return absl::OkStatus();
    }
    case OpKind::kAllReduce:
      if (context.collectives == nullptr) {
        return absl::FailedPreconditionError(
            "all_reduce needs RunContext::collectives, which is null");
      }
      CopyBytes(out, a, inst.shape.byte_size());
      return context.collectives->AllReduce(step.collective_index, inst.axes,
                                            inst.reduce_kind, inst.shape, out);
    case OpKind::kGelu:
      kernels::Gelu(static_cast<const float*>(a), static_cast<float*>(out), n);
      return absl::OkStatus();
    case OpKind::kGeluGrad:
      kernels::GeluGrad(static_cast<const float*>(a),
                        static_cast<const float*>(Resolve(step.operands[1], buffers)),
                        static_cast<float*>(out), n);
      return absl::OkStatus();
    case OpKind::kSoftmax:
    case OpKind::kSoftmaxGrad:
    case OpKind::kNormalize:
    case OpKind::kNormalizeGrad: {
      const int64_t cols = inst.shape.dims.back();
      const int64_t rows = cols == 0 ? 0 : n / cols;
      const float* x = static_cast<const float*>(a);
      float* y = static_cast<float*>(out);
      const auto* b = step.operands.size() > 1
                          ? static_cast<const float*>(Resolve(step.operands[1], buffers))
                          : nullptr;
      if (inst.op == OpKind::kSoftmax) {
        kernels::Softmax(x, y, rows, cols);
      } else if (inst.op == OpKind::kSoftmaxGrad) {
        kernels::SoftmaxGrad(x, b, y, rows, cols);
      } else if (inst.op == OpKind::kNormalize) {
        kernels::Normalize(x, *b, y, rows, cols);
      } else {
        kernels::NormalizeGrad(x, *b,
                               static_cast<const float*>(Resolve(step.operands[2], buffers)),
                               y, rows, cols);
      }
      return absl::OkStatus();
    }
    case OpKind::kConvolution:
    case OpKind::kConvInputGrad:
    case OpKind::kConvKernelGrad: {
      const auto [x, w, y] = ir::ConvolutionRoles(inst, a_shape, OperandShape(inst, 1));
      kernels::Convolution(inst, x, w, y, static_cast<const float*>(a),
                           static_cast<const float*>(Resolve(step.operands[1], buffers)),
                           static_cast<float*>(out));
      return absl::OkStatus();
    }
    case OpKind::kPool:
      kernels::Pool(inst, a_shape, inst.shape, static_cast<const float*>(a),
                    static_cast<float*>(out));
      return absl::OkStatus();
    case OpKind::kArgSort:
      kernels::ArgSort(a_shape, inst.dimension, inst.comparison == ir::Comparison::kGt, a,
                       static_cast<int32_t*>(out));
      return absl::OkStatus();
    case OpKind::kWhile:
      return RunWhile(step, buffers, context);
    case OpKind::kConditional:
      return RunConditional(step, buffers, context);
    case OpKind::kGetResult: {
      const ControlFlow& from = control_flow_[inst.operands[0]];
      CopyBytes(out, static_cast<const std::byte*>(a) + from.offsets[inst.result_index],
                inst.shape.byte_size());
      return absl::OkStatus();
    }
    case OpKind::kParameter:
    case OpKind::kConstant:
      break;
  }
  return absl::InternalError("instruction has no kernel");
}

// The carry lives in two packed sets, the current one and the one the body
// writes; they swap after each iteration, so no iteration copies. One set is
// the instruction's own packed result, so the final carry is copied only
// when it ends up in the other.
absl::Status CpuExecutable::RunWhile(const Step& step, const Buffers& buffers,
                                     const RunContext& context) const {
  const ControlFlow& cf = control_flow_[step.instruction];
  const size_t n = cf.shapes.size();
  const int64_t total = cf.offsets.back();
  ArenaPtr spare(static_cast<std::byte*>(
      ::operator new[](static_cast<size_t>(total), kArenaAlignment, std::nothrow)));
  if (spare == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("while: cannot allocate ", total, " bytes of loop carry"));
  }
  auto* const packed = static_cast<std::byte*>(ResolveMutable(step.result, buffers));
  std::byte* cur = packed;
  std::byte* next = spare.get();
  for (size_t k = 0; k < n; ++k) {
    CopyBytes(cur + cf.offsets[k], Resolve(step.operands[k], buffers),
              cf.shapes[k].byte_size());
  }
  std::vector<const void*> in(n);
  std::vector<void*> out(n);
  uint8_t go = 0;  // a pred: any non-zero byte is true
  void* const go_out[] = {&go};
  for (int64_t iteration = 0;; ++iteration) {
    if (absl::Status s = context.Stopped(absl::StrCat("while: stopped at iteration ", iteration));
        !s.ok()) {
      return s;
    }
    for (size_t k = 0; k < n; ++k) in[k] = cur + cf.offsets[k];
    absl::Status s = cf.subs[0]->Run(in, go_out, context);
    if (!s.ok()) return Annotate(s, absl::StrCat("while, cond of iteration ", iteration));
    if (go == 0) break;
    for (size_t k = 0; k < n; ++k) out[k] = next + cf.offsets[k];
    s = cf.subs[1]->Run(in, out, context);
    if (!s.ok()) return Annotate(s, absl::StrCat("while, body of iteration ", iteration));
    std::swap(cur, next);
  }
  CopyBytes(packed, cur, total);  // nothing when the carry is already there
  return absl::OkStatus();
}

absl::Status CpuExecutable::RunConditional(const Step& step, const Buffers& buffers,
                                           const RunContext& context) const {
  const ControlFlow& cf = control_flow_[step.instruction];
  const Instruction& inst = function().instructions()[step.instruction];
  const void* selector = Resolve(step.operands[0], buffers);
  size_t branch = 0;
  if (OperandShape(inst, 0).dtype == ir::DType::kPred) {
    // Read as a byte: a pred from outside may hold any non-zero value.
    branch = *static_cast<const uint8_t*>(selector) != 0 ? 0 : 1;
  } else {
    const int32_t index = *static_cast<const int32_t*>(selector);
    const int32_t last = static_cast<int32_t>(cf.subs.size()) - 1;
    branch = static_cast<size_t>(std::clamp(index, 0, last));
  }
  std::vector<const void*> in;
  for (size_t k = 1; k < step.operands.size(); ++k) {
    in.push_back(Resolve(step.operands[k], buffers));
  }
  auto* packed = static_cast<std::byte*>(ResolveMutable(step.result, buffers));
  std::vector<void*> out;
  for (size_t k = 0; k < cf.shapes.size(); ++k) out.push_back(packed + cf.offsets[k]);
  absl::Status s = cf.subs[branch]->Run(in, out, context);
  if (!s.ok()) return Annotate(s, absl::StrCat("conditional, branch ", branch));
  return absl::OkStatus();
}

absl::Status RunCollective(const Step& step, const Instruction& inst,
                           const ir::Shape& in_shape, const void* in, void* out,
                           CollectiveOps& ops) {
  switch (inst.op) {
    case OpKind::kAllGather:
      return ops.AllGather(step.collective_index, inst.axes, in_shape, inst.shape,
                           inst.dimension, in, out);
    case OpKind::kReduceScatter:
      return ops.ReduceScatter(step.collective_index, inst.axes, inst.reduce_kind, in_shape,
                               inst.shape, inst.dimension, in, out);
    case OpKind::kAllToAll:
      return ops.AllToAll(step.collective_index, inst.axes, in_shape, inst.shape,
                          inst.dimension, inst.concat_dimension, in, out);
    case OpKind::kCollectivePermute:
      return ops.CollectivePermute(step.collective_index, inst.axes, inst.shape,
                                   inst.source_target_pairs, in, out);
    default:
      return absl::InternalError("not a collective");
  }
}

absl::Status CpuExecutable::Run(absl::Span<const void* const> inputs,
                                absl::Span<void* const> outputs,
                                const RunContext& context) const {
  const ir::Function& f = function();
  if (static_cast<int>(inputs.size()) != f.num_parameters()) {
    return absl::InvalidArgumentError(absl::StrCat("function ", f.name(), " takes ",
                                                   f.num_parameters(), " inputs, got ",
                                                   inputs.size()));
  }
  if (static_cast<int>(outputs.size()) != f.num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat("function ", f.name(), " has ",
                                                   f.num_outputs(), " results, got ",
                                                   outputs.size(), " output buffers"));
  }
  for (int i = 0; i < f.num_parameters(); ++i) {
    if (inputs[i] == nullptr && f.parameter_shape(i).byte_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", f.name(), ": input ", i, " is null"));
    }
  }
  for (int i = 0; i < f.num_outputs(); ++i) {
    if (outputs[i] == nullptr && f.output_shape(i).byte_size() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("function ", f.name(), ": output buffer ", i, " is null"));
    }
  }

  ArenaPtr arena;
  if (plan_.arena_bytes > 0) {
    arena = AcquireArena();
    if (arena == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "function ", f.name(), ": cannot allocate ", plan_.arena_bytes,
          " bytes of temporaries"));
    }
  }
  const Buffers buffers{inputs, outputs, arena.get()};

  const FlushDenormals flush_denormals;
  for (const Step& step : plan_.steps) {
    absl::Status status = RunStep(step, buffers, context);
    if (!status.ok()) {
      return Annotate(status, absl::StrCat("function ", f.name(), ", instruction ",
                                           step.instruction, " (",
                                           ir::OpName(f.instructions()[step.instruction].op),
                                           ")"));
    }
  }
  for (const FinalCopy& copy : plan_.final_copies) {
    CopyBytes(outputs[copy.output], Resolve(copy.source, buffers), copy.bytes);
  }
  ReleaseArena(std::move(arena));
  return absl::OkStatus();
}

}  // namespace

namespace {

// Compiles a verified function and, recursively, its sub-functions.
std::shared_ptr<const HostExecutable> CompileVerified(const ir::Function& function,
                                                  bool fuse_elementwise) {
  ExecutionPlan plan = PlanExecution(function, {.fuse_elementwise = fuse_elementwise});
  std::vector<ControlFlow> control_flow(function.instructions().size());
  for (size_t i = 0; i < function.instructions().size(); ++i) {
    const Instruction& inst = function.instructions()[i];
    if (!ir::IsMultiResult(inst.op)) continue;
    ControlFlow& cf = control_flow[i];
    for (const auto& sub : inst.subfunctions) cf.subs.push_back(CompileVerified(*sub, fuse_elementwise));
    cf.shapes = ir::ResultShapes(inst);
    cf.offsets = ir::ResultOffsets(cf.shapes);
    cf.is_while = inst.op == OpKind::kWhile;
  }
  return std::make_shared<CpuExecutable>(function, std::move(plan), std::move(control_flow));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const HostExecutable>> Compile(const ir::Function& function,
                                                              bool fuse_elementwise) {
  CW_RETURN_IF_ERROR(ir::Verify(function));
  kernels::InitBlas();
  return CompileVerified(function, fuse_elementwise);
}

absl::StatusOr<const HostExecutable*> AsHost(const Executable& executable) {
  const auto* host = dynamic_cast<const HostExecutable*>(&executable);
  if (host == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "function ", executable.function().name(),
        " was compiled for another kind of device, not the cpu kind"));
  }
  return host;
}

namespace {
class CpuKind final : public DeviceKind {
 public:
  absl::string_view name() const override { return kKindName; }
  absl::StatusOr<std::shared_ptr<const Executable>> Compile(
      const ir::Function& function) const override {
    CW_ASSIGN_OR_RETURN(std::shared_ptr<const HostExecutable> exe, cpu::Compile(function));
    return std::shared_ptr<const Executable>(std::move(exe));
  }
  absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceSpec& spec) const override {
    return cpu::CreateDevice(spec);
  }
};
}  // namespace

const DeviceKind& Kind() {
  static const DeviceKind& kind = RegisterDeviceKind(std::make_unique<CpuKind>());
  return kind;
}

}  // namespace causeway::backend::cpu
