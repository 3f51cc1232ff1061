#include "causeway/backend/dispatch/program.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/buffer_plan.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/convolution.h"
#include "causeway/ir/verifier.h"

namespace causeway::backend::dispatch {

using backend::BufferLocation;
using ir::DType;
using ir::Instruction;
using ir::OpKind;

namespace {

constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;
constexpr uint32_t kMaxGroups = 65535;  // grid-stride kernels loop past it
// Items one invocation of a reduction or scatter-add loops over at most:
// lavapipe ends an invocation's loops after 65535 iterations in all, and a
// bounded loop per invocation spreads the work over the GPU anyway.
constexpr int64_t kChunk = 2048;
constexpr int64_t kTempAlignment = 256;

int64_t AlignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

uint32_t Groups(int64_t n) {
  return static_cast<uint32_t>(
      std::clamp<int64_t>((n + kLocalSize - 1) / kLocalSize, 1, kMaxGroups));
}

// The op codes of kBinaryF32 / kBinaryI32 and kUnaryF32 / kUnaryI32.
uint32_t BinaryCode(OpKind op) {
  static const std::map<OpKind, uint32_t> code = {
      {OpKind::kAdd, 0}, {OpKind::kSub, 1}, {OpKind::kMul, 2}, {OpKind::kDiv, 3},
      {OpKind::kMax, 4}, {OpKind::kMin, 5}, {OpKind::kPow, 6}, {OpKind::kGeluGrad, 7}};
  return code.at(op);
}
uint32_t UnaryCode(OpKind op) {
  static const std::map<OpKind, uint32_t> code = {
      {OpKind::kNeg, 0},   {OpKind::kExp, 1},   {OpKind::kAbs, 2},    {OpKind::kLog, 3},
      {OpKind::kTanh, 4},  {OpKind::kLogistic, 5}, {OpKind::kSqrt, 6}, {OpKind::kRsqrt, 7},
      {OpKind::kSign, 8},  {OpKind::kFloor, 9}, {OpKind::kGelu, 10},  {OpKind::kSin, 12},
      {OpKind::kCos, 13},  {OpKind::kAtan, 14}, {OpKind::kErf, 15}};
  return code.at(op);
}

// Whether byte ranges [a, a + a_bytes) and [b, b + b_bytes) of two Refs
// share memory.
bool Overlap(const Ref& a, int64_t a_bytes, const Ref& b, int64_t b_bytes) {
  if (a.kind != b.kind || a.kind == Ref::Kind::kNone) return false;
  if ((a.kind == Ref::Kind::kInput || a.kind == Ref::Kind::kOutput) && a.index != b.index) {
    return false;
  }
  return a.offset < b.offset + static_cast<uint64_t>(b_bytes) &&
         b.offset < a.offset + static_cast<uint64_t>(a_bytes);
}

uint32_t DTypeCode(DType d) {
  switch (d) {
    case DType::kF32: return 0;
    case DType::kI32: return 1;
    case DType::kPred: return 2;
    case DType::kF16: return 3;
    case DType::kBF16: return 4;
    case DType::kI64: return 5;
    case DType::kI8: return 6;
    case DType::kU8: return 7;
  }
  return 0;
}

int64_t Product(absl::Span<const int64_t> v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i) p *= v[i];
  return p;
}

// Dims and strides with the size-1 dimensions dropped (they move nothing),
// which keeps every shape of the op set within kMaxRank in practice.
struct Strided {
  std::vector<int64_t> dims, src, dst, lo, src_dims;
};

Strided Squeeze(const Strided& s) {
  Strided r;
  for (size_t k = 0; k < s.dims.size(); ++k) {
    if (s.dims[k] == 1 && (s.lo.empty() || (s.lo[k] == 0 && s.src_dims[k] == 1))) continue;
    r.dims.push_back(s.dims[k]);
    r.src.push_back(s.src[k]);
    r.dst.push_back(s.dst[k]);
    if (!s.lo.empty()) {
      r.lo.push_back(s.lo[k]);
      r.src_dims.push_back(s.src_dims[k]);
    }
  }
  return r;
}

}  // namespace

// Lowers a function's plan into segments of dispatches.
class Lowering {
 public:
  Lowering(const ir::Function& f, Program& exe, const LowerOptions& options)
      : f_(f), exe_(exe), fuse_(options.fuse_elementwise), kind_(options.kind) {}

