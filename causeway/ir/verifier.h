// Verification and shape inference for IR functions. Every function is
// verified before compilation; Verify never crashes on malformed input.
#ifndef CAUSEWAY_IR_VERIFIER_H_
#define CAUSEWAY_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// Infers the result shape of `inst` from its operands' shapes and its
// attributes (for kReshape and kConvert, inst.shape supplies the requested
// dims or dtype). INVALID_ARGUMENT naming the op and the mismatch otherwise.
absl::StatusOr<Shape> InferShape(const Instruction& inst,
                                 const std::vector<Shape>& operand_shapes);

// Checks a whole function: operands refer to earlier instructions, operand
// counts, attributes and declared shapes agree with inference, parameters
// are numbered 0..n-1 and listed, outputs exist, sizes are sane. The
// sub-functions of control flow are verified too: at most
// kMaxControlFlowDepth deep, with no collectives, and a multi-result value is
// read only by get_result and is never a result of its function.
// INVALID_ARGUMENT with "function F, instruction I (op): ..." otherwise.
absl::Status Verify(const Function& function);

inline constexpr int kMaxControlFlowDepth = 8;

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_VERIFIER_H_
