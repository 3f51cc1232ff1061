// Shape inference for every op. Operand shapes and attributes may come from
// untrusted input (deserialised functions): every index is range-checked
// before use and every size is bounded, so inference never crashes.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/convolution.h"
#include "causeway/ir/shape_inference.h"

namespace causeway::ir {
namespace {

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

bool IsNumeric(DType dtype) { return dtype == DType::kF32 || dtype == DType::kI32; }

// For a storage dtype, what to do instead; empty otherwise.
std::string StorageHint(DType dtype) {
  if (!IsStorageOnly(dtype)) return "";
  return absl::StrCat(" (", DTypeName(dtype), " is a storage dtype: convert it to ",
                      DTypeName(ComputeDType(dtype)), " to compute on it)");
}

absl::Status RequireNumeric(const Shape& shape, absl::string_view what) {
  if (!IsNumeric(shape.dtype)) {
    return Invalid(absl::StrCat(what, " must be f32 or i32, got ", shape.ToString(),
                                StorageHint(shape.dtype)));
  }
  return absl::OkStatus();
}

absl::Status RequireF32(const Shape& shape, absl::string_view what) {
  if (shape.dtype != DType::kF32) {
    return Invalid(absl::StrCat(what, " must be f32, got ", shape.ToString(),
                                StorageHint(shape.dtype)));
  }
  return absl::OkStatus();
}

// Operand count; -1 for an unknown op, -2 for "one or more".
int ExpectedOperandCount(OpKind op) {
  switch (op) {
    case OpKind::kParameter:
    case OpKind::kConstant:
    case OpKind::kIota:
      return 0;
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMax:
    case OpKind::kMin:
    case OpKind::kPow:
    case OpKind::kMatmul:
    case OpKind::kCompare:
    case OpKind::kPad:
    case OpKind::kGather:
    case OpKind::kDotGeneral:
      return 2;
    case OpKind::kSelect:
    case OpKind::kScatterAdd:
    case OpKind::kNormalizeGrad:
      return 3;
    case OpKind::kConvolution:
    case OpKind::kConvInputGrad:
    case OpKind::kConvKernelGrad:
      return 2;
    case OpKind::kGeluGrad:
    case OpKind::kSoftmaxGrad:
    case OpKind::kNormalize:
      return 2;
    case OpKind::kGelu:
    case OpKind::kSoftmax:
    case OpKind::kArgSort:
    case OpKind::kPool:
      return 1;
    case OpKind::kConcatenate:
    case OpKind::kWhile:
    case OpKind::kConditional:
      return -2;
    case OpKind::kGetResult:
      return 1;
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
    case OpKind::kBroadcast:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kConvert:
    case OpKind::kDelay:
    case OpKind::kSlice:
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
      return 1;
  }
  return -1;
}

absl::Status CheckDimension(int64_t d, const Shape& shape, absl::string_view what) {
  if (d < 0 || d >= shape.rank()) {
    return Invalid(absl::StrCat(what, " ", d, " out of range for ", shape.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> InferBroadcast(const Instruction& inst, const Shape& operand) {
  Shape result(operand.dtype, inst.shape.dims);
  CW_RETURN_IF_ERROR(ValidateShape(result));
  if (inst.dims.size() != operand.dims.size()) {
    return Invalid(absl::StrCat("operand ", operand.ToString(), " has rank ",
                                operand.rank(), " but ", inst.dims.size(),
                                " operand dims were given"));
  }
  for (size_t i = 0; i < inst.dims.size(); ++i) {
    const int64_t d = inst.dims[i];
    if (d < 0 || d >= result.rank()) {
      return Invalid(absl::StrCat("operand dim ", i, " maps to result dim ", d,
                                  ", out of range for ", result.ToString()));
    }
    if (i > 0 && d <= inst.dims[i - 1]) {
      return Invalid(absl::StrCat("operand dims {", absl::StrJoin(inst.dims, ","),
                                  "} are not strictly increasing"));
    }
    if (operand.dims[i] != 1 && operand.dims[i] != result.dims[d]) {
      return Invalid(absl::StrCat("operand dim ", i, " of ", operand.ToString(),
                                  " cannot broadcast to result dim ", d, " of ",
                                  result.ToString()));
    }
  }
  return result;
}

// The three convolution ops: x, w and y of the form (OpKind::kConvolution),
// two of them operands and one the result given; checks they and the
// window agree.
absl::StatusOr<Shape> InferConvolution(const Instruction& inst,
                                       const std::vector<Shape>& operands) {
  const ConvolutionShapes roles = ConvolutionRoles(inst, operands[0], operands[1]);
  const Shape* x = &roles.x;
  const Shape* w = &roles.w;
  const Shape* y = &roles.y;
  for (const Shape* s : {x, w, y}) {
    CW_RETURN_IF_ERROR(RequireF32(*s, "convolution values"));
    CW_RETURN_IF_ERROR(ValidateShape(*s));
  }
  const int rank = x->rank();
  if (rank < 3 || rank > 5 || w->rank() != rank || y->rank() != rank) {
    return Invalid(absl::StrCat("convolution of input ", x->ToString(), ", kernel ",
                                w->ToString(), " and output ", y->ToString(),
                                ": each must be [batch, channels, 1 to 3 spatial dims]"));
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  if (inst.window_strides.size() != spatial || inst.window_dilations.size() != spatial ||
      inst.pad_low.size() != spatial) {
    return Invalid(absl::StrCat("convolution over ", spatial,
                                " spatial dims needs that many strides, dilations and pads"));
  }
  for (size_t i = 0; i < spatial; ++i) {
    if (inst.window_strides[i] < 1 || inst.window_strides[i] > kMaxElements ||
        inst.window_dilations[i] < 1 || inst.window_dilations[i] > kMaxElements ||
        inst.pad_low[i] < -kMaxElements || inst.pad_low[i] > kMaxElements) {
      return Invalid(absl::StrCat("convolution window: strides and dilations must be in [1, ",
                                  kMaxElements, "], pads in [-", kMaxElements, ", ",
                                  kMaxElements, "]"));
    }
    if (x->dims[i + 2] < 1 || w->dims[i + 2] < 1 || y->dims[i + 2] < 1) {
      return Invalid("convolution: every spatial dim must be at least 1");
    }
  }
  const int64_t groups = inst.feature_groups;
  const int64_t c = x->dims[1], o = w->dims[0];
  if (groups < 1 || c % groups != 0 || o % groups != 0 || w->dims[1] * groups != c ||
      y->dims[1] != o || y->dims[0] != x->dims[0]) {
    return Invalid(absl::StrCat("convolution of input ", x->ToString(), ", kernel ",
                                w->ToString(), " and output ", y->ToString(), " in ", groups,
                                " groups: the channels do not agree"));
  }
  return inst.shape;
}

absl::StatusOr<Shape> InferPool(const Instruction& inst, const Shape& x) {
  CW_RETURN_IF_ERROR(RequireF32(x, "pooled value"));
  const int rank = x.rank();
  if (rank < 3 || rank > 5) {
    return Invalid(absl::StrCat("pooling of ", x.ToString(),
                                ": it must be [batch, channels, 1 to 3 spatial dims]"));
  }
  const size_t spatial = static_cast<size_t>(rank - 2);
  if (inst.dims.size() != spatial || inst.window_strides.size() != spatial ||
      inst.window_dilations.size() != spatial || inst.pad_low.size() != spatial ||
      inst.pad_high.size() != spatial) {
    return Invalid(absl::StrCat("pooling over ", spatial,
                                " spatial dims needs that many window sizes, strides, "
                                "dilations and low and high pads"));
  }
  if (inst.reduce_kind != ReduceKind::kMax && inst.reduce_kind != ReduceKind::kSum) {
    return Invalid("pooling reduces by max or sum");
  }
  std::vector<int64_t> dims = {x.dims[0], x.dims[1]};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t k = inst.dims[i], stride = inst.window_strides[i];
    const int64_t dil = inst.window_dilations[i], lo = inst.pad_low[i], hi = inst.pad_high[i];
    if (k < 1 || k > kMaxElements || stride < 1 || stride > kMaxElements || dil < 1 ||
        dil > kMaxElements || lo < 0 || lo > kMaxElements || hi < 0 || hi > kMaxElements) {
      return Invalid(absl::StrCat("pooling window: sizes, strides and dilations must be in [1, ",
                                  kMaxElements, "], pads in [0, ", kMaxElements, "]"));
    }
    const int64_t span = (k - 1) * dil + 1;
    const int64_t room = x.dims[i + 2] + lo + hi - span;
    if (room < 0) {
      return Invalid(absl::StrCat("pooling of ", x.ToString(), ": a window of ", span,
                                  " along spatial dim ", i, " is larger than the padded input"));
    }
    dims.push_back(room / stride + 1);
  }
  Shape result(DType::kF32, std::move(dims));
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

absl::StatusOr<Shape> InferTranspose(const Instruction& inst, const Shape& operand) {
  if (inst.dims.size() != operand.dims.size()) {
    return Invalid(absl::StrCat("permutation {", absl::StrJoin(inst.dims, ","),
                                "} does not match rank of ", operand.ToString()));
  }
  std::vector<bool> seen(inst.dims.size(), false);
  Shape result(operand.dtype, {});
  for (int64_t d : inst.dims) {
    if (d < 0 || d >= operand.rank() || seen[d]) {
      return Invalid(absl::StrCat("{", absl::StrJoin(inst.dims, ","),
                                  "} is not a permutation of rank ", operand.rank()));
    }
    seen[d] = true;
    result.dims.push_back(operand.dims[d]);
  }
  return result;
}

absl::StatusOr<Shape> InferReduce(const Instruction& inst, const Shape& operand) {
  CW_RETURN_IF_ERROR(RequireNumeric(operand, "operand"));
  std::vector<bool> reduced(operand.dims.size(), false);
  for (int64_t d : inst.dims) {
    CW_RETURN_IF_ERROR(CheckDimension(d, operand, "axis"));
    if (reduced[d]) return Invalid(absl::StrCat("axis ", d, " reduced twice"));
    reduced[d] = true;
  }
  Shape result(operand.dtype, {});
  for (size_t i = 0; i < operand.dims.size(); ++i) {
    if (!reduced[i]) result.dims.push_back(operand.dims[i]);
  }
  return result;
}

absl::StatusOr<Shape> InferMatmul(const Shape& a, const Shape& b) {
  if (a.rank() != 2 || b.rank() != 2) {
    return Invalid(absl::StrCat("operands must be rank 2, got ", a.ToString(), " and ",
                                b.ToString()));
  }
  if (a.dtype != b.dtype) {
    return Invalid(absl::StrCat("operand dtypes differ: ", a.ToString(), " and ",
                                b.ToString()));
  }
  CW_RETURN_IF_ERROR(RequireNumeric(a, "operands"));
  if (a.dims[1] != b.dims[0]) {
    return Invalid(absl::StrCat("contracting dims differ: ", a.ToString(), " x ",
                                b.ToString()));
  }
  Shape result(a.dtype, {a.dims[0], b.dims[1]});
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

absl::Status CheckAxes(const Instruction& inst) {
  if (inst.axes.empty()) return Invalid("a collective needs at least one mesh axis");
  for (size_t i = 0; i < inst.axes.size(); ++i) {
    if (inst.axes[i].empty()) return Invalid("empty mesh axis name");
    for (size_t j = 0; j < i; ++j) {
      if (inst.axes[i] == inst.axes[j]) {
        return Invalid(absl::StrCat("mesh axis \"", inst.axes[i], "\" listed twice"));
      }
    }
  }
  if (inst.reduce_kind != ReduceKind::kSum && inst.reduce_kind != ReduceKind::kMax) {
    return Invalid(absl::StrCat("invalid reduce kind ", static_cast<int>(inst.reduce_kind)));
  }
  return absl::OkStatus();
}

// The group size is only known at run time; a dimension scaled by it must
// stay within bounds for any group, so it is bounded here by kMaxElements.
absl::StatusOr<Shape> InferCollective(const Instruction& inst, const Shape& operand) {
  CW_RETURN_IF_ERROR(RequireNumeric(operand, "operand"));
  CW_RETURN_IF_ERROR(CheckAxes(inst));
  switch (inst.op) {
    case OpKind::kAllReduce:
      return operand;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter: {
      CW_RETURN_IF_ERROR(CheckDimension(inst.dimension, operand, "dimension"));
      // The result's dimension scales with the group (gather: times it;
      // scatter: divided by it), which the shape records per device: the
      // declared shape must agree, and be checked against the group at run
      // time.
      Shape result(operand.dtype, inst.shape.dims);
      CW_RETURN_IF_ERROR(ValidateShape(result));
      if (result.rank() != operand.rank()) {
        return Invalid(absl::StrCat("result ", result.ToString(), " and operand ",
                                    operand.ToString(), " differ in rank"));
      }
      for (int i = 0; i < operand.rank(); ++i) {
        const int64_t big = inst.op == OpKind::kAllGather ? result.dims[i] : operand.dims[i];
        const int64_t small = inst.op == OpKind::kAllGather ? operand.dims[i] : result.dims[i];
        if (i == inst.dimension) {
          if (small == 0 ? big != 0 : big % small != 0) {
            return Invalid(absl::StrCat("dimension ", i, ": ", big,
                                        " is not a multiple of ", small));
          }
        } else if (big != small) {
          return Invalid(absl::StrCat("result ", result.ToString(), " and operand ",
                                      operand.ToString(), " differ in dimension ", i));
        }
      }
      return result;
    }
    case OpKind::kAllToAll:
      CW_RETURN_IF_ERROR(CheckDimension(inst.dimension, operand, "split dimension"));
      CW_RETURN_IF_ERROR(CheckDimension(inst.concat_dimension, operand, "concat dimension"));
      // Split by the group size g and concatenated g times: the shape is
      // the same when split == concat; otherwise the declared shape holds.
      {
        Shape result(operand.dtype, inst.shape.dims);
        CW_RETURN_IF_ERROR(ValidateShape(result));
        if (result.rank() != operand.rank() ||
            result.num_elements() != operand.num_elements()) {
          return Invalid(absl::StrCat("result ", result.ToString(),
                                      " does not hold the operand's elements ",
                                      operand.ToString()));
        }
        for (int i = 0; i < operand.rank(); ++i) {
          if (i == inst.dimension || i == inst.concat_dimension) continue;
          if (result.dims[i] != operand.dims[i]) {
            return Invalid(absl::StrCat("dimension ", i, " differs"));
          }
        }
        if (inst.dimension == inst.concat_dimension &&
            result.dims[inst.dimension] != operand.dims[inst.dimension]) {
          return Invalid("split and concat dimension agree but sizes differ");
        }
        return result;
      }
    case OpKind::kCollectivePermute: {
      std::vector<int64_t> sources, targets;
      for (const auto& [s, t] : inst.source_target_pairs) {
        if (s < 0 || t < 0 || s > kMaxElements || t > kMaxElements) {
          return Invalid(absl::StrCat("pair ", s, "->", t, " has a negative or absurd rank"));
        }
        sources.push_back(s);
        targets.push_back(t);
      }
      std::sort(sources.begin(), sources.end());
      std::sort(targets.begin(), targets.end());
      if (std::adjacent_find(sources.begin(), sources.end()) != sources.end() ||
          std::adjacent_find(targets.begin(), targets.end()) != targets.end()) {
        return Invalid("a rank is a source or a target more than once");
      }
      return operand;
    }
    default:
      return Invalid("not a collective");
  }
}

absl::StatusOr<Shape> InferSlice(const Instruction& inst, const Shape& operand) {
  if (static_cast<int>(inst.starts.size()) != operand.rank() ||
      static_cast<int>(inst.limits.size()) != operand.rank()) {
    return Invalid(absl::StrCat("slice of ", operand.ToString(), " needs ", operand.rank(),
                                " starts and limits"));
  }
  const std::vector<int64_t>& steps = inst.window_strides;
  if (!steps.empty() && static_cast<int>(steps.size()) != operand.rank()) {
    return Invalid(absl::StrCat("slice of ", operand.ToString(), " needs ", operand.rank(),
                                " strides or none"));
  }
  Shape result(operand.dtype, {});
  for (int i = 0; i < operand.rank(); ++i) {
    if (inst.starts[i] < 0 || inst.starts[i] > inst.limits[i] ||
        inst.limits[i] > operand.dims[i]) {
      return Invalid(absl::StrCat("slice [", inst.starts[i], ", ", inst.limits[i],
                                  ") out of range for dimension ", i, " of ",
                                  operand.ToString()));
    }
    const int64_t step = steps.empty() ? 1 : steps[i];
    if (step < 1 || step > kMaxElements) {
      return Invalid(absl::StrCat("slice stride ", step, " for dimension ", i,
                                  " outside [1, ", kMaxElements, "]"));
    }
    result.dims.push_back((inst.limits[i] - inst.starts[i] + step - 1) / step);
  }
  return result;
}

absl::StatusOr<Shape> InferConcatenate(const Instruction& inst,
                                       const std::vector<Shape>& operands) {
  const Shape& first = operands[0];
  CW_RETURN_IF_ERROR(CheckDimension(inst.dimension, first, "dimension"));
  Shape result = first;
  result.dims[inst.dimension] = 0;
  for (const Shape& s : operands) {
    if (s.dtype != first.dtype || s.rank() != first.rank()) {
      return Invalid(absl::StrCat("operands ", first.ToString(), " and ", s.ToString(),
                                  " differ in dtype or rank"));
    }
    for (int i = 0; i < s.rank(); ++i) {
      if (i != inst.dimension && s.dims[i] != first.dims[i]) {
        return Invalid(absl::StrCat("operands ", first.ToString(), " and ", s.ToString(),
                                    " differ in dimension ", i));
      }
    }
    result.dims[inst.dimension] += s.dims[inst.dimension];
    if (result.dims[inst.dimension] > kMaxElements) return Invalid("result too large");
  }
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

absl::StatusOr<Shape> InferPad(const Instruction& inst, const Shape& operand,
                               const Shape& value) {
  if (value.rank() != 0 || value.dtype != operand.dtype) {
    return Invalid(absl::StrCat("pad value must be a scalar of the operand's dtype, got ",
                                value.ToString()));
  }
  if (static_cast<int>(inst.pad_low.size()) != operand.rank() ||
      static_cast<int>(inst.pad_high.size()) != operand.rank()) {
    return Invalid(absl::StrCat("pad of ", operand.ToString(), " needs ", operand.rank(),
                                " low and high paddings"));
  }
  Shape result(operand.dtype, {});
  for (int i = 0; i < operand.rank(); ++i) {
    const int64_t lo = inst.pad_low[i], hi = inst.pad_high[i];
    if (lo < 0 || hi < 0 || lo > kMaxElements || hi > kMaxElements) {
      return Invalid(absl::StrCat("padding ", lo, ", ", hi, " of dimension ", i,
                                  " is negative or absurd"));
    }
    result.dims.push_back(operand.dims[i] + lo + hi);
  }
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

// Result of gathering `indices` along `dimension` of `operand`.
absl::StatusOr<Shape> GatherShape(int64_t dimension, const Shape& operand,
                                  const Shape& indices) {
  CW_RETURN_IF_ERROR(CheckDimension(dimension, operand, "dimension"));
  if (indices.dtype != DType::kI32) {
    return Invalid(absl::StrCat("indices must be i32, got ", indices.ToString()));
  }
  Shape result(operand.dtype, {});
  for (int64_t i = 0; i < dimension; ++i) result.dims.push_back(operand.dims[i]);
  for (int64_t d : indices.dims) result.dims.push_back(d);
  for (int i = static_cast<int>(dimension) + 1; i < operand.rank(); ++i) {
    result.dims.push_back(operand.dims[i]);
  }
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

absl::StatusOr<Shape> InferDotGeneral(const Instruction& inst, const Shape& lhs,
                                      const Shape& rhs) {
  if (lhs.dtype != rhs.dtype) {
    return Invalid(absl::StrCat("operand dtypes differ: ", lhs.ToString(), " and ",
                                rhs.ToString()));
  }
  CW_RETURN_IF_ERROR(RequireNumeric(lhs, "operands"));
  if (inst.lhs_batch.size() != inst.rhs_batch.size() ||
      inst.lhs_contracting.size() != inst.rhs_contracting.size()) {
    return Invalid("lhs and rhs list different numbers of batch or contracting dims");
  }
  std::vector<bool> lhs_used(lhs.dims.size(), false), rhs_used(rhs.dims.size(), false);
  auto use = [](const std::vector<int64_t>& ds, const Shape& s, std::vector<bool>& used,
                absl::string_view side) -> absl::Status {
    for (int64_t d : ds) {
      CW_RETURN_IF_ERROR(CheckDimension(d, s, absl::StrCat(side, " dim")));
      if (used[d]) return Invalid(absl::StrCat(side, " dim ", d, " used twice"));
      used[d] = true;
    }
    return absl::OkStatus();
  };
  CW_RETURN_IF_ERROR(use(inst.lhs_batch, lhs, lhs_used, "lhs"));
  CW_RETURN_IF_ERROR(use(inst.lhs_contracting, lhs, lhs_used, "lhs"));
  CW_RETURN_IF_ERROR(use(inst.rhs_batch, rhs, rhs_used, "rhs"));
  CW_RETURN_IF_ERROR(use(inst.rhs_contracting, rhs, rhs_used, "rhs"));
  Shape result(lhs.dtype, {});
  for (size_t i = 0; i < inst.lhs_batch.size(); ++i) {
    if (lhs.dims[inst.lhs_batch[i]] != rhs.dims[inst.rhs_batch[i]]) {
      return Invalid(absl::StrCat("batch dims differ: ", lhs.ToString(), " and ",
                                  rhs.ToString()));
    }
    result.dims.push_back(lhs.dims[inst.lhs_batch[i]]);
  }
  for (size_t i = 0; i < inst.lhs_contracting.size(); ++i) {
    if (lhs.dims[inst.lhs_contracting[i]] != rhs.dims[inst.rhs_contracting[i]]) {
      return Invalid(absl::StrCat("contracting dims differ: ", lhs.ToString(), " and ",
                                  rhs.ToString()));
    }
  }
  for (int i = 0; i < lhs.rank(); ++i) {
    if (!lhs_used[i]) result.dims.push_back(lhs.dims[i]);
  }
  for (int i = 0; i < rhs.rank(); ++i) {
    if (!rhs_used[i]) result.dims.push_back(rhs.dims[i]);
  }
  CW_RETURN_IF_ERROR(ValidateShape(result));
  return result;
}

// The parameter and result shapes of a sub-function, with its indices
// range-checked (it may come from untrusted input and not be verified yet).
absl::Status Signature(const Function* f, absl::string_view what, std::vector<Shape>* params,
                       std::vector<Shape>* results) {
  if (f == nullptr) return Invalid(absl::StrCat(what, " is missing"));
  const auto& insts = f->instructions();
  const int n = static_cast<int>(insts.size());
  params->clear();
  results->clear();
  for (int p : f->parameters()) {
    if (p < 0 || p >= n) return Invalid(absl::StrCat(what, ": parameter out of range"));
    params->push_back(insts[p].shape);
  }
  for (int o : f->outputs()) {
    if (o < 0 || o >= n) return Invalid(absl::StrCat(what, ": output out of range"));
    results->push_back(insts[o].shape);
  }
  return absl::OkStatus();
}

std::string ShapeList(const std::vector<Shape>& shapes) {
  return absl::StrCat(
      "(", absl::StrJoin(shapes, ", ", [](std::string* out, const Shape& s) {
        out->append(s.ToString());
      }),
      ")");
}

// The packed value of several results, refused past kMaxPackedBytes.
absl::StatusOr<Shape> Packed(const std::vector<Shape>& results) {
  const Shape packed = PackedShape(results);
  if (packed.dims[0] > kMaxPackedBytes) {
    return Invalid(absl::StrCat("results of more than ", kMaxPackedBytes, " bytes in all"));
  }
  return packed;
}

// Most branches a conditional may have.
constexpr size_t kMaxBranches = 1024;

absl::StatusOr<Shape> InferWhile(const Instruction& inst, const std::vector<Shape>& carry) {
  if (inst.subfunctions.size() != 2) {
    return Invalid(absl::StrCat("needs two sub-functions (cond, body), got ",
                                inst.subfunctions.size()));
  }
  std::vector<Shape> params;
  std::vector<Shape> results;
  CW_RETURN_IF_ERROR(Signature(inst.subfunctions[0].get(), "cond", &params, &results));
  if (params != carry) {
    return Invalid(absl::StrCat("cond ", inst.subfunctions[0]->name(), " takes ",
                                ShapeList(params), ", the carry is ", ShapeList(carry)));
  }
  if (results != std::vector<Shape>{Shape(DType::kPred, {})}) {
    return Invalid(absl::StrCat("cond ", inst.subfunctions[0]->name(),
                                " must return one pred[], returns ", ShapeList(results)));
  }
  CW_RETURN_IF_ERROR(Signature(inst.subfunctions[1].get(), "body", &params, &results));
  if (params != carry || results != carry) {
    return Invalid(absl::StrCat("body ", inst.subfunctions[1]->name(), " maps ",
                                ShapeList(params), " to ", ShapeList(results),
                                "; both must be the carry ", ShapeList(carry)));
  }
  return Packed(carry);
}

absl::StatusOr<Shape> InferConditional(const Instruction& inst,
                                       const std::vector<Shape>& operands) {
  const Shape& selector = operands[0];
  const size_t n = inst.subfunctions.size();
  if (selector == Shape(DType::kPred, {})) {
    if (n != 2) {
      return Invalid(absl::StrCat("a pred[] selector needs two branches, got ", n));
    }
  } else if (selector == Shape(DType::kI32, {})) {
    if (n < 1 || n > kMaxBranches) {
      return Invalid(absl::StrCat("an i32[] selector needs 1 to ", kMaxBranches,
                                  " branches, got ", n));
    }
  } else {
    return Invalid(absl::StrCat("selector must be pred[] or i32[], got ", selector.ToString()));
  }
  const std::vector<Shape> args(operands.begin() + 1, operands.end());
  std::vector<Shape> first;
  std::vector<Shape> params;
  std::vector<Shape> results;
  for (size_t k = 0; k < n; ++k) {
    const std::string what = absl::StrCat("branch ", k);
    CW_RETURN_IF_ERROR(Signature(inst.subfunctions[k].get(), what, &params, &results));
    if (params != args) {
      return Invalid(absl::StrCat(what, " (", inst.subfunctions[k]->name(), ") takes ",
                                  ShapeList(params), ", the arguments are ", ShapeList(args)));
    }
    if (k == 0) {
      first = results;
    } else if (results != first) {
      return Invalid(absl::StrCat(what, " (", inst.subfunctions[k]->name(), ") returns ",
                                  ShapeList(results), ", branch 0 returns ", ShapeList(first)));
    }
  }
  return Packed(first);
}

}  // namespace

absl::StatusOr<Shape> GetResultShape(const Instruction& from, int64_t index) {
  if (!IsMultiResult(from.op)) {
    return Invalid(absl::StrCat("reads a ", OpName(from.op), ", which has one result"));
  }
  const std::vector<Shape> results = ResultShapes(from);
  if (index < 0 || index >= static_cast<int64_t>(results.size())) {
    return Invalid(
        absl::StrCat("result_index ", index, " out of range [0, ", results.size(), ")"));
  }
  return results[static_cast<size_t>(index)];
}

absl::StatusOr<Shape> InferShapeNoContext(const Instruction& inst,
                                          const std::vector<Shape>& operands) {
  const int expected = ExpectedOperandCount(inst.op);
  if (expected == -1) return Invalid(absl::StrCat("invalid op ", static_cast<int>(inst.op)));
  if (expected == -2 ? operands.empty() : static_cast<int>(operands.size()) != expected) {
    return Invalid(absl::StrCat("expects ", expected == -2 ? "at least one" : "",
                                expected == -2 ? "" : absl::StrCat(expected),
                                " operands, got ", operands.size()));
  }
  for (const Shape& s : operands) CW_RETURN_IF_ERROR(ValidateShape(s));

  switch (inst.op) {
    case OpKind::kParameter:
      CW_RETURN_IF_ERROR(ValidateShape(inst.shape));
      return inst.shape;
    case OpKind::kConstant: {
      const Shape& s = inst.literal.shape();
      CW_RETURN_IF_ERROR(ValidateShape(s));
      if (static_cast<int64_t>(inst.literal.byte_size()) != s.byte_size()) {
        return Invalid(absl::StrCat("literal of ", s.ToString(), " holds ",
                                    inst.literal.byte_size(), " bytes, expected ",
                                    s.byte_size()));
      }
      return s;
    }
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMax:
    case OpKind::kMin:
    case OpKind::kPow:
      if (operands[0] != operands[1]) {
        return Invalid(absl::StrCat("operand shapes differ: ", operands[0].ToString(),
                                    " and ", operands[1].ToString()));
      }
      if (inst.op == OpKind::kPow) CW_RETURN_IF_ERROR(RequireF32(operands[0], "operands"));
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operands"));
      return operands[0];
    case OpKind::kNeg:
    case OpKind::kAbs:
    case OpKind::kSign:
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operand"));
      return operands[0];
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kTanh:
    case OpKind::kSin:
    case OpKind::kCos:
    case OpKind::kAtan:
    case OpKind::kErf:
    case OpKind::kLogistic:
    case OpKind::kSqrt:
    case OpKind::kRsqrt:
    case OpKind::kFloor:
      CW_RETURN_IF_ERROR(RequireF32(operands[0], "operand"));
      return operands[0];
    case OpKind::kCompare:
      if (operands[0] != operands[1]) {
        return Invalid(absl::StrCat("operand shapes differ: ", operands[0].ToString(),
                                    " and ", operands[1].ToString()));
      }
      if (IsStorageOnly(operands[0].dtype)) {
        return Invalid(absl::StrCat("operands must be f32, i32 or pred, got ",
                                    operands[0].ToString(), StorageHint(operands[0].dtype)));
      }
      if (static_cast<int>(inst.comparison) < 0 ||
          static_cast<int>(inst.comparison) > static_cast<int>(Comparison::kGe)) {
        return Invalid(absl::StrCat("invalid comparison ", static_cast<int>(inst.comparison)));
      }
      return Shape(DType::kPred, operands[0].dims);
    case OpKind::kSelect:
      if (operands[0].dtype != DType::kPred || operands[0].dims != operands[1].dims ||
          operands[1] != operands[2]) {
        return Invalid(absl::StrCat("select needs pred and two values of its dims, got ",
                                    operands[0].ToString(), ", ", operands[1].ToString(),
                                    ", ", operands[2].ToString()));
      }
      return operands[1];
    case OpKind::kArgSort:
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operand"));
      CW_RETURN_IF_ERROR(CheckDimension(inst.dimension, operands[0], "dimension"));
      if (inst.comparison != Comparison::kLt && inst.comparison != Comparison::kGt) {
        return Invalid("argsort's comparison must be lt (ascending) or gt (descending)");
      }
      return Shape(DType::kI32, operands[0].dims);
    case OpKind::kIota: {
      CW_RETURN_IF_ERROR(ValidateShape(inst.shape));
      CW_RETURN_IF_ERROR(RequireNumeric(inst.shape, "iota"));
      CW_RETURN_IF_ERROR(CheckDimension(inst.dimension, inst.shape, "dimension"));
      return inst.shape;
    }
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
      if (operands[0] != Shape(DType::kI32, {})) {
        return Invalid(absl::StrCat("seed must be i32[], got ", operands[0].ToString()));
      }
      CW_RETURN_IF_ERROR(ValidateShape(inst.shape));
      CW_RETURN_IF_ERROR(RequireF32(inst.shape, "result"));
      return inst.shape;
    case OpKind::kBroadcast:
      return InferBroadcast(inst, operands[0]);
    case OpKind::kReshape: {
      Shape result(operands[0].dtype, inst.shape.dims);
      CW_RETURN_IF_ERROR(ValidateShape(result));
      if (result.num_elements() != operands[0].num_elements()) {
        return Invalid(absl::StrCat("cannot reshape ", operands[0].ToString(), " to ",
                                    result.ToString(), ": element counts differ"));
      }
      return result;
    }
    case OpKind::kTranspose:
      return InferTranspose(inst, operands[0]);
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
      return InferReduce(inst, operands[0]);
    case OpKind::kMatmul:
      return InferMatmul(operands[0], operands[1]);
    case OpKind::kDotGeneral:
      return InferDotGeneral(inst, operands[0], operands[1]);
    case OpKind::kConvert: {
      Shape result(inst.shape.dtype, operands[0].dims);
      CW_RETURN_IF_ERROR(ValidateShape(result));
      return result;
    }
    case OpKind::kSlice:
      return InferSlice(inst, operands[0]);
    case OpKind::kConcatenate:
      return InferConcatenate(inst, operands);
    case OpKind::kPad:
      return InferPad(inst, operands[0], operands[1]);
    case OpKind::kGather:
      return GatherShape(inst.dimension, operands[0], operands[1]);
    case OpKind::kScatterAdd: {
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operand"));
      CW_ASSIGN_OR_RETURN(Shape updates,
                          GatherShape(inst.dimension, operands[0], operands[1]));
      if (updates != operands[2]) {
        return Invalid(absl::StrCat("updates must be ", updates.ToString(), ", got ",
                                    operands[2].ToString()));
      }
      return operands[0];
    }
    case OpKind::kDelay:
      if (inst.delay_us < 0 || inst.delay_us > kMaxDelayMicros) {
        return Invalid(absl::StrCat("delay_us ", inst.delay_us, " outside [0, ",
                                    kMaxDelayMicros, "]"));
      }
      return operands[0];
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
    case OpKind::kCollectivePermute:
      return InferCollective(inst, operands[0]);
    case OpKind::kGelu:
      CW_RETURN_IF_ERROR(RequireF32(operands[0], "operand"));
      return operands[0];
    case OpKind::kSoftmax:
      CW_RETURN_IF_ERROR(RequireF32(operands[0], "operand"));
      if (operands[0].rank() < 1) return Invalid("softmax of a scalar");
      return operands[0];
    case OpKind::kGeluGrad:
    case OpKind::kSoftmaxGrad:
      CW_RETURN_IF_ERROR(RequireF32(operands[0], "operands"));
      if (operands[0] != operands[1]) {
        return Invalid(absl::StrCat("operand shapes differ: ", operands[0].ToString(),
                                    " and ", operands[1].ToString()));
      }
      if (inst.op == OpKind::kSoftmaxGrad && operands[0].rank() < 1) {
        return Invalid("softmax_grad of a scalar");
      }
      return operands[0];
    case OpKind::kConvolution:
    case OpKind::kConvInputGrad:
    case OpKind::kConvKernelGrad:
      return InferConvolution(inst, operands);
    case OpKind::kPool:
      return InferPool(inst, operands[0]);
    case OpKind::kWhile:
      return InferWhile(inst, operands);
    case OpKind::kConditional:
      return InferConditional(inst, operands);
    case OpKind::kGetResult:
      // The result's shape is the operand instruction's; Verify checks it
      // against that instruction, which operand shapes alone do not name.
      if (operands[0].dtype != DType::kPred || operands[0].rank() != 1) {
        return Invalid(absl::StrCat("operand must be a multi-result value, got ",
                                    operands[0].ToString()));
      }
      CW_RETURN_IF_ERROR(ValidateShape(inst.shape));
      return inst.shape;
    case OpKind::kNormalize:
    case OpKind::kNormalizeGrad:
      CW_RETURN_IF_ERROR(RequireF32(operands[0], "operand"));
      if (operands[0].rank() < 1) return Invalid("normalize of a scalar");
      if (operands[1] != Shape(DType::kF32, {})) {
        return Invalid(absl::StrCat("epsilon must be f32[], got ", operands[1].ToString()));
      }
      if (inst.op == OpKind::kNormalizeGrad && operands[2] != operands[0]) {
        return Invalid(absl::StrCat("gradient ", operands[2].ToString(), " does not match ",
                                    operands[0].ToString()));
      }
      return operands[0];
  }
  return Invalid(absl::StrCat("invalid op ", static_cast<int>(inst.op)));
}

}  // namespace causeway::ir
