#include "causeway/ir/builder.h"

#include <algorithm>
#include <memory>
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
  if (inst.op == OpKind::kGetResult && inst.operands.size() == 1) {
    absl::StatusOr<Shape> result =
        GetResultShape(instructions_[inst.operands[0]], inst.result_index);
    if (!result.ok()) return Fail(inst.op, result.status());
    inst.shape = *std::move(result);
  }
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

namespace causeway::ir {

Value FunctionBuilder::Unary(OpKind op, Value a, std::vector<int64_t> dims) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = op;
  inst.operands = {a.id};
  inst.dims = std::move(dims);
  return Add(std::move(inst));
}

Value FunctionBuilder::Min(Value a, Value b) { return Elementwise(OpKind::kMin, {a, b}); }
Value FunctionBuilder::Pow(Value a, Value b) { return Elementwise(OpKind::kPow, {a, b}); }
Value FunctionBuilder::Abs(Value a) { return Unary(OpKind::kAbs, a); }
Value FunctionBuilder::Log(Value a) { return Unary(OpKind::kLog, a); }
Value FunctionBuilder::Tanh(Value a) { return Unary(OpKind::kTanh, a); }
Value FunctionBuilder::Sin(Value a) { return Unary(OpKind::kSin, a); }
Value FunctionBuilder::Cos(Value a) { return Unary(OpKind::kCos, a); }
Value FunctionBuilder::Atan(Value a) { return Unary(OpKind::kAtan, a); }
Value FunctionBuilder::Erf(Value a) { return Unary(OpKind::kErf, a); }
Value FunctionBuilder::Gelu(Value a) { return Unary(OpKind::kGelu, a); }
Value FunctionBuilder::GeluGrad(Value x, Value g) {
  return Elementwise(OpKind::kGeluGrad, {x, g});
}
Value FunctionBuilder::Softmax(Value a) { return Unary(OpKind::kSoftmax, a); }
Value FunctionBuilder::SoftmaxGrad(Value y, Value g) {
  return Elementwise(OpKind::kSoftmaxGrad, {y, g});
}
Value FunctionBuilder::Normalize(Value x, Value epsilon) {
  return Elementwise(OpKind::kNormalize, {x, epsilon});
}
Value FunctionBuilder::NormalizeGrad(Value x, Value epsilon, Value g) {
  return Elementwise(OpKind::kNormalizeGrad, {x, epsilon, g});
}
Value FunctionBuilder::Logistic(Value a) { return Unary(OpKind::kLogistic, a); }
Value FunctionBuilder::Sqrt(Value a) { return Unary(OpKind::kSqrt, a); }
Value FunctionBuilder::Rsqrt(Value a) { return Unary(OpKind::kRsqrt, a); }
Value FunctionBuilder::Sign(Value a) { return Unary(OpKind::kSign, a); }
Value FunctionBuilder::Floor(Value a) { return Unary(OpKind::kFloor, a); }
Value FunctionBuilder::ReduceMax(Value a, std::vector<int64_t> axes) {
  return Unary(OpKind::kReduceMax, a, std::move(axes));
}
Value FunctionBuilder::ReduceMin(Value a, std::vector<int64_t> axes) {
  return Unary(OpKind::kReduceMin, a, std::move(axes));
}

Value FunctionBuilder::Compare(Value a, Value b, Comparison comparison) {
  if (!Check(a) || !Check(b)) return Value{};
  Instruction inst;
  inst.op = OpKind::kCompare;
  inst.operands = {a.id, b.id};
  inst.comparison = comparison;
  return Add(std::move(inst));
}

Value FunctionBuilder::Select(Value pred, Value on_true, Value on_false) {
  return Elementwise(OpKind::kSelect, {pred, on_true, on_false});
}

Value FunctionBuilder::Iota(const Shape& shape, int64_t dimension) {
  if (!status_.ok()) return Value{};
  Instruction inst;
  inst.op = OpKind::kIota;
  inst.shape = shape;
  inst.dimension = dimension;
  return Add(std::move(inst));
}

Value FunctionBuilder::Slice(Value a, std::vector<int64_t> starts,
                             std::vector<int64_t> limits, std::vector<int64_t> strides) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kSlice;
  inst.operands = {a.id};
  inst.starts = std::move(starts);
  inst.limits = std::move(limits);
  // Unit steps are stored as none, so plain slices stay as they were.
  if (std::any_of(strides.begin(), strides.end(), [](int64_t s) { return s != 1; })) {
    inst.window_strides = std::move(strides);
  }
  return Add(std::move(inst));
}

Value FunctionBuilder::Concatenate(std::vector<Value> operands, int64_t dimension) {
  Instruction inst;
  inst.op = OpKind::kConcatenate;
  inst.dimension = dimension;
  for (Value v : operands) {
    if (!Check(v)) return Value{};
    inst.operands.push_back(v.id);
  }
  return Add(std::move(inst));
}

