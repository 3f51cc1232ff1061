// Internal to the CPU backend: the compute kernels an Executable runs. Each
// kernel works on raw row-major buffers whose shapes the caller has verified;
// none of them fail, allocate per element, or start threads. The result
// buffer must not overlap any operand buffer.
#ifndef CAUSEWAY_BACKEND_CPU_KERNELS_H_
#define CAUSEWAY_BACKEND_CPU_KERNELS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "causeway/ir/function.h"
#include "causeway/ir/shape.h"

namespace causeway::backend::cpu::kernels {

// out = a OP b over `n` elements. `op` is kAdd, kSub, kMul, kDiv, kMax, kMin
// or kPow (f32 only);
// dtype f32 or i32. Integer arithmetic wraps; integer x / 0 is -1 and
// INT32_MIN / -1 is INT32_MIN (XLA's semantics), so no input traps.
void Binary(ir::OpKind op, ir::DType dtype, const void* a, const void* b, void* out,
            int64_t n);

// out = a OP b over `n` f32 elements, where an operand whose `*_row` is
// L > 0 is a row of L elements repeated over the result (1: a scalar) and
// one whose `*_row` is 0 is dense. At most one operand is repeated; L
// divides n. `op` as for Binary.
void BinaryRepeated(ir::OpKind op, const float* a, int64_t a_row, const float* b,
                    int64_t b_row, float* out, int64_t n);

// out = OP a over `n` elements. `op` is kNeg, kAbs, kSign (f32, i32) or
// kExp, kLog, kTanh, kSin, kCos, kAtan, kErf, kLogistic, kSqrt, kRsqrt, kFloor
// (f32).
void Unary(ir::OpKind op, ir::DType dtype, const void* a, void* out, int64_t n);

// Broadcast-in-dim: operand dimension i maps to result dimension
// operand_dims[i].
void BroadcastInDim(const ir::Shape& operand, absl::Span<const int64_t> operand_dims,
                    const ir::Shape& result, const void* in, void* out);

// Result dimension i is operand dimension perm[i].
void Transpose(const ir::Shape& operand, absl::Span<const int64_t> perm, const void* in,
               void* out);

// Sums `operand` over `axes`; the result has those axes removed.
void ReduceSum(const ir::Shape& operand, absl::Span<const int64_t> axes, const void* in,
               void* out);

// [m,k] x [k,n] -> [m,n], row-major, on the calling thread only.
void Matmul(ir::DType dtype, int64_t m, int64_t k, int64_t n, const void* a,
            const void* b, void* out);

// Element conversion among all dtypes: ir::ConvertElements (a float to an
// integer truncates toward zero and saturates, NaN -> 0; anything -> pred is
// "!= 0"; pred -> number is 0 or 1; integers narrow by wrapping).
void Convert(ir::DType from, ir::DType to, const void* in, void* out, int64_t n);

// --- The rest of the op set (issue 3). ---

// out = cmp(a, b) as pred (one byte, 0 or 1) over `n` elements of `dtype`.
void Compare(ir::Comparison cmp, ir::DType dtype, const void* a, const void* b, void* out,
             int64_t n);
// out = pred ? on_true : on_false, elements of `element_bytes`.
void Select(const void* pred, const void* on_true, const void* on_false, void* out,
            int64_t n, int64_t element_bytes);
// Reduces `operand` over `axes` with kReduceSum, kReduceMax or kReduceMin.
void Reduce(ir::OpKind op, const ir::Shape& operand, absl::Span<const int64_t> axes,
            const void* in, void* out);
// The index along `dimension` at every element of `shape`.
void Iota(const ir::Shape& shape, int64_t dimension, void* out);
// Every steps[i]-th element from starts[i] (no steps: every element).
void Slice(const ir::Shape& operand, absl::Span<const int64_t> starts,
           absl::Span<const int64_t> steps, const ir::Shape& result, const void* in, void* out);
// Copies `in` (shape `part`) into `out` (shape `whole`) at `offset`.
void CopyInto(const ir::Shape& part, const void* in, const ir::Shape& whole,
              absl::Span<const int64_t> offset, void* out);
// Fills `n` elements of `element_bytes` with the element at `value`.
void Fill(const void* value, int64_t element_bytes, int64_t n, void* out);
// out[..., j, ...] = operand[..., clamp(indices[j]), ...] along `dimension`.
void Gather(const ir::Shape& operand, int64_t dimension, const int32_t* indices,
            int64_t num_indices, const void* in, void* out);
// out = operand; out[..., indices[j], ...] += updates[..., j, ...]; indices
// out of range are skipped.
void ScatterAdd(const ir::Shape& operand, int64_t dimension, const int32_t* indices,
                int64_t num_indices, const void* in, const void* updates, void* out);
// dot_general per `inst`'s dimension numbers.
void DotGeneral(const ir::Instruction& inst, const ir::Shape& lhs, const ir::Shape& rhs,
                const void* a, const void* b, void* out);
// Counter-based random numbers: element i depends only on (seed, i).
void RngUniform(int32_t seed, int64_t n, float* out);
void RngNormal(int32_t seed, int64_t n, float* out);

// --- Fused Transformer kernels (f32; see ir::OpKind). `rows` x `cols` is
// the operand viewed as rows of its last dimension. ---
void Gelu(const float* x, float* out, int64_t n);
void GeluGrad(const float* x, const float* g, float* out, int64_t n);
void Softmax(const float* x, float* out, int64_t rows, int64_t cols);
void SoftmaxGrad(const float* y, const float* g, float* out, int64_t rows, int64_t cols);
void Normalize(const float* x, float epsilon, float* out, int64_t rows, int64_t cols);
void NormalizeGrad(const float* x, float epsilon, const float* g, float* out, int64_t rows,
                   int64_t cols);

// The convolution form (ir::OpKind::kConvolution): computes the one of x,
// w and y that inst.op names from its two operands (`first`, `second`, in
// the op's order), f32.
void Convolution(const ir::Instruction& inst, const ir::Shape& x, const ir::Shape& w,
                 const ir::Shape& y, const float* first, const float* second, float* out);

// y = max or sum pooling of x (ir::OpKind::kPool), f32.
void Pool(const ir::Instruction& inst, const ir::Shape& x, const ir::Shape& y, const float* in,
          float* out);

// out (i32) = the indices that sort each line of `operand` along
// `dimension`, ascending or descending, ties in index order, NaN greater
// than every number (ir::OpKind::kArgSort).
void ArgSort(const ir::Shape& operand, int64_t dimension, bool descending, const void* in,
             int32_t* out);

// Makes BLAS single-threaded in this process (each device computes on one
// thread). Idempotent and thread-safe; called by cpu::Compile.
void InitBlas();

}  // namespace causeway::backend::cpu::kernels

#endif  // CAUSEWAY_BACKEND_CPU_KERNELS_H_
