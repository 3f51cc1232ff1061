// The three convolution ops (ir::OpKind::kConvolution, kConvInputGrad,
// kConvKernelGrad) are one bilinear form over x, w and y: two of them are
// an op's operands and one its result. ConvolutionRoles names which is
// which, for the code that needs all three (shape inference, autodiff, the
// kinds' kernels).
#ifndef CAUSEWAY_IR_CONVOLUTION_H_
#define CAUSEWAY_IR_CONVOLUTION_H_

#include "causeway/ir/function.h"
#include "causeway/ir/shape.h"

namespace causeway::ir {

struct ConvolutionShapes {
  const Shape& x;
  const Shape& w;
  const Shape& y;
};

// `first` and `second` are the shapes of `inst`'s operands, in order.
inline ConvolutionShapes ConvolutionRoles(const Instruction& inst, const Shape& first,
                                          const Shape& second) {
  switch (inst.op) {
    case OpKind::kConvolution: return {first, second, inst.shape};     // (x, w) -> y
    case OpKind::kConvInputGrad: return {inst.shape, second, first};   // (y, w) -> x
    default: return {first, inst.shape, second};                       // (x, y) -> w
  }
}

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_CONVOLUTION_H_