Value FunctionBuilder::Pad(Value a, Value pad_value, std::vector<int64_t> low,
                           std::vector<int64_t> high) {
  if (!Check(a) || !Check(pad_value)) return Value{};
  Instruction inst;
  inst.op = OpKind::kPad;
  inst.operands = {a.id, pad_value.id};
  inst.pad_low = std::move(low);
  inst.pad_high = std::move(high);
  return Add(std::move(inst));
}

Value FunctionBuilder::Gather(Value operand, Value indices, int64_t dimension) {
  if (!Check(operand) || !Check(indices)) return Value{};
  Instruction inst;
  inst.op = OpKind::kGather;
  inst.operands = {operand.id, indices.id};
  inst.dimension = dimension;
  return Add(std::move(inst));
}

Value FunctionBuilder::ScatterAdd(Value operand, Value indices, Value updates,
                                  int64_t dimension) {
  if (!Check(operand) || !Check(indices) || !Check(updates)) return Value{};
  Instruction inst;
  inst.op = OpKind::kScatterAdd;
  inst.operands = {operand.id, indices.id, updates.id};
  inst.dimension = dimension;
  return Add(std::move(inst));
}

Value FunctionBuilder::DotGeneral(Value lhs, Value rhs, std::vector<int64_t> lhs_batch,
                                  std::vector<int64_t> rhs_batch,
                                  std::vector<int64_t> lhs_contracting,
                                  std::vector<int64_t> rhs_contracting) {
  if (!Check(lhs) || !Check(rhs)) return Value{};
  Instruction inst;
  inst.op = OpKind::kDotGeneral;
  inst.operands = {lhs.id, rhs.id};
  inst.lhs_batch = std::move(lhs_batch);
  inst.rhs_batch = std::move(rhs_batch);
  inst.lhs_contracting = std::move(lhs_contracting);
  inst.rhs_contracting = std::move(rhs_contracting);
  return Add(std::move(inst));
}

namespace {

// `inst`'s window attributes from `spec` for `spatial` dims (defaults
// filled in).
void SetWindow(Instruction& inst, const ConvSpec& spec, size_t spatial) {
  inst.window_strides = spec.strides.empty() ? std::vector<int64_t>(spatial, 1) : spec.strides;
  inst.window_dilations =
      spec.dilations.empty() ? std::vector<int64_t>(spatial, 1) : spec.dilations;
  inst.pad_low = spec.pad_low.empty() ? std::vector<int64_t>(spatial, 0) : spec.pad_low;
  inst.feature_groups = spec.groups;
}

}  // namespace

