// Internal to causeway/ir: shape inference without the op-name prefix that
// the public InferShape adds, so callers can attach their own context
// ("function F, instruction I (op): ...").
#ifndef CAUSEWAY_IR_SHAPE_INFERENCE_H_
#define CAUSEWAY_IR_SHAPE_INFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// Most bytes the packed results of a multi-result instruction may take, as
// any value's bytes (ResultOffsets saturates at one past it).
inline constexpr int64_t kMaxPackedBytes = kMaxElements;

// Longest delay a kDelay instruction may ask for: 60 s.
inline constexpr int64_t kMaxDelayMicros = 60'000'000;

// The shape of result `index` of `from`: INVALID_ARGUMENT if `from` has one
// result or `index` is out of range. (A get_result's shape depends on the
// instruction it reads, not on that instruction's packed shape.)
absl::StatusOr<Shape> GetResultShape(const Instruction& from, int64_t index);

// Like InferShape, with messages that do not name the op.
absl::StatusOr<Shape> InferShapeNoContext(const Instruction& inst,
                                          const std::vector<Shape>& operand_shapes);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_SHAPE_INFERENCE_H_
