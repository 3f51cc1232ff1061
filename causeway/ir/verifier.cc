#include "causeway/ir/verifier.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/shape_inference.h"

namespace causeway::ir {
namespace {

absl::Status Invalid(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

bool IsNumeric(DType dtype) { return dtype == DType::kF32 || dtype == DType::kI32; }

absl::Status RequireNumeric(const Shape& shape, absl::string_view what) {
  if (!IsNumeric(shape.dtype)) {
    return Invalid(absl::StrCat(what, " must be f32 or i32, got ", shape.ToString()));
  }
  return absl::OkStatus();
}

int ExpectedOperandCount(OpKind op) {
  switch (op) {
    case OpKind::kParameter:
    case OpKind::kConstant:
      return 0;
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
    case OpKind::kMax:
    case OpKind::kMatmul:
      return 2;
    case OpKind::kNeg:
    case OpKind::kExp:
    case OpKind::kBroadcast:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kReduceSum:
    case OpKind::kConvert:
    case OpKind::kDelay:
    case OpKind::kAllReduce:
      return 1;
  }
  return -1;
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

absl::StatusOr<Shape> InferReduceSum(const Instruction& inst, const Shape& operand) {
  CW_RETURN_IF_ERROR(RequireNumeric(operand, "operand"));
  std::vector<bool> reduced(operand.dims.size(), false);
  for (int64_t d : inst.dims) {
    if (d < 0 || d >= operand.rank()) {
      return Invalid(absl::StrCat("axis ", d, " out of range for ", operand.ToString()));
    }
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

absl::StatusOr<Shape> InferAllReduce(const Instruction& inst, const Shape& operand) {
  CW_RETURN_IF_ERROR(RequireNumeric(operand, "operand"));
  if (inst.axes.empty()) return Invalid("all-reduce needs at least one mesh axis");
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
  return operand;
}

}  // namespace

absl::StatusOr<Shape> InferShapeNoContext(const Instruction& inst,
                                          const std::vector<Shape>& operands) {
  const int expected = ExpectedOperandCount(inst.op);
  if (expected < 0) return Invalid(absl::StrCat("invalid op ", static_cast<int>(inst.op)));
  if (static_cast<int>(operands.size()) != expected) {
    return Invalid(absl::StrCat("expects ", expected, " operands, got ", operands.size()));
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
      if (operands[0] != operands[1]) {
        return Invalid(absl::StrCat("operand shapes differ: ", operands[0].ToString(),
                                    " and ", operands[1].ToString()));
      }
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operands"));
      return operands[0];
    case OpKind::kNeg:
      CW_RETURN_IF_ERROR(RequireNumeric(operands[0], "operand"));
      return operands[0];
    case OpKind::kExp:
      if (operands[0].dtype != DType::kF32) {
        return Invalid(absl::StrCat("operand must be f32, got ", operands[0].ToString()));
      }
      return operands[0];
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
      return InferReduceSum(inst, operands[0]);
    case OpKind::kMatmul:
      return InferMatmul(operands[0], operands[1]);
    case OpKind::kConvert: {
      Shape result(inst.shape.dtype, operands[0].dims);
      CW_RETURN_IF_ERROR(ValidateShape(result));
      return result;
    }
    case OpKind::kDelay:
      if (inst.delay_us < 0 || inst.delay_us > kMaxDelayMicros) {
        return Invalid(absl::StrCat("delay_us ", inst.delay_us, " outside [0, ",
                                    kMaxDelayMicros, "]"));
      }
      return operands[0];
    case OpKind::kAllReduce:
      return InferAllReduce(inst, operands[0]);
  }
  return Invalid(absl::StrCat("invalid op ", static_cast<int>(inst.op)));
}

absl::StatusOr<Shape> InferShape(const Instruction& inst,
                                 const std::vector<Shape>& operand_shapes) {
  absl::StatusOr<Shape> shape = InferShapeNoContext(inst, operand_shapes);
  if (!shape.ok()) return Annotate(shape.status(), OpName(inst.op));
  return shape;
}

absl::Status Verify(const Function& function) {
  const std::vector<Instruction>& insts = function.instructions();
  const std::vector<int>& params = function.parameters();
  const int n = static_cast<int>(insts.size());
  const std::string fn = absl::StrCat("function ", function.name());

  std::vector<Shape> operand_shapes;
  for (int i = 0; i < n; ++i) {
    const Instruction& inst = insts[i];
    auto error = [&](absl::string_view message) {
      return Invalid(absl::StrCat(fn, ", instruction ", i, " (", OpName(inst.op),
                                  "): ", message));
    };
    if (absl::Status s = ValidateShape(inst.shape); !s.ok()) {
      return error(absl::StrCat("declared shape: ", s.message()));
    }
    operand_shapes.clear();
    for (size_t j = 0; j < inst.operands.size(); ++j) {
      const int o = inst.operands[j];
      if (o < 0 || o >= i) {
        return error(absl::StrCat("operand ", j, " refers to instruction ", o,
                                  ", which is not an earlier instruction"));
      }
      operand_shapes.push_back(insts[o].shape);
    }
    absl::StatusOr<Shape> inferred = InferShapeNoContext(inst, operand_shapes);
    if (!inferred.ok()) return error(inferred.status().message());
    if (*inferred != inst.shape) {
      return error(absl::StrCat("declared shape ", inst.shape.ToString(),
                                " does not match inferred ", inferred->ToString()));
    }
    if (inst.op == OpKind::kParameter) {
      const int p = inst.parameter_index;
      if (p < 0 || p >= static_cast<int>(params.size()) || params[p] != i) {
        return error(absl::StrCat("parameter_index ", p,
                                  " is not this instruction's position in the "
                                  "function's parameter list"));
      }
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const int p = params[k];
    if (p < 0 || p >= n || insts[p].op != OpKind::kParameter ||
        insts[p].parameter_index != static_cast<int>(k)) {
      return Invalid(absl::StrCat(fn, ": parameter ", k, " names instruction ", p,
                                  ", which is not parameter ", k));
    }
  }
  if (function.outputs().empty()) return Invalid(absl::StrCat(fn, ": no outputs"));
  for (size_t k = 0; k < function.outputs().size(); ++k) {
    const int o = function.outputs()[k];
    if (o < 0 || o >= n) {
      return Invalid(absl::StrCat(fn, ": output ", k, " names instruction ", o,
                                  ", out of range [0, ", n, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace causeway::ir