Value FunctionBuilder::Convolution(Value x, Value kernel, const ConvSpec& spec) {
  if (!Check(x) || !Check(kernel)) return Value{};
  const Shape& xs = shape(x);
  const Shape& ws = shape(kernel);
  Instruction inst;
  inst.op = OpKind::kConvolution;
  inst.operands = {x.id, kernel.id};
  const size_t spatial = xs.dims.size() < 2 ? 0 : xs.dims.size() - 2;
  SetWindow(inst, spec, spatial);
  const std::vector<int64_t> high =
      spec.pad_high.empty() ? std::vector<int64_t>(spatial, 0) : spec.pad_high;
  std::vector<int64_t> dims;
  if (xs.rank() >= 3 && ws.rank() == xs.rank() && inst.window_strides.size() == spatial &&
      inst.window_dilations.size() == spatial && inst.pad_low.size() == spatial &&
      high.size() == spatial) {
    dims = {xs.dims[0], ws.dims[0]};
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t span = (ws.dims[i + 2] - 1) * inst.window_dilations[i] + 1;
      const int64_t room = xs.dims[i + 2] + inst.pad_low[i] + high[i] - span;
      const int64_t stride = std::max<int64_t>(inst.window_strides[i], 1);
      dims.push_back(room < 0 ? 0 : room / stride + 1);
    }
  }
  // (Malformed operands leave the dims empty; inference names the fault.)
  inst.shape = Shape(xs.dtype, std::move(dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::Pool(Value x, ReduceKind kind, std::vector<int64_t> window,
                            const ConvSpec& spec) {
  if (!Check(x)) return Value{};
  const Shape& xs = shape(x);
  Instruction inst;
  inst.op = OpKind::kPool;
  inst.operands = {x.id};
  inst.reduce_kind = kind;
  const size_t spatial = window.size();
  SetWindow(inst, spec, spatial);
  inst.pad_high = spec.pad_high.empty() ? std::vector<int64_t>(spatial, 0) : spec.pad_high;
  inst.dims = std::move(window);
  // The result's dims are inferred (inference names a malformed window).
  inst.shape = Shape(xs.dtype, {});
  return Add(std::move(inst));
}

Value FunctionBuilder::ConvInputGrad(Value y, Value kernel, std::vector<int64_t> input_dims,
                                     const ConvSpec& spec) {
  if (!Check(y) || !Check(kernel)) return Value{};
  Instruction inst;
  inst.op = OpKind::kConvInputGrad;
  inst.operands = {y.id, kernel.id};
  SetWindow(inst, spec, input_dims.size() < 2 ? 0 : input_dims.size() - 2);
  inst.shape = Shape(shape(y).dtype, std::move(input_dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::ConvKernelGrad(Value x, Value y, std::vector<int64_t> kernel_dims,
                                      const ConvSpec& spec) {
  if (!Check(x) || !Check(y)) return Value{};
  Instruction inst;
  inst.op = OpKind::kConvKernelGrad;
  inst.operands = {x.id, y.id};
  SetWindow(inst, spec, kernel_dims.size() < 2 ? 0 : kernel_dims.size() - 2);
  inst.shape = Shape(shape(x).dtype, std::move(kernel_dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::ArgSort(Value a, int64_t dimension, bool descending) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kArgSort;
  inst.operands = {a.id};
  inst.dimension = dimension;
  inst.comparison = descending ? Comparison::kGt : Comparison::kLt;
  return Add(std::move(inst));
}

Value FunctionBuilder::RngUniform(Value seed, std::vector<int64_t> dims) {
  if (!Check(seed)) return Value{};
  Instruction inst;
  inst.op = OpKind::kRngUniform;
  inst.operands = {seed.id};
  inst.shape = Shape(DType::kF32, std::move(dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::RngNormal(Value seed, std::vector<int64_t> dims) {
  if (!Check(seed)) return Value{};
  Instruction inst;
  inst.op = OpKind::kRngNormal;
  inst.operands = {seed.id};
  inst.shape = Shape(DType::kF32, std::move(dims));
  return Add(std::move(inst));
}

namespace {

// The declared result of a collective whose `dimension` is scaled by
// `numerator / denominator`; an unrepresentable result (e.g. not divisible)
// is left for inference to reject.
std::vector<int64_t> ScaledDims(std::vector<int64_t> dims, int64_t dimension, int64_t mul,
                                int64_t div) {
  if (dimension >= 0 && dimension < static_cast<int64_t>(dims.size()) && div > 0 &&
      mul > 0 && mul <= kMaxElements && dims[dimension] <= kMaxElements) {
    dims[dimension] = dims[dimension] * mul / div;
  }
  return dims;
}

// Error unless dimension `d` of `shape` splits into `parts` equal parts.
absl::Status CheckSplits(const Shape& shape, int64_t d, int64_t parts) {
  if (parts <= 0 || (d >= 0 && d < shape.rank() && shape.dims[d] % parts != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("dimension ", d, " of ", shape.ToString(),
                                                   " is not a multiple of the group size ",
                                                   parts));
  }
  return absl::OkStatus();
}

}  // namespace

Value FunctionBuilder::AllGather(Value a, std::vector<std::string> axes, int64_t dimension,
                                 int64_t group_size) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kAllGather;
  inst.operands = {a.id};
  inst.axes = std::move(axes);
  inst.dimension = dimension;
  inst.shape = Shape(shape(a).dtype, ScaledDims(shape(a).dims, dimension, group_size, 1));
  return Add(std::move(inst));
}

Value FunctionBuilder::ReduceScatter(Value a, std::vector<std::string> axes,
                                     int64_t dimension, int64_t group_size,
                                     ReduceKind kind) {
  if (!Check(a)) return Value{};
  if (absl::Status s = CheckSplits(shape(a), dimension, group_size); !s.ok()) {
    return Fail(OpKind::kReduceScatter, s);
  }
  Instruction inst;
  inst.op = OpKind::kReduceScatter;
  inst.operands = {a.id};
  inst.axes = std::move(axes);
  inst.dimension = dimension;
  inst.reduce_kind = kind;
  inst.shape = Shape(shape(a).dtype, ScaledDims(shape(a).dims, dimension, 1, group_size));
  return Add(std::move(inst));
}

Value FunctionBuilder::AllToAll(Value a, std::vector<std::string> axes,
                                int64_t split_dimension, int64_t concat_dimension,
                                int64_t group_size) {
  if (!Check(a)) return Value{};
  if (absl::Status s = CheckSplits(shape(a), split_dimension, group_size); !s.ok()) {
    return Fail(OpKind::kAllToAll, s);
  }
  Instruction inst;
  inst.op = OpKind::kAllToAll;
  inst.operands = {a.id};
  inst.axes = std::move(axes);
  inst.dimension = split_dimension;
  inst.concat_dimension = concat_dimension;
  std::vector<int64_t> dims = shape(a).dims;
  if (split_dimension != concat_dimension) {
    dims = ScaledDims(ScaledDims(std::move(dims), split_dimension, 1, group_size),
                      concat_dimension, group_size, 1);
  }
  inst.shape = Shape(shape(a).dtype, std::move(dims));
  return Add(std::move(inst));
}

Value FunctionBuilder::CollectivePermute(
    Value a, std::vector<std::string> axes,
    std::vector<std::pair<int64_t, int64_t>> source_target_pairs) {
  if (!Check(a)) return Value{};
  Instruction inst;
  inst.op = OpKind::kCollectivePermute;
  inst.operands = {a.id};
  inst.axes = std::move(axes);
  inst.source_target_pairs = std::move(source_target_pairs);
  return Add(std::move(inst));
}

Value FunctionBuilder::Fail(OpKind op, const absl::Status& status) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(absl::StrCat("function ", name_, ", instruction ",
                                                      instructions_.size(), " (", OpName(op),
                                                      "): ", status.message()));
  }
  return Value{};
}

Value FunctionBuilder::Full(float v, std::vector<int64_t> dims) {
  return Broadcast(ConstantF32(v), std::move(dims), {});
}

Value FunctionBuilder::AddInstruction(Instruction inst) {
  if (!status_.ok()) return Value{};
  if (inst.op == OpKind::kParameter) return Parameter(inst.shape);
  for (int o : inst.operands) {
    if (!Check(Value{o})) return Value{};
  }
  return Add(std::move(inst));
}

std::vector<Value> FunctionBuilder::While(const Function& cond, const Function& body,
                                          const std::vector<Value>& init) {
  Instruction inst;
  inst.op = OpKind::kWhile;
  for (Value v : init) {
    if (!Check(v)) return std::vector<Value>(init.size());
    inst.operands.push_back(v.id);
  }
  inst.subfunctions = {std::make_shared<const Function>(cond),
                       std::make_shared<const Function>(body)};
  const Value multi = Add(std::move(inst));
  std::vector<Value> results;
  for (size_t k = 0; k < init.size(); ++k) {
    results.push_back(GetResult(multi, static_cast<int64_t>(k)));
  }
  return results;
}

std::vector<Value> FunctionBuilder::Conditional(Value selector,
                                                const std::vector<Function>& branches,
                                                const std::vector<Value>& args) {
  const size_t n = branches.empty() ? 0 : branches[0].outputs().size();
  Instruction inst;
  inst.op = OpKind::kConditional;
  if (!Check(selector)) return std::vector<Value>(n);
  inst.operands.push_back(selector.id);
  for (Value v : args) {
    if (!Check(v)) return std::vector<Value>(n);
    inst.operands.push_back(v.id);
  }
  for (const Function& f : branches) inst.subfunctions.push_back(std::make_shared<const Function>(f));
  const Value multi = Add(std::move(inst));
  std::vector<Value> results;
  for (size_t k = 0; k < n; ++k) results.push_back(GetResult(multi, static_cast<int64_t>(k)));
  return results;
}

Value FunctionBuilder::GetResult(Value multi, int64_t index) {
  if (!Check(multi)) return Value{};
  Instruction inst;
  inst.op = OpKind::kGetResult;
  inst.operands = {multi.id};
  inst.result_index = index;
  return Add(std::move(inst));
}

std::vector<Value> FunctionBuilder::Call(const Function& function,
                                         const std::vector<Value>& args) {
  std::vector<Value> results(function.outputs().size());
  if (!status_.ok()) return results;
  if (static_cast<int>(args.size()) != function.num_parameters()) {
    status_ = absl::InvalidArgumentError(absl::StrCat(
        "function ", name_, ": call of ", function.name(), " with ", args.size(),
        " arguments, expected ", function.num_parameters()));
    return results;
  }
  std::vector<Value> map(function.instructions().size());
  for (size_t i = 0; i < function.instructions().size(); ++i) {
    const Instruction& inst = function.instructions()[i];
    if (inst.op == OpKind::kParameter) {
      const Value arg = args[inst.parameter_index];
      if (!Check(arg)) return results;
      if (shape(arg) != inst.shape) {
        status_ = absl::InvalidArgumentError(absl::StrCat(
            "function ", name_, ": call of ", function.name(), ": argument ",
            inst.parameter_index, " is ", shape(arg).ToString(), ", expected ",
            inst.shape.ToString()));
        return results;
      }
      map[i] = arg;
      continue;
    }
    Instruction copy = inst;
    for (int& o : copy.operands) o = map[o].id;
    map[i] = AddInstruction(std::move(copy));
  }
  for (size_t k = 0; k < results.size(); ++k) results[k] = map[function.outputs()[k]];
  return results;
}

}  // namespace causeway::ir