  absl::Status Run() {
    // The cpu kind's plan, its runs of element-wise ops fused (one
    // kFusedF32 dispatch each, LowerFused) unless !fuse_.
    const ExecutionPlan plan = PlanExecution(f_, {.fuse_elementwise = fuse_});
    if (static_cast<uint64_t>(f_.num_parameters()) + f_.num_outputs() + 2 >= kNoSlot) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", kind_, " kind cannot run ", f_.name(), ": ", f_.num_parameters(),
          " parameters and ", f_.num_outputs(), " results are more than a launch can name"));
    }
    temp_top_ = plan.arena_bytes;
    for (const Instruction& inst : f_.instructions()) {
      // Storage dtypes are held, and converted from and to; every other
      // op on them is the cpu kind's alone.
      const bool storage = ir::IsStorageOnly(inst.shape.dtype) ||
                           std::any_of(inst.operands.begin(), inst.operands.end(), [&](int o) {
                             return ir::IsStorageOnly(f_.instructions()[o].shape.dtype);
                           });
      if (storage && inst.op != OpKind::kParameter && inst.op != OpKind::kConstant &&
          inst.op != OpKind::kConvert) {
        return absl::UnimplementedError(absl::StrCat(
            "the ", kind_, " kind cannot run ", ir::OpName(inst.op), " of ",
            inst.shape.ToString(), ": it converts ", ir::DTypeName(inst.shape.dtype),
            " values from and to f32 or i32 but computes on f32, i32 and pred only"));
      }
      if (inst.shape.num_elements() > kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the ", kind_, " kind cannot run ", ir::OpName(inst.op), " of ",
            inst.shape.ToString(), ": arrays are limited to 2^31 - 1 elements"));
      }
    }
    exe_.segments_.emplace_back();
    for (const Step& step : plan.steps) CW_RETURN_IF_ERROR(Lower(step));
    for (const FinalCopy& copy : plan.final_copies) {
      CopyBytes(Resolve(copy.source), Ref{Ref::Kind::kOutput, copy.output, 0}, copy.bytes);
    }
    // A loop or conditional views the temporaries (RunControlFlow), even
    // where all it holds is empty.
    if (!exe_.control_.empty()) temp_top_ = std::max<int64_t>(temp_top_, 1);
    exe_.temp_bytes_ = AlignUp(temp_top_, kTempAlignment);
    return absl::OkStatus();
  }

 private:
  Ref Resolve(const BufferLocation& loc) {
    switch (loc.kind) {
      case BufferLocation::Kind::kInput:
        return Ref{Ref::Kind::kInput, static_cast<int>(loc.index), 0};
      case BufferLocation::Kind::kOutput:
        return Ref{Ref::Kind::kOutput, static_cast<int>(loc.index), 0};
      case BufferLocation::Kind::kArena:
        return Ref{Ref::Kind::kTemp, 0, static_cast<uint64_t>(loc.index)};
      case BufferLocation::Kind::kConstant:
        return Constant(static_cast<int>(loc.index));
    }
    return Ref{};
  }

  Ref Constant(int instruction) {
    auto it = constants_.find(instruction);
    if (it != constants_.end()) return it->second;
    const ir::Literal& lit = f_.instructions()[static_cast<size_t>(instruction)].literal;
    const Ref r = Append(lit.data(), static_cast<size_t>(lit.shape().byte_size()));
    constants_[instruction] = r;
    return r;
  }

  Ref Append(const void* data, size_t bytes) {
    std::vector<std::byte>& img = exe_.resident_;
    const size_t at = static_cast<size_t>(AlignUp(static_cast<int64_t>(img.size()), 64));
    img.resize(at + std::max<size_t>(bytes, 4));
    if (bytes > 0) std::memcpy(img.data() + at, data, bytes);
    return Ref{Ref::Kind::kResident, 0, at};
  }

  Ref Params(const std::vector<int32_t>& block) {
    return Append(block.data(), block.size() * sizeof(int32_t));
  }

  // Extra temporaries of this kind's own (operands it must lay out anew),
  // after the plan's arena; never reused.
  Ref Temp(int64_t bytes) {
    const int64_t at = AlignUp(temp_top_, kTempAlignment);
    temp_top_ = at + bytes;
    return Ref{Ref::Kind::kTemp, 0, static_cast<uint64_t>(at)};
  }

  void Add(Dispatch d) {
    if (d.n == 0 && d.kernel != Kernel::kMatmulF32) return;
    exe_.segments_.back().dispatches.push_back(d);
  }

  Dispatch Flat(Kernel k, int64_t n, uint32_t op, Ref a, Ref b, Ref out) {
    Dispatch d;
    d.kernel = k;
    d.n = static_cast<uint32_t>(n);
    d.op = op;
    d.a = a;
    d.b = b;
    d.out = out;
    d.groups[0] = Groups(n);
    return d;
  }

  void CopyBytes(Ref from, Ref to, int64_t bytes) {
    if (bytes <= 0) return;
    if (bytes % 4 == 0) {
      Add(Flat(Kernel::kUnaryI32, bytes / 4, 11, from, Ref{}, to));
      return;
    }
    // Rank 1: cannot fail.
    (void)StridedCopy(1, Strided{{bytes}, {1}, {1}, {}, {}}, 0, 0, from, Ref{}, to);
  }

  absl::Status StridedCopy(int64_t element_bytes, const Strided& s0, int64_t src_base,
                           int64_t dst_base, Ref src, Ref fill, Ref out) {
    const Strided s = Squeeze(s0);
    if (s.dims.size() > static_cast<size_t>(kMaxRank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", kind_, " kind moves arrays of at most ", kMaxRank, " dimensions (not 1), not ",
          s.dims.size()));
    }
    std::vector<int32_t> p(44, 0);
    p[0] = static_cast<int32_t>(s.dims.size());
    p[1] = static_cast<int32_t>(src_base);
    p[2] = static_cast<int32_t>(dst_base);
    p[3] = s.lo.empty() ? 0 : 1;
    for (size_t k = 0; k < s.dims.size(); ++k) {
      p[4 + k] = static_cast<int32_t>(s.dims[k]);
      p[12 + k] = static_cast<int32_t>(s.src[k]);
      p[20 + k] = static_cast<int32_t>(s.dst[k]);
      if (!s.lo.empty()) {
        p[28 + k] = static_cast<int32_t>(s.lo[k]);
        p[36 + k] = static_cast<int32_t>(s.src_dims[k]);
      }
    }
    const int64_t n = Product(s.dims);
    Dispatch d = Flat(element_bytes == 1 ? Kernel::kCopyB8 : Kernel::kCopyB32, n, 0, src, fill,
                      out);
    d.params = Params(p);
    Add(d);
    return absl::OkStatus();
  }

  const ir::Shape& OperandShape(const Instruction& inst, size_t k) const {
    return f_.instructions()[static_cast<size_t>(inst.operands[k])].shape;
  }

  absl::Status Unsupported(const Instruction& inst, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("the ", kind_, " kind cannot run ",
                                                   ir::OpName(inst.op), " of ",
                                                   inst.shape.ToString(), ": ", why));
  }

  // Element size of a copy kernel: 4 or 1 bytes.
  static int64_t Bytes(DType d) { return ir::ByteSize(d); }

  uint32_t Slot(const Ref& r) const {
    return TableSlot(r, static_cast<size_t>(f_.num_parameters()),
                     static_cast<size_t>(f_.num_outputs()));
  }

  // A fused step of the plan as one kFusedF32 dispatch, or as its unfused
  // steps when it exceeds the kernel's bounds or when a value it stores
  // shares memory with an input other than exactly (the planner reuses a
  // buffer read inside the run; each invocation reads an element before
  // writing it, which a repeated row or a shifted range would break).
  absl::Status LowerFused(const Step& step) {
    const auto unfused = [&]() -> absl::Status {
      for (const Step& u : step.unfused) CW_RETURN_IF_ERROR(Lower(u));
      return absl::OkStatus();
    };
    const int k = static_cast<int>(step.fused.size());
    const int64_t n = step.fused_elements;
    if (k > kMaxFusedOps) return unfused();
    struct Input {
      Ref ref;
      int64_t row = 0;
    };
    std::vector<Input> inputs;
    std::vector<std::pair<int, Ref>> stores;
    std::vector<int32_t> op_block;
    for (int t = 0; t < k; ++t) {
      const Step& u = step.unfused[static_cast<size_t>(t)];
      const Instruction& inst = f_.instructions()[static_cast<size_t>(u.instruction)];
      const bool unary = u.operands.size() == 1;
      int32_t src[2] = {0, 0};
      for (size_t o = 0; o < u.operands.size(); ++o) {
        const int from = step.fused[static_cast<size_t>(t)].from[o];
        if (from >= 0) {
          src[o] = from;
          continue;
        }
        const Ref r = Resolve(u.operands[o]);
        const int64_t row = u.operand_row[o];
        size_t j = 0;
        while (j < inputs.size() &&
               !(inputs[j].ref.kind == r.kind && inputs[j].ref.index == r.index &&
                 inputs[j].ref.offset == r.offset && inputs[j].row == row)) {
          ++j;
        }
        if (j == inputs.size()) inputs.push_back({r, row});
        src[o] = k + static_cast<int32_t>(j);
      }
      op_block.insert(op_block.end(),
                      {unary ? 0 : 1,
                       static_cast<int32_t>(unary ? UnaryCode(inst.op) : BinaryCode(inst.op)),
                       src[0], src[1]});
      if (step.fused[static_cast<size_t>(t)].store) stores.push_back({t, Resolve(u.result)});
    }
    if (inputs.size() > static_cast<size_t>(kMaxFusedInputs) ||
        stores.size() > static_cast<size_t>(kMaxFusedStores)) {
      return unfused();
    }
    const int64_t bytes = n * 4;
    for (size_t s = 0; s < stores.size(); ++s) {
      for (const Input& in : inputs) {
        const int64_t in_bytes = (in.row == 0 ? n : in.row) * 4;
        const bool exact = in.row == 0 && in.ref.kind == stores[s].second.kind &&
                           in.ref.index == stores[s].second.index &&
                           in.ref.offset == stores[s].second.offset;
        if (!exact && Overlap(stores[s].second, bytes, in.ref, in_bytes)) return unfused();
      }
      for (size_t q = 0; q < s; ++q) {
        if (Overlap(stores[s].second, bytes, stores[q].second, bytes)) return unfused();
      }
    }
    const auto lo = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); };
    const auto hi = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v >> 32)); };
    std::vector<int32_t> block = {k, static_cast<int32_t>(inputs.size()),
                                  static_cast<int32_t>(stores.size())};
    for (const Input& in : inputs) {
      block.insert(block.end(), {static_cast<int32_t>(Slot(in.ref)), lo(in.ref.offset),
                                 hi(in.ref.offset), static_cast<int32_t>(in.row)});
    }
    block.insert(block.end(), op_block.begin(), op_block.end());
    for (const auto& [t, ref] : stores) {
      block.insert(block.end(),
                   {t, static_cast<int32_t>(Slot(ref)), lo(ref.offset), hi(ref.offset)});
    }
    Dispatch d = Flat(Kernel::kFusedF32, n, 0, Ref{}, Ref{}, Ref{});
    d.params = Params(block);
    Add(d);
    return absl::OkStatus();
  }

  absl::Status Lower(const Step& step) {
    if (!step.fused.empty()) return LowerFused(step);
    const Instruction& inst = f_.instructions()[static_cast<size_t>(step.instruction)];
    const Ref out = Resolve(step.result);
    std::vector<Ref> ops;
    for (const BufferLocation& loc : step.operands) ops.push_back(Resolve(loc));
    const Ref a = ops.empty() ? Ref{} : ops[0];
    const Ref b = ops.size() > 1 ? ops[1] : Ref{};
    const Ref c = ops.size() > 2 ? ops[2] : Ref{};
    const ir::Shape& a_shape = inst.operands.empty() ? inst.shape : OperandShape(inst, 0);
    const int64_t n = inst.shape.num_elements();
    const DType dt = inst.shape.dtype;
    switch (inst.op) {
      case OpKind::kAdd:
      case OpKind::kSub:
      case OpKind::kMul:
      case OpKind::kDiv:
      case OpKind::kMax:
      case OpKind::kMin:
      case OpKind::kPow:
      case OpKind::kGeluGrad: {
        if (dt == DType::kF32) {
          Dispatch d = Flat(Kernel::kBinaryF32, n, BinaryCode(inst.op), a, b, out);
          d.x = static_cast<uint32_t>(step.operand_row[0]);
          d.y = static_cast<uint32_t>(step.operand_row[1]);
          Add(d);
        } else if (dt == DType::kI32 && inst.op != OpKind::kPow && inst.op != OpKind::kGeluGrad) {
          Add(Flat(Kernel::kBinaryI32, n, BinaryCode(inst.op), a, b, out));
        } else {
          return Unsupported(inst, "no kernel for this dtype");
        }
        return absl::OkStatus();
      }
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
      case OpKind::kGelu: {
        const uint32_t op = UnaryCode(inst.op);
        if (dt == DType::kF32) {
          Add(Flat(Kernel::kUnaryF32, n, op, a, Ref{}, out));
        } else if (dt == DType::kI32 && (op == 0 || op == 2 || op == 8)) {
          Add(Flat(Kernel::kUnaryI32, n, op, a, Ref{}, out));
        } else {
          return Unsupported(inst, "no kernel for this dtype");
        }
        return absl::OkStatus();
      }
      case OpKind::kCompare: {
        const Kernel k = a_shape.dtype == DType::kF32   ? Kernel::kCompareF32
                         : a_shape.dtype == DType::kI32 ? Kernel::kCompareI32
                                                        : Kernel::kCompareU8;
        Add(Flat(k, n, static_cast<uint32_t>(inst.comparison), a, b, out));
        return absl::OkStatus();
      }
      case OpKind::kSelect: {
        Dispatch d = Flat(Bytes(dt) == 1 ? Kernel::kSelectB8 : Kernel::kSelectB32, n, 0, a, b,
                          out);
        d.c = c;
        Add(d);
        return absl::OkStatus();
      }
      case OpKind::kConvert: {
        Dispatch d = Flat(Kernel::kConvert, n, 0, a, Ref{}, out);
        d.x = DTypeCode(a_shape.dtype);
        d.y = DTypeCode(dt);
        Add(d);
        return absl::OkStatus();
      }
      case OpKind::kIota: {
        if (dt == DType::kPred) return Unsupported(inst, "iota of pred");
        Dispatch d = Flat(Kernel::kIota, n, dt == DType::kF32 ? 0 : 1, Ref{}, Ref{}, out);
        d.x = static_cast<uint32_t>(
            Product(inst.shape.dims, static_cast<size_t>(inst.dimension) + 1));
        d.y = static_cast<uint32_t>(inst.shape.dims[static_cast<size_t>(inst.dimension)]);
        Add(d);
        return absl::OkStatus();
      }
      case OpKind::kReshape:
        CopyBytes(a, out, inst.shape.byte_size());
        return absl::OkStatus();
      case OpKind::kBroadcast: {
        Strided s;
        s.dims = inst.shape.dims;
        s.dst = ir::RowMajorStrides(inst.shape.dims);
        s.src.assign(s.dims.size(), 0);
        const std::vector<int64_t> os = ir::RowMajorStrides(a_shape.dims);
        for (size_t i = 0; i < inst.dims.size(); ++i) {
          if (a_shape.dims[i] != 1) s.src[static_cast<size_t>(inst.dims[i])] = os[i];
        }
        return StridedCopy(Bytes(dt), s, 0, 0, a, Ref{}, out);
      }
      case OpKind::kTranspose: {
        Strided s;
        s.dims = inst.shape.dims;
        s.dst = ir::RowMajorStrides(inst.shape.dims);
        const std::vector<int64_t> os = ir::RowMajorStrides(a_shape.dims);
        for (size_t i = 0; i < inst.dims.size(); ++i) {
          s.src.push_back(os[static_cast<size_t>(inst.dims[i])]);
        }
        return StridedCopy(Bytes(dt), s, 0, 0, a, Ref{}, out);
      }
      case OpKind::kSlice: {
        Strided s;
        s.dims = inst.shape.dims;
        s.dst = ir::RowMajorStrides(inst.shape.dims);
        s.src = ir::RowMajorStrides(a_shape.dims);
        int64_t base = 0;
        for (size_t k = 0; k < s.src.size(); ++k) {
          base += inst.starts[k] * s.src[k];
          if (!inst.window_strides.empty()) s.src[k] *= inst.window_strides[k];
        }
        return StridedCopy(Bytes(dt), s, base, 0, a, Ref{}, out);
      }
      case OpKind::kConcatenate: {
        const std::vector<int64_t> ds = ir::RowMajorStrides(inst.shape.dims);
        int64_t at = 0;
        for (size_t k = 0; k < ops.size(); ++k) {
          const ir::Shape& part = OperandShape(inst, k);
          Strided s;
          s.dims = part.dims;
          s.src = ir::RowMajorStrides(part.dims);
          s.dst = ds;
          CW_RETURN_IF_ERROR(StridedCopy(Bytes(dt), s, 0,
                                         at * ds[static_cast<size_t>(inst.dimension)], ops[k],
                                         Ref{}, out));
          at += part.dims[static_cast<size_t>(inst.dimension)];
        }
        return absl::OkStatus();
      }
      case OpKind::kPad: {
        Strided s;
        s.dims = inst.shape.dims;
        s.dst = ir::RowMajorStrides(inst.shape.dims);
        s.src = ir::RowMajorStrides(a_shape.dims);
        s.lo = inst.pad_low;
        s.src_dims = a_shape.dims;
        return StridedCopy(Bytes(dt), s, 0, 0, a, b, out);
      }
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kReduceMin: {
        if (dt == DType::kPred) return Unsupported(inst, "reductions of pred");
        const std::vector<int64_t> os = ir::RowMajorStrides(a_shape.dims);
        std::vector<bool> reduced(a_shape.dims.size(), false);
        for (int64_t d : inst.dims) reduced[static_cast<size_t>(d)] = true;
        std::vector<int64_t> kd, ks, rd, rs;
        for (size_t k = 0; k < a_shape.dims.size(); ++k) {
          if (a_shape.dims[k] == 1) continue;
          (reduced[k] ? rd : kd).push_back(a_shape.dims[k]);
          (reduced[k] ? rs : ks).push_back(os[k]);
        }
        if (kd.size() > static_cast<size_t>(kMaxRank) ||
            rd.size() > static_cast<size_t>(kMaxRank)) {
          return Unsupported(inst, "more than 8 dimensions");
        }
        const uint32_t op = inst.op == OpKind::kReduceSum ? 0 : inst.op == OpKind::kReduceMax ? 1 : 2;
        const Kernel kernel = dt == DType::kF32 ? Kernel::kReduceF32 : Kernel::kReduceI32;
        std::vector<int32_t> p(36, 0);
        p[0] = static_cast<int32_t>(kd.size());
        p[1] = static_cast<int32_t>(rd.size());
        p[2] = static_cast<int32_t>(Product(rd));
        for (size_t k = 0; k < kd.size(); ++k) {
          p[4 + k] = static_cast<int32_t>(kd[k]);
          p[12 + k] = static_cast<int32_t>(ks[k]);
        }
        for (size_t k = 0; k < rd.size(); ++k) {
          p[20 + k] = static_cast<int32_t>(rd[k]);
          p[28 + k] = static_cast<int32_t>(rs[k]);
        }
        Reduce(kernel, op, n, Product(rd), p, a, out, Bytes(dt));
        return absl::OkStatus();
      }
      case OpKind::kMatmul: {
        const int64_t m = a_shape.dims[0], k = a_shape.dims[1], nn = inst.shape.dims[1];
        return Matmul(inst, a, b, out, 1, m, nn, k, {0, k, 1}, {0, nn, 1});
      }
      case OpKind::kDotGeneral:
        return DotGeneral(inst, a, b, out);
      case OpKind::kConvolution:
      case OpKind::kConvInputGrad:
      case OpKind::kConvKernelGrad:
        return Convolution(inst, a, b, out);
      case OpKind::kPool:
        return Pool(inst, a, out);
      case OpKind::kArgSort: {
        const size_t dim = static_cast<size_t>(inst.dimension);
        const int64_t length = a_shape.dims[dim];
        // lavapipe ends an invocation past kMaxLoopIterations in all.
        const int64_t passes = (n + int64_t{kMaxGroups} * kLocalSize - 1) /
                               (int64_t{kMaxGroups} * kLocalSize);
        if (length * passes + 64 > kMaxLoopIterations) {
          return Unsupported(inst, absl::StrCat("lines longer than ", kMaxLoopIterations - 64,
                                                " elements"));
        }
        Dispatch d = Flat(Kernel::kArgSort, n, 0, a, Ref{}, out);
        d.op = (inst.comparison == ir::Comparison::kGt ? 1u : 0u) |
               (a_shape.dtype == DType::kI32 ? 2u : 0u);
        d.x = static_cast<uint32_t>(length);
        d.y = static_cast<uint32_t>(Product(a_shape.dims, dim + 1));
        Add(d);
        return absl::OkStatus();
      }
      case OpKind::kGather:
      case OpKind::kScatterAdd: {
        const size_t dim = static_cast<size_t>(inst.dimension);
        const int64_t outer = Product(a_shape.dims, 0, dim);
        const int64_t size = a_shape.dims[dim];
        const int64_t inner = Product(a_shape.dims, dim + 1);
        const int64_t j = OperandShape(inst, 1).num_elements();
        std::vector<int32_t> p = {static_cast<int32_t>(outer), static_cast<int32_t>(size),
                                  static_cast<int32_t>(inner), static_cast<int32_t>(j)};
        Kernel k;
        if (inst.op == OpKind::kGather) {
          k = Bytes(dt) == 1 ? Kernel::kGatherB8 : Kernel::kGatherB32;
        } else if (dt == DType::kF32 || dt == DType::kI32) {
          k = dt == DType::kF32 ? Kernel::kScatterAddF32 : Kernel::kScatterAddI32;
        } else {
          return Unsupported(inst, "scatter_add of pred");
        }
        if (inst.op == OpKind::kGather) {
          Dispatch d = Flat(k, n, 0, a, b, out);
          d.params = Params(p);
          Add(d);
          return absl::OkStatus();
        }
        // Scatter-add: each invocation sums at most kChunk indices; with
        // more, partial sums per chunk ([chunks, n]) are reduced, then
        // added to the operand.
        const int64_t chunks = std::max<int64_t>(1, (j + kChunk - 1) / kChunk);
        const Ref params = Params(p);
        Dispatch d = Flat(k, n * chunks, 0, chunks == 1 ? a : Ref{}, b, out);
        d.c = c;
        d.params = params;
        d.x = static_cast<uint32_t>(n);
        d.y = static_cast<uint32_t>(std::min(j, kChunk));
        if (chunks == 1) {
          Add(d);
          return absl::OkStatus();
        }
        if (n * chunks > kMaxElements) return Unsupported(inst, "too many partial sums");
        const int64_t eb = Bytes(dt);
        d.out = Temp(n * chunks * eb);
        Add(d);
        const Ref sums = Temp(n * eb);
        Reduce(dt == DType::kF32 ? Kernel::kReduceF32 : Kernel::kReduceI32, 0, n, chunks,
               PartialsParams(n, chunks), d.out, sums, eb);
        Add(Flat(dt == DType::kF32 ? Kernel::kBinaryF32 : Kernel::kBinaryI32, n, 0, a, sums,
                 out));
        return absl::OkStatus();
      }
      case OpKind::kRngUniform:
      case OpKind::kRngNormal:
        Add(Flat(Kernel::kRng, n, inst.op == OpKind::kRngUniform ? 0 : 1, a, Ref{}, out));
        return absl::OkStatus();
      case OpKind::kSoftmax:
      case OpKind::kSoftmaxGrad:
      case OpKind::kNormalize:
      case OpKind::kNormalizeGrad: {
        const int64_t cols = inst.shape.dims.back();
        const int64_t rows = cols == 0 ? 0 : n / cols;
        const uint32_t op = inst.op == OpKind::kSoftmax       ? 0
                            : inst.op == OpKind::kSoftmaxGrad ? 1
                            : inst.op == OpKind::kNormalize   ? 2
                                                              : 3;
        Dispatch d = Flat(Kernel::kRowsF32, rows, op, a, b, out);
        d.c = c;
        d.x = static_cast<uint32_t>(cols);
        d.groups[0] = static_cast<uint32_t>(std::clamp<int64_t>(rows, 1, kMaxGroups));
        Add(d);
        return absl::OkStatus();
      }
      case OpKind::kDelay:
      case OpKind::kAllReduce:
      case OpKind::kAllGather:
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
      case OpKind::kCollectivePermute: {
        Segment& seg = exe_.segments_.back();
        seg.has_host_step = true;
        seg.host.instruction = step.instruction;
        seg.host.collective_index = step.collective_index;
        seg.host.in = a;
        seg.host.out = out;
        seg.host.in_bytes = a_shape.byte_size();
        seg.host.out_bytes = inst.shape.byte_size();
        exe_.segments_.emplace_back();
        return absl::OkStatus();
      }
      case OpKind::kWhile:
      case OpKind::kConditional: {
        ControlFlow cf;
        cf.is_while = inst.op == OpKind::kWhile;
        for (const auto& sub : inst.subfunctions) {
          // Verified with the function that holds it.
          absl::StatusOr<std::shared_ptr<const Program>> compiled =
              Program::CompileVerified(*sub, {kind_, fuse_});
          if (!compiled.ok()) {
            return Annotate(compiled.status(), absl::StrCat("in ", ir::OpName(inst.op),
                                                            " sub-function ", sub->name()));
          }
          cf.subs.push_back(*std::move(compiled));
        }
        cf.operands = ops;
        for (size_t k = 0; k < inst.operands.size(); ++k) {
          cf.operand_bytes.push_back(OperandShape(inst, k).byte_size());
        }
        cf.shapes = ir::ResultShapes(inst);
        cf.offsets = ir::ResultOffsets(cf.shapes);
        cf.out = out;
        if (cf.is_while) {
          cf.spare = Temp(cf.offsets.back());
          cf.go = Temp(1);
        }
        for (const auto& sub : cf.subs) {
          cf.sub_temp_bytes = std::max(cf.sub_temp_bytes, sub->temporary_bytes());
        }
        if (cf.sub_temp_bytes > 0) cf.sub_temp = Temp(cf.sub_temp_bytes);
        Segment& seg = exe_.segments_.back();
        seg.has_host_step = true;
        seg.host.instruction = step.instruction;
        seg.host.control = static_cast<int>(exe_.control_.size());
        exe_.control_.push_back(std::move(cf));
        exe_.segments_.emplace_back();
        return absl::OkStatus();
      }
      case OpKind::kGetResult: {
        // A packed value lies in the temporaries (never a parameter or a
        // result): its k-th result is a copy from its offset.
        const Instruction& multi = f_.instructions()[static_cast<size_t>(inst.operands[0])];
        const std::vector<int64_t> offsets = ir::ResultOffsets(ir::ResultShapes(multi));
        Ref from = a;
        from.offset += static_cast<uint64_t>(offsets[static_cast<size_t>(inst.result_index)]);
        CopyBytes(from, out, inst.shape.byte_size());
        return absl::OkStatus();
      }
      case OpKind::kParameter:
      case OpKind::kConstant:
        return absl::OkStatus();
    }
    return Unsupported(inst, "unknown op");
  }

  // A reduction of `count` items into each of `n` results (parameter block
  // `p` as kernels.h says). Past kChunk items an invocation reduces one
  // chunk; the [chunks, n] partials are reduced again, until one chunk is
  // left.
  void Reduce(Kernel kernel, uint32_t op, int64_t n, int64_t count, std::vector<int32_t> p,
              Ref in, Ref out, int64_t element_bytes) {
    while (true) {
      const int64_t chunks = std::max<int64_t>(1, (count + kChunk - 1) / kChunk);
      Dispatch d = Flat(kernel, n * chunks, op, in, Ref{}, out);
      d.params = Params(p);
      d.x = static_cast<uint32_t>(n);
      d.y = static_cast<uint32_t>(std::min(count, kChunk));
      if (chunks == 1) {
        Add(d);
        return;
      }
      d.out = Temp(n * chunks * element_bytes);
      Add(d);
      // Next pass: the partials, [chunks, n], reduced over chunks.
      in = d.out;
      count = chunks;
      p = PartialsParams(n, chunks);
    }
  }

  // The reduction's parameter block (kernels.h) for partial results laid
  // out [chunks, n], reduced over chunks into n results.
  static std::vector<int32_t> PartialsParams(int64_t n, int64_t chunks) {
    std::vector<int32_t> p(36, 0);
    p[0] = 1;                               // kept rank
    p[1] = 1;                               // reduced rank
    p[2] = static_cast<int32_t>(chunks);    // reduced count
    p[4] = static_cast<int32_t>(n);         // kept dims
    p[12] = 1;                              // kept strides
    p[20] = static_cast<int32_t>(chunks);   // reduced dims
    p[28] = static_cast<int32_t>(n);        // reduced strides
    return p;
  }

  absl::Status Matmul(const Instruction& inst, Ref a, Ref b, Ref out, int64_t batch, int64_t m,
                      int64_t n, int64_t k, std::array<int64_t, 3> as,
                      std::array<int64_t, 3> bs) {
    const DType dt = inst.shape.dtype;
    if (dt != DType::kF32 && dt != DType::kI32) return Unsupported(inst, "no kernel for pred");
    std::vector<int32_t> p = {static_cast<int32_t>(m),     static_cast<int32_t>(n),
                              static_cast<int32_t>(k),     static_cast<int32_t>(batch),
                              static_cast<int32_t>(as[0]), static_cast<int32_t>(as[1]),
                              static_cast<int32_t>(as[2]), static_cast<int32_t>(bs[0]),
                              static_cast<int32_t>(bs[1]), static_cast<int32_t>(bs[2])};
    const int64_t total = batch * m * n;
    if (total == 0) return absl::OkStatus();
    Dispatch d;
    d.a = a;
    d.b = b;
    d.out = out;
    d.params = Params(p);
    if (dt == DType::kF32) {
      if (batch > 65535 || (m + kMatmulTile - 1) / kMatmulTile > 65535 ||
          (n + kMatmulTile - 1) / kMatmulTile > 65535) {
        return Unsupported(inst, "a matrix product this large");
      }
      d.kernel = Kernel::kMatmulF32;
      d.n = static_cast<uint32_t>(total);
      d.x = static_cast<uint32_t>(k);  // ChooseVariant's K
      d.groups[0] = static_cast<uint32_t>((n + kMatmulTile - 1) / kMatmulTile);
      d.groups[1] = static_cast<uint32_t>((m + kMatmulTile - 1) / kMatmulTile);
      d.groups[2] = static_cast<uint32_t>(batch);
    } else {
      d.kernel = Kernel::kMatmulI32;
      d.n = static_cast<uint32_t>(total);
      d.groups[0] = Groups(total);
    }
    Add(d);
    return absl::OkStatus();
  }

  // Strides of `group` (dims of an operand, in order) flattened into one
  // dimension, or -1 when they cannot be (not laid out one after another).
  static int64_t GroupStride(const std::vector<int64_t>& dims, const std::vector<int64_t>& group) {
    const std::vector<int64_t> st = ir::RowMajorStrides(dims);
    std::vector<int64_t> g;
    for (int64_t d : group) {
      if (dims[static_cast<size_t>(d)] != 1) g.push_back(d);
    }
    if (g.empty()) return 0;
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      const size_t x = static_cast<size_t>(g[i]), y = static_cast<size_t>(g[i + 1]);
      if (st[x] != st[y] * dims[y]) return -1;
    }
    return st[static_cast<size_t>(g.back())];
  }

  // An operand laid out anew as [groups...] (row-major, in group order).
  Ref Permute(const Instruction& inst, const ir::Shape& shape, Ref in,
              const std::vector<int64_t>& order) {
    Strided s;
    const std::vector<int64_t> st = ir::RowMajorStrides(shape.dims);
    for (int64_t d : order) {
      s.dims.push_back(shape.dims[static_cast<size_t>(d)]);
      s.src.push_back(st[static_cast<size_t>(d)]);
    }
    s.dst = ir::RowMajorStrides(s.dims);
    const Ref t = Temp(shape.byte_size());
    absl::Status st2 = StridedCopy(Bytes(shape.dtype), s, 0, 0, in, Ref{}, t);
    (void)inst;
    (void)st2;  // rank was checked by the caller
    return t;
  }

  // `r` moved on by `floats` 4-byte elements.
  static Ref At(Ref r, int64_t floats) {
    r.offset += static_cast<uint64_t>(floats * 4);
    return r;
  }

  // A scratch region of at least `bytes`, shared by every convolution of
  // the function (each dispatch is fenced from the next, so one's use ends
  // before the next begins).
  Ref ConvScratch(int64_t bytes) {
    if (bytes > conv_scratch_bytes_) {
      conv_scratch_ = Temp(bytes);
      conv_scratch_bytes_ = bytes;
    }
    return conv_scratch_;
  }

  // conv_f32's parameter block: [1] C, then S, K, P, strides, dilations and
  // low pads, three each, unit dims in front. `window`: K's spatial dims.
  static std::vector<int32_t> WindowParams(const Instruction& inst, const ir::Shape& x,
                                           const int64_t* window, const ir::Shape& y) {
    std::vector<int32_t> p(20, 0);
    const size_t spatial = x.dims.size() - 2, skip = 3 - spatial;
    for (size_t i = 0; i < 3; ++i) {
      p[2 + i] = p[5 + i] = p[8 + i] = p[11 + i] = p[14 + i] = 1;
    }
    for (size_t i = 0; i < spatial; ++i) {
      p[2 + skip + i] = static_cast<int32_t>(x.dims[i + 2]);
      p[5 + skip + i] = static_cast<int32_t>(window[i]);
      p[8 + skip + i] = static_cast<int32_t>(y.dims[i + 2]);
      p[11 + skip + i] = static_cast<int32_t>(inst.window_strides[i]);
      p[14 + skip + i] = static_cast<int32_t>(inst.window_dilations[i]);
      p[17 + skip + i] = static_cast<int32_t>(inst.pad_low[i]);
    }
    p[1] = static_cast<int32_t>(x.dims[1]);
    return p;
  }

  // Pooling (ir::OpKind::kPool) by conv_f32's ops 2 (sum) and 3 (max), one
  // invocation per output.
  absl::Status Pool(const Instruction& inst, Ref x, Ref out) {
    const int64_t n = inst.shape.num_elements();
    const int64_t taps = Product(inst.dims);
    // lavapipe ends an invocation past kMaxLoopIterations in all.
    const int64_t passes =
        (n + int64_t{kMaxGroups} * kLocalSize - 1) / (int64_t{kMaxGroups} * kLocalSize);
    if (passes * (taps + 1) + 64 > kMaxLoopIterations) {
      return Unsupported(inst, "windows that large over that many outputs");
    }
    Dispatch d = Flat(Kernel::kConvF32, n, inst.reduce_kind == ir::ReduceKind::kMax ? 3 : 2, x,
                      Ref{}, out);
    d.params = Params(WindowParams(inst, OperandShape(inst, 0), inst.dims.data(), inst.shape));
    Add(d);
    return absl::OkStatus();
  }

  // The convolution form (ir::OpKind::kConvolution): im2col (kConvF32) and
  // kMatmulF32 per batch element (one product over the batch where there is
  // one group), col2im for the input gradient, and a sum over the batch
  // for the kernel gradient. A 1x1 window of stride 1 and no padding reads
  // the input as its col matrix.
  absl::Status Convolution(const Instruction& inst, Ref first, Ref second, Ref out) {
    const bool conv = inst.op == OpKind::kConvolution;
    const bool input = inst.op == OpKind::kConvInputGrad;
    const auto [x, w, y] = ir::ConvolutionRoles(inst, OperandShape(inst, 0), OperandShape(inst, 1));
    const std::vector<int32_t> p = WindowParams(inst, x, w.dims.data() + 2, y);
    const size_t spatial = x.dims.size() - 2;
    bool direct = true;
    for (size_t i = 0; i < spatial; ++i) {
      direct = direct && w.dims[i + 2] == 1 && inst.window_strides[i] == 1 &&
               inst.pad_low[i] == 0 && y.dims[i + 2] == x.dims[i + 2];
    }
    const int64_t n = x.dims[0], c = x.dims[1], o = w.dims[0], groups = inst.feature_groups;
    const int64_t taps = Product(w.dims, 2), outs = Product(y.dims, 2);
    const int64_t plane = Product(x.dims, 2);
    const int64_t rows = c / groups * taps, og = o / groups;
    const int64_t col_elements = n * c * taps * outs;
    const int64_t partials = inst.op == OpKind::kConvKernelGrad && n > 1 ? n * o * rows : 0;
    if (col_elements > kMaxElements || partials > kMaxElements) {
      return Unsupported(inst, "its im2col matrix would pass 2^31 - 1 elements");
    }
    if (n * groups > 65535) return Unsupported(inst, "more than 65535 batch elements x groups");
    const Ref params = Params(p);
    const Ref scratch = ConvScratch((direct ? 0 : col_elements * 4) + partials * 4);
    const Ref x_ref = conv || !input ? first : out;
    // col [N, G, rows, P]: the input itself, or its im2col.
    Ref col = direct ? x_ref : scratch;
    if (!direct && !input) {
      Dispatch d = Flat(Kernel::kConvF32, col_elements, 0, x_ref, Ref{}, col);
      d.params = params;
      Add(d);
    }
    // Products over the batch elements (one over all where G is 1), each
    // batched over the groups.
    const int64_t loops = groups == 1 ? 1 : n;
    const int64_t batch = groups == 1 ? n : groups;
    const int64_t w_stride = groups == 1 ? 0 : og * rows;
    if (conv) {  // y [G, og, P] = w_g [og, rows] x col_g [rows, P]
      for (int64_t e = 0; e < loops; ++e) {
        CW_RETURN_IF_ERROR(Matmul(inst, second, At(col, e * c * taps * outs),
                                  At(out, e * o * outs), batch, og, outs, rows,
                                  {w_stride, rows, 1}, {rows * outs, outs, 1}));
      }
      return absl::OkStatus();
    }
    if (input) {  // col_g [rows, P] = w_g^T [rows, og] x y_g [og, P], then col2im
      const Ref into = direct ? out : col;
      for (int64_t e = 0; e < loops; ++e) {
        CW_RETURN_IF_ERROR(Matmul(inst, second, At(first, e * o * outs),
                                  At(into, e * c * taps * outs), batch, rows, outs, og,
                                  {w_stride, 1, rows}, {og * outs, outs, 1}));
      }
      if (!direct) {
        Dispatch d = Flat(Kernel::kConvF32, n * c * plane, 1, col, Ref{}, out);
        d.params = params;
        Add(d);
      }
      return absl::OkStatus();
    }
    // w partials [N, G, og, rows] = y_g [og, P] x col_g^T [P, rows], summed
    // over N.
    const Ref into = partials > 0 ? At(scratch, direct ? 0 : col_elements) : out;
    CW_RETURN_IF_ERROR(Matmul(inst, second, col, into, n * groups, og, rows, outs,
                              {og * outs, outs, 1}, {rows * outs, 1, outs}));
    if (partials > 0) {
      std::vector<int32_t> rp(36, 0);
      rp[0] = 1;
      rp[1] = 1;
      rp[2] = static_cast<int32_t>(n);
      rp[4] = static_cast<int32_t>(o * rows);
      rp[12] = 1;
      rp[20] = static_cast<int32_t>(n);
      rp[28] = static_cast<int32_t>(o * rows);
      Reduce(Kernel::kReduceF32, 0, o * rows, n, rp, into, out, 4);
    }
    return absl::OkStatus();
  }

  absl::Status DotGeneral(const Instruction& inst, Ref a, Ref b, Ref out) {
    const ir::Shape& ls = OperandShape(inst, 0);
    const ir::Shape& rs = OperandShape(inst, 1);
    if (ls.dims.size() > static_cast<size_t>(kMaxRank) ||
        rs.dims.size() > static_cast<size_t>(kMaxRank)) {
      return Unsupported(inst, "more than 8 dimensions");
    }
    auto free_dims = [](const ir::Shape& s, const std::vector<int64_t>& batch,
                        const std::vector<int64_t>& contracting) {
      std::vector<int64_t> f;
      for (int64_t d = 0; d < static_cast<int64_t>(s.dims.size()); ++d) {
        if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
            std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
          f.push_back(d);
        }
      }
      return f;
    };
    const std::vector<int64_t> lf = free_dims(ls, inst.lhs_batch, inst.lhs_contracting);
    const std::vector<int64_t> rf = free_dims(rs, inst.rhs_batch, inst.rhs_contracting);
    auto size = [](const ir::Shape& s, const std::vector<int64_t>& g) {
      int64_t p = 1;
      for (int64_t d : g) p *= s.dims[static_cast<size_t>(d)];
      return p;
    };
    const int64_t batch = size(ls, inst.lhs_batch);
    const int64_t m = size(ls, lf), k = size(ls, inst.lhs_contracting), n = size(rs, rf);
    std::array<int64_t, 3> as{GroupStride(ls.dims, inst.lhs_batch), GroupStride(ls.dims, lf),
                              GroupStride(ls.dims, inst.lhs_contracting)};
    if (as[0] < 0 || as[1] < 0 || as[2] < 0) {
      std::vector<int64_t> order = inst.lhs_batch;
      order.insert(order.end(), lf.begin(), lf.end());
      order.insert(order.end(), inst.lhs_contracting.begin(), inst.lhs_contracting.end());
      a = Permute(inst, ls, a, order);
      as = {m * k, k, 1};
    }
    std::array<int64_t, 3> bs{GroupStride(rs.dims, inst.rhs_batch),
                              GroupStride(rs.dims, inst.rhs_contracting), GroupStride(rs.dims, rf)};
    if (bs[0] < 0 || bs[1] < 0 || bs[2] < 0) {
      std::vector<int64_t> order = inst.rhs_batch;
      order.insert(order.end(), inst.rhs_contracting.begin(), inst.rhs_contracting.end());
      order.insert(order.end(), rf.begin(), rf.end());
      b = Permute(inst, rs, b, order);
      bs = {k * n, n, 1};
    }
    if (k == 0) {
      // An empty contraction is zeros: 0 * anything summed over nothing.
      const int32_t zero = 0;
      Dispatch d = Flat(Kernel::kCopyB32, inst.shape.num_elements(), 0, Ref{}, Ref{}, out);
      std::vector<int32_t> p(44, 0);
      p[0] = 1;
      p[3] = 1;               // pad mode: every element is outside the source
      p[4] = static_cast<int32_t>(inst.shape.num_elements());
      p[20] = 1;
      p[28] = 0;
      p[36] = 0;
      d.params = Params(p);
      d.a = Append(&zero, 4);
      d.b = d.a;
      Add(d);
      return absl::OkStatus();
    }
    return Matmul(inst, a, b, out, batch, m, n, k, as, bs);
  }

  const ir::Function& f_;
  Program& exe_;
  const bool fuse_;
  const std::string kind_;
  int64_t temp_top_ = 0;
  Ref conv_scratch_;
  int64_t conv_scratch_bytes_ = 0;
  std::map<int, Ref> constants_;
};

