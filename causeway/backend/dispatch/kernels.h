// The dispatch kernels: a set of simple, data-parallel kernels, each with a
// contract stated here (operands a..d and out, an int32 parameter block,
// and scalars n, op, x, y), into which dispatch::Lower (program.h) turns
// a function. A kind that runs them implements each kernel to its contract:
// the vulkan kind as GLSL compute shaders (causeway/backend/vulkan/shaders),
// the cuda kind as CUDA kernels (causeway/backend/cuda). Unless a kernel
// says otherwise, it is a grid-stride loop over `n` items, so any grid
// covers the work. Element counts and offsets are below 2^31 (the lowering
// refuses bigger arrays). Results never overlap operands.
//
// Dtype codes (x/y of kConvert, op of kIota): 0 f32, 1 i32, 2 pred (one
// byte, 0 or 1).
#ifndef CAUSEWAY_BACKEND_DISPATCH_KERNELS_H_
#define CAUSEWAY_BACKEND_DISPATCH_KERNELS_H_

#include <cstdint>

namespace causeway::backend::dispatch {

// A slot of a launch's argument table: the launch's inputs, then its
// outputs, its temporaries and its resident image (TableSlot, program.h).
// kNoSlot: none.
inline constexpr uint32_t kNoSlot = 0xffff;

// Bounds of a kFusedF32 dispatch (its registers; shaders/fused_f32.comp).
inline constexpr int kMaxFusedOps = 32;
inline constexpr int kMaxFusedInputs = 8;
inline constexpr int kMaxFusedStores = 8;

// Maximum rank of the strided kernels' parameter blocks.
inline constexpr int kMaxRank = 8;

enum class Kernel : int {
  // out[i] = a[i] OP b[i], n elements. op: 0 add, 1 sub, 2 mul, 3 div,
  // 4 max, 5 min, 6 pow, 7 gelu_grad (a = x, b = g: g * gelu'(x), the
  // formula of the cpu kind's GeluGrad). x (for a) and y (for b): 0 if the
  // operand is dense, L > 0 if it is a row of L elements repeated over the
  // result (read at i % L; 1: a scalar), as the cpu plan's operand_row.
  kBinaryF32,
  // i32, wrapping; op 0-5 as above. x / 0 is -1; INT32_MIN / -1 is
  // INT32_MIN.
  kBinaryI32,
  // out[i] = OP a[i]. op: 0 neg, 1 exp, 2 abs, 3 log, 4 tanh, 5 logistic,
  // 6 sqrt, 7 rsqrt, 8 sign (NaN stays NaN), 9 floor, 10 gelu (tanh form),
  // 11 copy, 12 sin, 13 cos, 14 atan, 15 erf.
  kUnaryF32,
  // op: 0 neg (wraps), 2 abs (abs(INT32_MIN) is INT32_MIN), 8 sign, 11 copy.
  kUnaryI32,
  // out[i] (pred) = a[i] CMP b[i]; op: 0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge
  // (ir::Comparison order). F32 compares as IEEE (NaN unequal to all).
  kCompareF32,
  kCompareI32,
  kCompareU8,
  // out[i] = a[i] != 0 ? b[i] : c[i], a pred; 4-byte or 1-byte elements.
  kSelectB32,
  kSelectB8,
  // out[i] = convert(a[i]) from dtype x to dtype y (codes: 0 f32, 1 i32,
  // 2 pred, 3 f16, 4 bf16, 5 i64, 6 i8, 7 u8), as ir::ConvertElements: a
  // float to an integer truncates toward zero and saturates, NaN -> 0;
  // integers narrow by wrapping; anything -> pred is != 0; pred -> number is
  // 0 or 1; to f16 and bf16 rounds to nearest even.
  kConvert,
  // out[i] = (i / x) % y as f32 (op 0) or i32 (op 1).
  kIota,
  // Strided copy of 4-byte or 1-byte elements. Parameter block:
  //   [0] rank r (<= kMaxRank), [1] src_base, [2] dst_base, [3] mode,
  //   [4 + k] dims[k]         the iteration shape (n = their product),
  //   [12 + k] src_strides[k] elements, 0 for a broadcast dimension,
  //   [20 + k] dst_strides[k],
  //   [28 + k] lo[k]          mode 1: padding before dimension k,
  //   [36 + k] src_dims[k]    mode 1: the source's extent in dimension k.
  // For item i with coordinates c in dims (row-major): mode 0 copies
  // src[src_base + sum c_k src_strides_k] to dst[dst_base + sum c_k
  // dst_strides_k]. Mode 1 (pad) reads source coordinate s_k = c_k - lo_k
  // and writes b[0] (the pad value) where some s_k is outside [0,
  // src_dims_k).
  kCopyB32,
  kCopyB8,
  // Reduction; op 0 sum, 1 max, 2 min. n = result elements. Parameter
  // block:
  //   [0] kept rank, [1] reduced rank, [2] reduced count (product),
  //   [4 + k] kept_dims[k], [12 + k] kept_strides[k] (in the operand),
  //   [20 + k] red_dims[k], [28 + k] red_strides[k].
  // out[i] = reduce over the reduced coordinates of a[kept offset + reduced
  // offset], visiting reduced items in row-major order. Sum of nothing is
  // 0; max of nothing -inf (f32) / INT32_MIN; min +inf / INT32_MAX.
  kReduceF32,
  kReduceI32,
  // Batched matrix product out[b][m][n] = sum_k a[b,m,k] * b[b,k,n], out
  // dense [batch, M, N]. Parameter block: [0] M, [1] N, [2] K, [3] batch,
  // [4] a_batch_stride, [5] a_m_stride, [6] a_k_stride, [7] b_batch_stride,
  // [8] b_k_stride, [9] b_n_stride (elements). kMatmulF32 is tiled (local
  // size 16x16, each invocation a 4x4 block of a 64x64 tile, operands
  // through shared memory 16 values of K at a time; dispatch (ceil(N/64),
  // ceil(M/64), batch) workgroups); kMatmulI32 is one invocation per result
  // element with n = batch*M*N (wrapping arithmetic).
  kMatmulF32,
  kMatmulI32,
  // out[(o*J + j)*inner + r] = a[(o*dim + clamp(idx[j], 0, dim-1))*inner + r]
  // with b = idx (i32, J of them). Parameter block: [0] outer, [1] dim,
  // [2] inner, [3] J. n = outer*J*inner.
  kGatherB32,
  kGatherB8,
  // out = a, plus, for each j in ascending order with idx[j] (b) in
  // [0, dim): out[(o*dim + idx[j])*inner + r] += c[(o*J + j)*inner + r].
  // Deterministic: one invocation per result element sums its updates in
  // j order. Parameter block as kGather.
  kScatterAddF32,
  kScatterAddI32,
  // Counter-based random numbers, element i from (seed = a[0], an i32
  // scalar in device memory, i) exactly
  // as the cpu kind computes them (SplitMix64; Box-Muller on two uniforms
  // for normal). op 0 uniform in [0, 1), 1 standard normal.
  kRng,
  // Rows of x (= cols) elements, n rows, one invocation per row. op:
  //   0 softmax(a); 1 softmax_grad(y = a, g = b); 2 normalize(a, eps = b[0]);
  //   3 normalize_grad(x = a, eps = b[0], g = c); formulas of the cpu kind's
  //   kernels_fused.cc.
  kRowsF32,
  // Variants for devices that are CPUs (the vulkan kind on lavapipe), which
  // run a workgroup's invocations as coroutines on one thread and switch
  // between them at every barrier: no shared memory, no barriers. The
  // lowering emits the kernels above; a device may substitute these
  // (vulkan::ChooseVariant).
  //   kMatmulF32Cpu: kMatmulF32's contract and dispatch, each invocation
  //     its 4x4 block straight from memory; x = K.
  //   kRowsF32Cpu: kRowsF32's contract, one invocation per row,
  //     dispatched with Groups(n) workgroups.
  kMatmulF32Cpu,
  kRowsF32Cpu,
  // A collective's reduction over the members of its group on one GPU
  // (collectives.h): params is an array of 64-bit addresses, the x
  // members' operands in rank order then the y results; each result gets
  // in_0[i] OP ... OP in_{x-1}[i], combined in rank order (the hub's
  // order, so the same bits). op 0 sum (i32 wraps), 1 max; n elements.
  // (Reductions are of f32 or i32 only: the IR has no pred all_reduce.)
  kMembersF32,
  kMembersI32,
  // The convolutions' data movement (shaders/conv_f32.comp): op 0 im2col
  // (a = x [N*C, S] -> out = col [N*C, taps, P]), op 1 col2im (a = col ->
  // out = x, each element the sum of what read it); n = the result's
  // elements. Parameter block: [1] C, [2..4] S, [5..7] kernel dims,
  // [8..10] P, [11..13] strides, [14..16] dilations, [17..19] low padding
  // (rank 3; lower ranks with unit dims in front). The products around
  // them are kMatmulF32's.
  kConvF32,
  // ir::OpKind::kArgSort: one invocation per element, which counts the
  // elements of its line that go before it (a loop over the line) and
  // writes its index at that rank. n elements; x the line's length, y the
  // stride between its elements (inner); op bit 0 descending, bit 1 i32.
  kArgSort,
  // A run of f32 element-wise ops (the cpu planner's fused step) in one
  // pass over n elements: each invocation computes its elements op by op in
  // registers (kBinaryF32's and kUnaryF32's op codes), reading the run's
  // inputs and writing only the values read after it. At most
  // kMaxFusedOps ops, kMaxFusedInputs inputs (each dense or a repeated
  // row) and kMaxFusedStores stores; operands through the argument table
  // (slots and offsets in the parameter block, laid out in
  // shaders/fused_f32.comp).
  kFusedF32,
  // kMatmulF32's contract with a 128x128 tile per workgroup (local size
  // 256, each invocation an 8x8 block; operands through double-buffered
  // shared memory 8 values of K at a time), dispatched (ceil(N/128),
  // ceil(M/128), batch). ChooseVariant substitutes it for kMatmulF32
  // where the product fills enough of its tiles.
  kMatmulF32Large,
  kNumKernels,
};

const char* KernelName(Kernel kernel);

// lavapipe ends an invocation once its loops have run 65535 iterations in
// all (gallivm's loop limiter), so a kernel whose invocations loop over a
// whole row or all of K keeps within this many iterations.
inline constexpr int64_t kMaxLoopIterations = 65535;

// Local size of the one-dimensional kernels (CW_LOCAL in common.glsl).
inline constexpr uint32_t kLocalSize = 256;
// The tile of the result one workgroup of kMatmulF32 computes.
inline constexpr uint32_t kMatmulTile = 64;
}  // namespace causeway::backend::dispatch

#endif  // CAUSEWAY_BACKEND_DISPATCH_KERNELS_H_
