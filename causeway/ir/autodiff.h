// Reverse-mode automatic differentiation of IR functions: training steps are
// written as forward code and Grad turns them into gradient code, which is
// ordinary IR (it compiles, serialises and runs like any function).
//
// SPMD convention: a function runs on every device of a mesh, so "the loss"
// is the sum over devices of each device's output 0. The gradient of a
// parameter on a device is the derivative of that sum with respect to the
// device's own copy (shard) of the parameter. Under this convention the
// rules for collectives are their transposes: all_reduce(sum) <->
// all_reduce(sum), all_gather <-> reduce_scatter(sum), all_to_all <->
// all_to_all with split and concat swapped, collective_permute <->
// collective_permute with pairs reversed. On one device it is the usual
// gradient.
#ifndef CAUSEWAY_IR_AUTODIFF_H_
#define CAUSEWAY_IR_AUTODIFF_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// Returns a function with `function`'s parameters whose results are
// `function`'s results followed by d(result 0)/d(parameter k) for each k in
// `wrt` (in that order; same shapes as the parameters).
//
// Differentiable ops propagate gradients; non-differentiable ones
// (compare, sign, floor, iota, rng, conversions to or from integers, integer
// values, the gelu/softmax/normalize gradient ops) pass none. Max/min and reduce_max/min send the gradient to every
// operand equal to the result (ties each get all of it). Gather clamps
// indices and scatter_add drops out-of-range ones, so their gradients agree
// only for in-range indices.
//
// INVALID_ARGUMENT if result 0 is not an f32 scalar, a `wrt` index is out of
// range or repeated, or a parameter in `wrt` is not f32.
absl::StatusOr<Function> Grad(const Function& function, absl::Span<const int> wrt);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_AUTODIFF_H_
