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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "causeway/ir/literal.h"
#include "causeway/ir/shape.h"

namespace causeway::ir {

enum class OpKind {
  kParameter,   // attr: parameter_index
  kConstant,    // attr: literal
  // Elementwise binary on equal shapes (f32 or i32).
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMax,
  // Elementwise unary.
  kNeg,
  kExp,         // f32
  kBroadcast,   // broadcast-in-dim; attr: dims (operand dim i -> result dim dims[i])
  kReshape,     // result shape given; same element count
  kTranspose,   // attr: dims (permutation; result dim i = operand dim dims[i])
  kReduceSum,   // attr: dims (reduced axes, removed from the shape)
  kMatmul,      // [m,k] x [k,n] -> [m,n]
  kConvert,     // result dtype given
  kDelay,       // attr: delay_us; returns its operand unchanged after keeping
                // the device busy for delay_us without using host CPU
  kAllReduce,   // attr: axes (mesh axes), reduce_kind
  // --- Added with the complete op set (issue 3); order is the wire format. ---
  kMin,         // elementwise binary
  kPow,         // elementwise binary, f32
  kAbs,         // elementwise unary, f32 or i32
  kLog,         // elementwise unary, f32 (the rest too)
  kTanh,
  kLogistic,    // 1 / (1 + exp(-x))
  kSqrt,
  kRsqrt,
  kSign,        // f32 or i32; -1, 0 or 1 (NaN stays NaN)
  kFloor,
  kCompare,     // attr: comparison; equal shapes -> pred
  kSelect,      // (pred, on_true, on_false), equal dims -> on_true's shape
  kIota,        // attr: dimension; result shape given (f32 or i32)
  kSlice,       // attrs: starts, limits, window_strides (one step per dim;
                // empty: all 1). Result dim: ceil((limit - start) / step).
  kConcatenate, // attr: dimension; >= 1 operands equal but along `dimension`
  kPad,         // (operand, scalar pad value); attrs: pad_low, pad_high (>= 0)
  kGather,      // (operand, i32 indices); attr: dimension. Result dims:
                // operand[:d] + indices + operand[d+1:]; indices clamp.
  kScatterAdd,  // (operand, i32 indices, updates); attr: dimension. Adds
                // updates (shape as kGather's result) into a copy of operand;
                // out-of-range indices are dropped.
  kReduceMax,   // attr: dims
  kReduceMin,   // attr: dims
  kDotGeneral,  // attrs: lhs/rhs batch and contracting dims. Result dims:
                // batch, lhs free, rhs free (each in operand order).
  kRngUniform,  // (i32[] seed); result shape given, f32, uniform in [0, 1)
  kRngNormal,   // (i32[] seed); result shape given, f32, standard normal
  kAllGather,   // attrs: axes, dimension: concatenates the group's operands
  kReduceScatter,  // attrs: axes, dimension, reduce_kind: reduce, then
                   // keep the group rank's slice along `dimension`
  kAllToAll,    // attrs: axes, dimension (split), concat_dimension
  kCollectivePermute,  // attrs: axes, source_target_pairs (group ranks);
                       // a rank no pair targets gets zeros
  // --- Fused kernels of the Transformer composites (issue 9). Each has the
  // same meaning as the composite it replaces; the *Grad ops are the
  // gradients autodiff emits for them and are not differentiable. ---
  kGelu,          // f32, elementwise: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kGeluGrad,      // (x, g) equal f32 shapes -> g * gelu'(x)
  kSoftmax,       // f32, rank >= 1: softmax over the last dimension
  kSoftmaxGrad,   // (y = softmax(x), g) -> y * (g - sum_last(g * y))
  kNormalize,     // (x f32 rank >= 1, epsilon f32[]) -> (x - mean) / sqrt(var + epsilon)
                  // over the last dimension (layer norm without scale and shift)
  kNormalizeGrad, // (x, epsilon, g) -> d/dx of normalize(x) applied to g
  // --- Structured control flow. These run a sub-function (or one of
  // several) inside the executable, on its device. They have several
  // results, packed into one value (PackedShape) that only kGetResult reads.
  // Sub-functions hold no collectives. ---
  kWhile,        // (carry...) ; subfunctions {cond, body}: while cond(carry)
                 // (one pred[] result), carry = body(carry) (same shapes).
                 // Results: the final carry.
  kConditional,  // (selector, arg...) ; subfunctions: branches, each taking
                 // the args and giving results of the same shapes. A pred[]
                 // selector picks branch 0 when true, branch 1 when false
                 // (exactly two branches); an i32[] selector picks branch
                 // clamp(selector, 0, n - 1).
  kGetResult,    // (multi-result value) ; attr: result_index
  // --- Convolution (issue 36). The three are one bilinear form over
  // x [N, C, S...] (1 to 3 spatial dims), a kernel w [O, C/G, K...] and
  // y [N, O, P...] (G = feature_groups; output channel o reads input
  // channels of group o / (O/G)):
  //   y[n,o,p] = sum_{c,k} x[n, g*C/G + c, p*stride + k*dilation - pad_low] * w[o,c,k]
  // with x zero outside its bounds (pad_low may be negative: a crop). Each computes one of the three from the
  // other two; its result shape is given. Attrs: window_strides,
  // window_dilations, pad_low (one per spatial dim), feature_groups. ---
  kConvolution,    // (x, w) -> y
  kConvInputGrad,  // (y, w) -> x: the gradient of y's sum against x (and
                   // ONNX's ConvTranspose); input positions no window reaches are 0
  kConvKernelGrad, // (x, y) -> w
  // --- Sorting (issue 36). ---
  kArgSort,  // (f32 or i32) ; attrs: dimension, comparison (kLt: ascending,
             // kGt: descending). i32 of the operand's dims: along
             // `dimension`, the indices that sort each line, ties in index
             // order; NaN is greater than every number. Not differentiable.
  // Elementwise unary, f32 (issue 36's trigonometric functions; the others
  // are compositions of these and the ops above).
  kSin,
  kCos,
  kAtan,
  // Elementwise unary, f32: the error function (ONNX's Erf, and the exact
  // GELU x/2 (1 + erf(x / sqrt 2)) that models export).
  kErf,
  // Pooling (issue 36): x f32 [N, C, S...] (1 to 3 spatial dims) ->
  // y [N, C, P...], each element the max or sum (reduce_kind) of a window
  // of its plane:
  //   y[n,c,p] = reduce_{k} x[n, c, p*stride + k*dilation - pad_low]
  // over the window's positions k (attr dims: its size per spatial dim),
  // where positions in the padding hold the reduction's identity (-inf
  // for max, 0 for sum; an average divides by its own counts). Attrs:
  // dims, window_strides, window_dilations, pad_low, pad_high (>= 0, one
  // per spatial dim), reduce_kind; P = (S + pad_low + pad_high -
  // (K - 1) * dilation - 1) / stride + 1, at least 1.
  kPool,
};

enum class ReduceKind { kSum, kMax };
enum class Comparison { kEq, kNe, kLt, kLe, kGt, kGe };

// Number of OpKind values (for range checks of untrusted input).
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kPool) + 1;

