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

// out = a OP b over `n` elements. `op` is kAdd, kSub, kMul, kDiv or kMax;
// dtype f32 or i32. Integer arithmetic wraps; integer x / 0 is -1 and
// INT32_MIN / -1 is INT32_MIN (XLA's semantics), so no input traps.
void Binary(ir::OpKind op, ir::DType dtype, const void* a, const void* b, void* out,
            int64_t n);

// out = OP a over `n` elements. `op` is kNeg (f32, i32) or kExp (f32).
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

// Element conversion among f32, i32 and pred. f32 -> i32 truncates toward
// zero and saturates (NaN -> 0); anything -> pred is "!= 0"; pred -> number
// is 0 or 1.
void Convert(ir::DType from, ir::DType to, const void* in, void* out, int64_t n);

}  // namespace causeway::backend::cpu::kernels

#endif  // CAUSEWAY_BACKEND_CPU_KERNELS_H_
