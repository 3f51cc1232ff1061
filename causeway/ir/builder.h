// FunctionBuilder: builds an ir::Function op by op, inferring each result's
// shape. Errors (mismatched shapes, bad attributes) are recorded at the first
// offending op and returned by Build(), so building code reads straight
// through without checking every call.
//
//   FunctionBuilder b("scale_and_sum");
//   Value x = b.Parameter(Shape(DType::kF32, {8, 4}));
//   Value y = b.Mul(x, b.Broadcast(b.ConstantF32(2.0f), {8, 4}, {}));
//   Value s = b.AllReduce(b.ReduceSum(y, {0, 1}), {"data"});
//   absl::StatusOr<Function> f = b.Build({s});
#ifndef CAUSEWAY_IR_BUILDER_H_
#define CAUSEWAY_IR_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// A value being built: an instruction index in its builder. A small value
// type; only meaningful with the builder that made it.
struct Value {
  int id = -1;
};

// The window of a convolution, one entry per spatial dimension (empty
// strides and dilations mean 1, empty paddings 0).
struct ConvSpec {
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pad_low;
  std::vector<int64_t> pad_high;
  int64_t groups = 1;
};

// Not thread-safe. After the first error every method returns an invalid
// Value and Build() returns that error.
class FunctionBuilder {
 public:
  explicit FunctionBuilder(std::string name) : name_(std::move(name)) {}

  // Parameters are numbered in call order.
  Value Parameter(const Shape& shape);
  Value Constant(Literal literal);
  Value ConstantF32(float v) { return Constant(Literal::ScalarF32(v)); }

  Value Add(Value a, Value b);
  Value Sub(Value a, Value b);
  Value Mul(Value a, Value b);
  Value Div(Value a, Value b);
  Value Max(Value a, Value b);
  Value Neg(Value a);
  Value Exp(Value a);

  // Broadcast-in-dim: operand dimension i becomes result dimension
  // operand_dims[i]; operand dims must equal the result dims they map to or
  // be 1.
  Value Broadcast(Value a, std::vector<int64_t> result_dims,
                  std::vector<int64_t> operand_dims);
  Value Reshape(Value a, std::vector<int64_t> dims);
  // Result dimension i is operand dimension perm[i].
  Value Transpose(Value a, std::vector<int64_t> perm);
  Value ReduceSum(Value a, std::vector<int64_t> axes);
  Value Matmul(Value a, Value b);
  Value Convert(Value a, DType dtype);
  Value Delay(Value a, int64_t micros);
  Value AllReduce(Value a, std::vector<std::string> axes,
                  ReduceKind kind = ReduceKind::kSum);

  // --- The rest of the op set; see OpKind for semantics. ---
  Value Min(Value a, Value b);
  Value Pow(Value a, Value b);
  Value Abs(Value a);
  Value Log(Value a);
  Value Tanh(Value a);
  Value Sin(Value a);
  Value Cos(Value a);
  Value Atan(Value a);
  Value Erf(Value a);
  Value Logistic(Value a);
  Value Sqrt(Value a);
  Value Rsqrt(Value a);
  Value Sign(Value a);
  Value Floor(Value a);
  Value Compare(Value a, Value b, Comparison comparison);
  Value Select(Value pred, Value on_true, Value on_false);
  Value Iota(const Shape& shape, int64_t dimension);
  // Every `strides[i]`-th element of [starts[i], limits[i]) (no strides:
  // every element).
  Value Slice(Value a, std::vector<int64_t> starts, std::vector<int64_t> limits,
              std::vector<int64_t> strides = {});
  Value Concatenate(std::vector<Value> operands, int64_t dimension);
  Value Pad(Value a, Value pad_value, std::vector<int64_t> low, std::vector<int64_t> high);
  Value Gather(Value operand, Value indices, int64_t dimension);
  Value ScatterAdd(Value operand, Value indices, Value updates, int64_t dimension);
  Value ReduceMax(Value a, std::vector<int64_t> axes);
  Value ReduceMin(Value a, std::vector<int64_t> axes);
  Value DotGeneral(Value lhs, Value rhs, std::vector<int64_t> lhs_batch,
                   std::vector<int64_t> rhs_batch, std::vector<int64_t> lhs_contracting,
                   std::vector<int64_t> rhs_contracting);
  // `seed` is an i32[] value; equal seeds give equal numbers.
  Value RngUniform(Value seed, std::vector<int64_t> dims);
  Value RngNormal(Value seed, std::vector<int64_t> dims);
  // Collectives whose result shape depends on the group: `group_size` is the
  // number of devices along `axes` (checked at run time).
  Value AllGather(Value a, std::vector<std::string> axes, int64_t dimension,
                  int64_t group_size);
  Value ReduceScatter(Value a, std::vector<std::string> axes, int64_t dimension,
                      int64_t group_size, ReduceKind kind = ReduceKind::kSum);
  Value AllToAll(Value a, std::vector<std::string> axes, int64_t split_dimension,
                 int64_t concat_dimension, int64_t group_size);
  Value CollectivePermute(Value a, std::vector<std::string> axes,
                          std::vector<std::pair<int64_t, int64_t>> source_target_pairs);

