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

  const Shape& shape(Value v) const;
  const absl::Status& status() const { return status_; }

  // Verifies and returns the function with `outputs` as its results.
  absl::StatusOr<Function> Build(std::vector<Value> outputs);

 private:
  Value Add(Instruction inst);
  bool Check(Value v);
  Value Elementwise(OpKind op, std::vector<Value> operands);

  std::string name_;
  std::vector<Instruction> instructions_;
  std::vector<int> parameters_;
  absl::Status status_;
};

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_BUILDER_H_
