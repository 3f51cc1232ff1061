#include "causeway/ir/builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/ir/shape_inference.h"
#include "causeway/ir/verifier.h"

namespace causeway::ir {

Value FunctionBuilder::Parameter(const Shape& shape) {
  if (!status_.ok()) return Value{};
  Instruction inst;
  inst.op = OpKind::kParameter;
  inst.shape = shape;
  inst.parameter_index = static_cast<int>(parameters_.size());
  Value v = Add(std::move(inst));
  if (v.id >= 0) parameters_.push_back(v.id);
  return v;
}

Value FunctionBuilder::Constant(Literal literal) {
  if (!status_.ok()) return Value{};
  Instruction inst;
  inst.op = OpKind::kConstant;
  inst.literal = std::move(literal);
  return Add(std::move(inst));
}

Value FunctionBuilder::Add(Value a, Value b) { return Elementwise(OpKind::kAdd, {a, b}); }
Value FunctionBuilder::Sub(Value a, Value b) { return Elementwise(OpKind::kSub, {a, b}); }
Value FunctionBuilder::Mul(Value a, Value b) { return Elementwise(OpKind::kMul, {a, b}); }
Value FunctionBuilder::Div(Value a, Value b) { return Elementwise(OpKind::kDiv, {a, b}); }
Value FunctionBuilder::Max(Value a, Value b) { return Elementwise(OpKind::kMax, {a, b}); }
Value FunctionBuilder::Neg(Value a) { return Elementwise(OpKind::kNeg, {a}); }
Value FunctionBuilder::Exp(Value a) { return Elementwise(OpKind::kExp, {a}); }
Value FunctionBuilder::Matmul(Value a, Value b) {
  return Elementwise(OpKind::kMatmul, {a, b});
}

Value FunctionBuilder::Broadcast(Value a, std::vector<int64_t> result_dims,
                                 std::vector<int64_t> operand_dims) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kBroadcast;
  inst.operands = {a.id};
  inst.shape = Shape(instructions_[a.id].shape.dtype, std::move(result_dims));
  inst.dims = std::move(operand_dims);
  return Add(std::move(inst));
}

Value FunctionBuilder::Reshape(Value a, std::vector<int64_t> dims) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kReshape;
  inst.operands = {a.id};
  inst.shape = Shape(instructions_[a.id].shape.dtype, std::move(dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::Transpose(Value a, std::vector<int64_t> perm) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kTranspose;
  inst.operands = {a.id};
  inst.dims = std::move(perm);
  return Add(std::move(inst));
}

Value FunctionBuilder::ReduceSum(Value a, std::vector<int64_t> axes) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kReduceSum;
  inst.operands = {a.id};
  inst.dims = std::move(axes);
  return Add(std::move(inst));
}

Value FunctionBuilder::Convert(Value a, DType dtype) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kConvert;
  inst.operands = {a.id};
  inst.shape = Shape(dtype, {});
  return Add(std::move(inst));
}

Value FunctionBuilder::Delay(Value a, int64_t micros) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kDelay;
  inst.operands = {a.id};
  inst.delay_us = micros;
  return Add(std::move(inst));
}

Value FunctionBuilder::AllReduce(Value a, std::vector<std::string> axes,
                                 ReduceKind kind) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kAllReduce;
  inst.operands = {a.id};
  inst.axes = std::move(axes);
  inst.reduce_kind = kind;
  return Add(std::move(inst));
}

const Shape& FunctionBuilder::shape(Value v) const {
  static const Shape* const kInvalid = new Shape();
  if (v.id < 0 || v.id >= static_cast<int>(instructions_.size())) return *kInvalid;
  return instructions_[v.id].shape;
}

absl::StatusOr<Function> FunctionBuilder::Build(std::vector<Value> outputs) {
  std::vector<int> ids;
  ids.reserve(outputs.size());
  if (!status_.ok()) return status_;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int id = outputs[k].id;
    if (id < 0 || id >= static_cast<int>(instructions_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("function ", name_, ": output ", k,
                                                     " is an invalid Value (id ", id,
                                                     ")"));
    }
    ids.push_back(id);
  }
  Function function(name_, instructions_, parameters_, std::move(ids));
  CW_RETURN_IF_ERROR(Verify(function));
  return function;
}

Value FunctionBuilder::Add(Instruction inst) {
  if (!status_.ok()) return Value{};
  const int id = static_cast<int>(instructions_.size());
  std::vector<Shape> operand_shapes;
  operand_shapes.reserve(inst.operands.size());
  for (int o : inst.operands) operand_shapes.push_back(instructions_[o].shape);
  absl::StatusOr<Shape> shape = InferShapeNoContext(inst, operand_shapes);
  if (!shape.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("function ", name_,
                                                      ", instruction ", id, " (",
                                                      OpName(inst.op), "): ",
                                                      shape.status().message()));
    return Value{};
  }
  inst.shape = *std::move(shape);
  instructions_.push_back(std::move(inst));
  return Value{id};
}

bool FunctionBuilder::Check(Value v) {
  if (!status_.ok()) return false;
  if (v.id < 0 || v.id >= static_cast<int>(instructions_.size())) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "function ", name_, ", instruction ", instructions_.size(),
        ": invalid Value (id ", v.id, "; the builder has ", instructions_.size(),
        " values)"));
    return false;
  }
  return true;
}

Value FunctionBuilder::Elementwise(OpKind op, std::vector<Value> operands) {
  Instruction inst;
  inst.op = op;
  for (Value v : operands) {
    if (!Check(v)) return Value{};
    inst.operands.push_back(v.id);
  }
  return Add(std::move(inst));
}

}  // namespace causeway::ir
