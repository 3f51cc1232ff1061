// The computation IR: a small, typed SSA tensor language in the spirit of XLA
// HLO. A Function is a list of instructions in topological order; each
// instruction produces one value, named by its index. Functions are pure,
// have static shapes, and run SPMD: every device of a mesh runs the same
// function over its own shards, and collectives name mesh axes.
//
// Functions are built with FunctionBuilder (builder.h), which infers shapes,
// and checked by Verify() (verifier.h) before they are compiled.
#ifndef CAUSEWAY_IR_FUNCTION_H_
#define CAUSEWAY_IR_FUNCTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "causeway/ir/literal.h"
#include "causeway/ir/shape.h"

namespace causeway::ir {

enum class OpKind {
  kParameter,   // attr: parameter_index
  kConstant,    // attr: literal
  // Elementwise binary on equal shapes.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,
  // Elementwise unary.
  kNeg,
  kExp,
  kBroadcast,   // broadcast-in-dim; attr: dims (operand dim i -> result dim dims[i])
  kReshape,     // result shape given; same element count
  kTranspose,   // attr: dims (permutation; result dim i = operand dim dims[i])
  kReduceSum,   // attr: dims (reduced axes, removed from the shape)
  kMatmul,      // [m,k] x [k,n] -> [m,n]
  kConvert,     // result dtype given
  kDelay,       // attr: delay_us; returns its operand unchanged after keeping
                // the device busy for delay_us without using host CPU
  kAllReduce,   // attr: axes (mesh axes), reduce_kind
};

enum class ReduceKind { kSum, kMax };

const char* OpName(OpKind op);

// One SSA instruction. Operands are indices of earlier instructions.
struct Instruction {
  OpKind op = OpKind::kParameter;
  Shape shape;
  std::vector<int> operands;

  int parameter_index = -1;          // kParameter
  Literal literal;                   // kConstant
  std::vector<int64_t> dims;         // kBroadcast, kTranspose, kReduceSum
  int64_t delay_us = 0;              // kDelay
  std::vector<std::string> axes;     // kAllReduce
  ReduceKind reduce_kind = ReduceKind::kSum;  // kAllReduce
};

// A compiled-to-be unit of work. A value type; immutable once built.
class Function {
 public:
  Function() = default;
  Function(std::string name, std::vector<Instruction> instructions,
           std::vector<int> parameters, std::vector<int> outputs)
      : name_(std::move(name)),
        instructions_(std::move(instructions)),
        parameters_(std::move(parameters)),
        outputs_(std::move(outputs)) {}

  const std::string& name() const { return name_; }
  const std::vector<Instruction>& instructions() const { return instructions_; }
  // Instruction indices of parameters, in parameter order.
  const std::vector<int>& parameters() const { return parameters_; }
  // Instruction indices of results, in result order.
  const std::vector<int>& outputs() const { return outputs_; }

  const Shape& parameter_shape(int i) const {
    return instructions_[parameters_[i]].shape;
  }
  const Shape& output_shape(int i) const { return instructions_[outputs_[i]].shape; }
  int num_parameters() const { return static_cast<int>(parameters_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }

  // Mesh axes named by any collective in the function.
  std::vector<std::string> CollectiveAxes() const;

  // Multi-line human-readable listing.
  std::string ToString() const;

 private:
  std::string name_;
  std::vector<Instruction> instructions_;
  std::vector<int> parameters_;
  std::vector<int> outputs_;
};

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_FUNCTION_H_