  // Fused Transformer kernels (see OpKind); the composites use them.
  Value Gelu(Value a);
  Value GeluGrad(Value x, Value g);
  Value Softmax(Value a);
  Value SoftmaxGrad(Value y, Value g);
  Value Normalize(Value x, Value epsilon);
  Value NormalizeGrad(Value x, Value epsilon, Value g);

  // Structured control flow (see OpKind::kWhile, kConditional). `cond` maps
  // the carry to one pred[]; `body` maps the carry to a new carry of the
  // same shapes. Returns the final carry.
  std::vector<Value> While(const Function& cond, const Function& body,
                           const std::vector<Value>& init);
  // Runs one of `branches` on `args` and returns its results. `selector` is
  // pred[] (true: branch 0, false: branch 1) or i32[] (clamped index).
  std::vector<Value> Conditional(Value selector, const std::vector<Function>& branches,
                                 const std::vector<Value>& args);
  // Result `index` of a multi-result value.
  Value GetResult(Value multi, int64_t index);

  // Convolution (see OpKind::kConvolution). `spec` has one stride,
  // dilation and padding per spatial dimension; the result's spatial dims
  // are (S + pad_low + pad_high - (K - 1) * dilation - 1) / stride + 1.
  Value Convolution(Value x, Value kernel, const ConvSpec& spec);
  // The other two of the form, with the result's dims given (`spec`'s
  // pad_high is not used).
  Value ConvInputGrad(Value y, Value kernel, std::vector<int64_t> input_dims,
                      const ConvSpec& spec);
  Value ConvKernelGrad(Value x, Value y, std::vector<int64_t> kernel_dims,
                       const ConvSpec& spec);

  // Max or sum pooling of x [N, C, S...] over windows of size `window`
  // (see OpKind::kPool); `spec` has one stride, dilation, low and high
  // padding per spatial dimension (empty: 1, 1, 0, 0); its groups are not
  // used.
  Value Pool(Value x, ReduceKind kind, std::vector<int64_t> window, const ConvSpec& spec);

  // The indices that sort `a` along `dimension` (see OpKind::kArgSort).
  Value ArgSort(Value a, int64_t dimension, bool descending);

  // Conveniences.
  Value ConstantI32(int32_t v) { return Constant(Literal::I32({}, {v})); }
  // A scalar broadcast to `shape`.
  Value Full(float v, std::vector<int64_t> dims);
  // Adds `inst` with its operands (instruction ids of this builder) as is;
  // used to copy instructions from another function. Shape is re-inferred.
  Value AddInstruction(Instruction inst);
  // Inlines `function` with `args` as its parameters; returns its results.
  std::vector<Value> Call(const Function& function, const std::vector<Value>& args);

  const Shape& shape(Value v) const;
  const absl::Status& status() const { return status_; }

  // Verifies and returns the function with `outputs` as its results.
  absl::StatusOr<Function> Build(std::vector<Value> outputs);

 private:
  Value Add(Instruction inst);
  Value Unary(OpKind op, Value a, std::vector<int64_t> dims = {});
  // Records `status` as the error of a new `op` instruction.
  Value Fail(OpKind op, const absl::Status& status);
  bool Check(Value v);
  Value Elementwise(OpKind op, std::vector<Value> operands);

  std::string name_;
  std::vector<Instruction> instructions_;
  std::vector<int> parameters_;
  absl::Status status_;
};

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_BUILDER_H_