absl::StatusOr<std::shared_ptr<const Program>> Program::Compile(const ir::Function& function,
                                                                const LowerOptions& options) {
  CW_RETURN_IF_ERROR(ir::Verify(function));
  return CompileVerified(function, options);
}

absl::StatusOr<std::shared_ptr<const Program>> Program::CompileVerified(
    const ir::Function& function, const LowerOptions& options) {
  auto exe = std::shared_ptr<Program>(new Program(function, options.kind));
  Lowering lowering(exe->function(), *exe, options);
  CW_RETURN_IF_ERROR(lowering.Run());
  if (exe->resident_.empty()) exe->resident_.resize(4);
  return std::shared_ptr<const Program>(std::move(exe));
}

Program::Program(ir::Function function, std::string kind)
    : Executable(std::move(function)), id_([] {
        static std::atomic<uint64_t> next{1};
        return next.fetch_add(1, std::memory_order_relaxed);
      }()), kind_(std::move(kind)) {}

Program::~Program() = default;

absl::StatusOr<void*> Program::Resident(
    const void* where,
    absl::FunctionRef<absl::StatusOr<std::shared_ptr<void>>(const std::vector<std::byte>&)> upload)
    const {
  MutexLock lock(&mu_);
  auto it = uploaded_.find(where);
  if (it != uploaded_.end()) return it->second.get();
  CW_ASSIGN_OR_RETURN(std::shared_ptr<void> copy, upload(resident_));
  void* p = copy.get();
  uploaded_[where] = std::move(copy);
  return p;
}