// True for the collectives (ops that meet peers): they always run.
bool IsCollective(OpKind op);

// True for kWhile and kConditional, whose value packs several results.
inline bool IsMultiResult(OpKind op) {
  return op == OpKind::kWhile || op == OpKind::kConditional;
}

class Function;

const char* OpName(OpKind op);

// One SSA instruction. Operands are indices of earlier instructions.
struct Instruction {
  OpKind op = OpKind::kParameter;
  Shape shape;
  std::vector<int> operands;

  int parameter_index = -1;          // kParameter
  Literal literal;                   // kConstant
  std::vector<int64_t> dims;         // kBroadcast, kTranspose, kReduce*, kPool (window)
  int64_t delay_us = 0;              // kDelay
  std::vector<std::string> axes;     // collectives
  ReduceKind reduce_kind = ReduceKind::kSum;  // kAllReduce, kReduceScatter, kPool
  // kIota, kConcatenate, kGather, kScatterAdd, kAllGather, kReduceScatter,
  // kAllToAll (split dimension).
  int64_t dimension = 0;
  int64_t concat_dimension = 0;      // kAllToAll
  Comparison comparison = Comparison::kEq;  // kCompare
  std::vector<int64_t> starts;       // kSlice
  std::vector<int64_t> limits;       // kSlice
  std::vector<int64_t> pad_low;      // kPad, kPool
  std::vector<int64_t> pad_high;     // kPad, kPool
  std::vector<int64_t> lhs_batch;    // kDotGeneral
  std::vector<int64_t> rhs_batch;
  std::vector<int64_t> lhs_contracting;
  std::vector<int64_t> rhs_contracting;
  // kCollectivePermute: (source rank, target rank) within the group.
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;
  // kWhile: {cond, body}; kConditional: the branches. Shared and immutable,
  // so copying an instruction is cheap.
  std::vector<std::shared_ptr<const Function>> subfunctions;
  int64_t result_index = 0;          // kGetResult
  // kConvolution, kConvInputGrad, kConvKernelGrad (with pad_low), kPool;
  // kSlice's steps (window_strides only).
  std::vector<int64_t> window_strides;
  std::vector<int64_t> window_dilations;
  int64_t feature_groups = 1;
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

// The results of a multi-result instruction (IsMultiResult): the body's
// results for kWhile, branch 0's for kConditional. Empty for other ops or
// when the sub-functions are missing.
std::vector<Shape> ResultShapes(const Instruction& inst);

// The value of a multi-result instruction packs its results one after the
// other, each at a 64-byte aligned byte offset, as pred[total bytes].
// ResultOffsets has one entry per result plus the total.
std::vector<int64_t> ResultOffsets(const std::vector<Shape>& results);
Shape PackedShape(const std::vector<Shape>& results);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_FUNCTION_H_