absl::Status RunCollectiveOnHost(const Program& program, const HostStep& h, CollectiveOps& c,
                                 absl::FunctionRef<absl::Status(void*)> read,
                                 absl::FunctionRef<absl::Status(const void*)> write) {
  const auto& instructions = program.function().instructions();
  const Instruction& inst = instructions[static_cast<size_t>(h.instruction)];
  std::vector<std::byte> in(static_cast<size_t>(h.in_bytes));
  CW_RETURN_IF_ERROR(read(in.data()));
  const ir::Shape& in_shape = instructions[static_cast<size_t>(inst.operands[0])].shape;
  if (inst.op == OpKind::kAllReduce) {
    CW_RETURN_IF_ERROR(c.AllReduce(h.collective_index, inst.axes, inst.reduce_kind, inst.shape,
                                   in.data()));
    return write(in.data());
  }
  std::vector<std::byte> out(static_cast<size_t>(h.out_bytes));
  switch (inst.op) {
    case OpKind::kAllGather:
      CW_RETURN_IF_ERROR(c.AllGather(h.collective_index, inst.axes, in_shape, inst.shape,
                                     inst.dimension, in.data(), out.data()));
      break;
    case OpKind::kReduceScatter:
      CW_RETURN_IF_ERROR(c.ReduceScatter(h.collective_index, inst.axes, inst.reduce_kind,
                                         in_shape, inst.shape, inst.dimension, in.data(),
                                         out.data()));
      break;
    case OpKind::kAllToAll:
      CW_RETURN_IF_ERROR(c.AllToAll(h.collective_index, inst.axes, in_shape, inst.shape,
                                    inst.dimension, inst.concat_dimension, in.data(),
                                    out.data()));
      break;
    case OpKind::kCollectivePermute:
      CW_RETURN_IF_ERROR(c.CollectivePermute(h.collective_index, inst.axes, inst.shape,
                                             inst.source_target_pairs, in.data(), out.data()));
      break;
    default:
      return absl::InternalError(absl::StrCat("not a host step: ", ir::OpName(inst.op)));
  }
  return write(out.data());
}

}  // namespace causeway::backend::dispatch
