// The cuda kind's dispatch kernels (kernels.h): each kernel of
// causeway/backend/dispatch/kernels.h as a CUDA kernel ported from the
// vulkan kind's shader of the same name (causeway/backend/vulkan/shaders),
// with the shader's formulas, op codes, rounding and orders of summation
// (the matrix products are kernels_matmul.cu's). The one-dimensional
// kernels are grid-stride loops over n items with kLocalSize threads per
// block, so any grid covers the work; their parameter blocks are read from
// the host copy and passed by value. Built by nvcc without abseil.
#include "causeway/backend/cuda/kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace causeway::backend::cuda {
namespace {

using dispatch::Kernel;
using dispatch::kMaxRank;

constexpr unsigned kBlock = dispatch::kLocalSize;
// Blocks of a one-dimensional launch at most; its loop covers the rest.
constexpr uint32_t kMaxBlocks = 65535;

// ---------------------------------------------------------------------------
// Device helpers.

__device__ __forceinline__ uint32_t FirstItem() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ uint32_t GridStride() { return gridDim.x * blockDim.x; }

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

// elementwise.glsl's erf: its Maclaurin series below 0.5, Abramowitz and
// Stegun 7.1.26 above.
__device__ float Erf(float x) {
  const float ax = fabsf(x);
  if (ax < 0.5f) {
    const float z = x * x;
    return 1.1283791670955126f * x *
           (1.0f + z * (-1.0f / 3.0f +
                        z * (0.1f + z * (-1.0f / 42.0f + z * (1.0f / 216.0f - z / 1320.0f)))));
  }
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  const float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return (x < 0.0f ? -1.0f : 1.0f) * (1.0f - poly * expf(-x * x));
}

// kBinaryF32's ops (elementwise.glsl's BinaryF32).
__device__ float BinaryF32(uint32_t op, float x, float y) {
  switch (op) {
    case 0: return x + y;
    case 1: return x - y;
    case 2: return x * y;
    case 3: return x / y;
    case 4: return fmaxf(x, y);
    case 5: return fminf(x, y);
    case 6: return powf(x, y);
    default: {  // gelu_grad: y * gelu'(x)
      const float t = tanhf(kGeluK * (x + kGeluC * x * x * x));
      return y * (0.5f * (1.0f + t) +
                  0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * x * x));
    }
  }
}

// kUnaryF32's ops (elementwise.glsl's UnaryF32).
__device__ float UnaryF32(uint32_t op, float x) {
  switch (op) {
    case 0: return -x;
    case 1: return expf(x);
    case 2: return fabsf(x);
    case 3: return logf(x);
    case 4: return tanhf(x);
    case 5: return 1.0f / (1.0f + expf(-x));
    case 6: return sqrtf(x);
    case 7: return 1.0f / sqrtf(x);
    case 8: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x != x ? x : 0.0f;  // NaN stays NaN
    case 9: return floorf(x);
    case 10: return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluC * x * x * x)));
    case 12: return sinf(x);
    case 13: return cosf(x);
    case 14: return atanf(x);
    case 15: return Erf(x);
    default: return x;
  }
}

// i32 arithmetic wraps: through uint32_t, where overflow is defined.
__device__ __forceinline__ int32_t Wrap(uint32_t v) { return static_cast<int32_t>(v); }
__device__ __forceinline__ uint32_t U(int32_t v) { return static_cast<uint32_t>(v); }

// A reduction's step: op 0 sum (i32 wraps), 1 max, 2 min.
__device__ __forceinline__ float Accumulate(uint32_t op, float acc, float x) {
  return op == 0 ? acc + x : op == 1 ? fmaxf(acc, x) : fminf(acc, x);
}
__device__ __forceinline__ int32_t Accumulate(uint32_t op, int32_t acc, int32_t x) {
  return op == 0 ? Wrap(U(acc) + U(x)) : op == 1 ? max(acc, x) : min(acc, x);
}

// ---------------------------------------------------------------------------
// Element-wise kernels.

// x, y: an operand repeated as a row of that many elements (0: dense).
__global__ void BinaryF32Kernel(const float* a, const float* b, float* out, uint32_t n,
                                uint32_t op, uint32_t x_row, uint32_t y_row) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const float x = a[x_row == 0 ? i : i % x_row];
    const float y = b[y_row == 0 ? i : i % y_row];
    out[i] = BinaryF32(op, x, y);
  }
}

__global__ void BinaryI32Kernel(const int32_t* a, const int32_t* b, int32_t* out, uint32_t n,
                                uint32_t op) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const int32_t x = a[i], y = b[i];
    int32_t r;
    switch (op) {
      case 0: r = Wrap(U(x) + U(y)); break;
      case 1: r = Wrap(U(x) - U(y)); break;
      case 2: r = Wrap(U(x) * U(y)); break;
      case 3: r = y == 0 ? -1 : (y == -1 && x == INT32_MIN) ? x : x / y; break;  // XLA's
      case 4: r = max(x, y); break;
      default: r = min(x, y);
    }
    out[i] = r;
  }
}

__global__ void UnaryF32Kernel(const float* a, float* out, uint32_t n, uint32_t op) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) out[i] = UnaryF32(op, a[i]);
}

__global__ void UnaryI32Kernel(const int32_t* a, int32_t* out, uint32_t n, uint32_t op) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const int32_t x = a[i];
    int32_t r;
    switch (op) {
      case 0: r = Wrap(0u - U(x)); break;
      case 2: r = x < 0 ? Wrap(0u - U(x)) : x; break;  // abs(INT32_MIN) is INT32_MIN
      case 8: r = static_cast<int32_t>(x > 0) - static_cast<int32_t>(x < 0); break;
      default: r = x;
    }
    out[i] = r;
  }
}

// T: float, int32_t or uint8_t (compared as unsigned).
template <typename T>
__global__ void CompareKernel(const T* a, const T* b, uint8_t* out, uint32_t n, uint32_t op) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const T x = a[i], y = b[i];
    bool r;
    switch (op) {
      case 0: r = x == y; break;
      case 1: r = x != y; break;
      case 2: r = x < y; break;
      case 3: r = x <= y; break;
      case 4: r = x > y; break;
      default: r = x >= y;
    }
    out[i] = r ? 1 : 0;
  }
}

template <typename T>
__global__ void SelectKernel(const uint8_t* p, const T* t, const T* f, T* out, uint32_t n) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) out[i] = p[i] != 0 ? t[i] : f[i];
}

// ---------------------------------------------------------------------------
// kConvert (convert.comp). Two-byte elements are read and written a byte at
// a time and i64 as two words, as the shader does (no alignment assumed
// beyond 4 bytes for i64).

__device__ __forceinline__ uint32_t Load16(const uint8_t* base, uint32_t i) {
  return static_cast<uint32_t>(base[2 * i]) | (static_cast<uint32_t>(base[2 * i + 1]) << 8);
}

__device__ __forceinline__ void Store16(uint8_t* base, uint32_t i, uint32_t bits) {
  base[2 * i] = static_cast<uint8_t>(bits & 0xffu);
  base[2 * i + 1] = static_cast<uint8_t>((bits >> 8) & 0xffu);
}

// f16 bits to f32, exactly (subnormals, infinities, NaN payloads).
__device__ float HalfToFloat(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24, exact
    return sign != 0 ? -v : v;
  }
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// f32 to f16 bits, to nearest even; NaN -> a quiet NaN (0x7e00 with the
// sign), as the cpu kind (Eigen) converts.
__device__ uint32_t FloatToHalf(float f) {
  uint32_t u = __float_as_uint(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t o;
  if (u >= 0x47800000u) {  // 2^16 and above: infinity (or NaN)
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 0x38800000u) {  // below 2^-14: subnormal or zero
    // Adding 0.5 (whose ulp is f16's 2^-24) rounds to nearest even.
    o = __float_as_uint(__fadd_rn(__uint_as_float(u), 0.5f)) - 0x3f000000u;
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += 0xc8000fffu;  // rebias the exponent, add half an ulp less one
    u += odd;
    o = u >> 13;
  }
  return o | (sign >> 16);
}

__device__ __forceinline__ float Bf16ToFloat(uint32_t bits) { return __uint_as_float(bits << 16); }

__device__ uint32_t FloatToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // stays a (quiet) NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                     // nearest, ties to even
}

// A float truncated toward zero, saturated at [lo, hi_excl), NaN -> 0.
__device__ __forceinline__ int64_t Saturate(float f, float lo, float hi_excl, int64_t min_v,
                                            int64_t max_v) {
  if (f != f) return 0;
  if (f <= lo) return min_v;
  if (f >= hi_excl) return max_v;
  return static_cast<int64_t>(f);
}

// Dtype codes: 0 f32, 1 i32, 2 pred, 3 f16, 4 bf16, 5 i64, 6 i8, 7 u8.
__global__ void ConvertKernel(const void* in, void* out, uint32_t n, uint32_t from, uint32_t to) {
  const auto* a8 = static_cast<const uint8_t*>(in);
  const auto* a32 = static_cast<const uint32_t*>(in);
  auto* o8 = static_cast<uint8_t*>(out);
  auto* o32 = static_cast<uint32_t*>(out);
  const bool from_float = from == 0 || from == 3 || from == 4;
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    // Read as a float (f32, f16, bf16) or a 64-bit integer (the rest; pred
    // as 0 or 1).
    float f = 0.0f;
    int64_t v = 0;
    switch (from) {
      case 0: f = __uint_as_float(a32[i]); break;
      case 1: v = static_cast<int32_t>(a32[i]); break;
      case 2: v = a8[i] != 0 ? 1 : 0; break;
      case 3: f = HalfToFloat(Load16(a8, i)); break;
      case 4: f = Bf16ToFloat(Load16(a8, i)); break;
      case 5:
        v = static_cast<int64_t>(static_cast<uint64_t>(a32[2 * i]) |
                                 (static_cast<uint64_t>(a32[2 * i + 1]) << 32));
        break;
      case 6: v = static_cast<int8_t>(a8[i]); break;
      default: v = a8[i]; break;
    }
    const float as_float = from_float ? f : static_cast<float>(v);
    switch (to) {
      case 0: o32[i] = __float_as_uint(as_float); break;
      case 1: {
        const int64_t r = from_float ? Saturate(f, -2147483648.0f, 2147483648.0f, INT32_MIN,
                                                INT32_MAX)
                                     : v;
        o32[i] = static_cast<uint32_t>(static_cast<uint64_t>(r));  // integers wrap
        break;
      }
      case 2: o8[i] = (from_float ? f != 0.0f : v != 0) ? 1 : 0; break;
      case 3: Store16(o8, i, FloatToHalf(as_float)); break;
      case 4: Store16(o8, i, FloatToBf16(as_float)); break;
      case 5: {
        const int64_t r = from_float ? Saturate(f, -9223372036854775808.0f,
                                                9223372036854775808.0f, INT64_MIN, INT64_MAX)
                                     : v;
        o32[2 * i] = static_cast<uint32_t>(static_cast<uint64_t>(r) & 0xffffffffu);
        o32[2 * i + 1] = static_cast<uint32_t>(static_cast<uint64_t>(r) >> 32);
        break;
      }
      case 6: {
        const int64_t r = from_float ? Saturate(f, -128.0f, 128.0f, -128, 127) : v;
        o8[i] = static_cast<uint8_t>(static_cast<uint64_t>(r) & 0xffu);
        break;
      }
      default: {
        const int64_t r = from_float ? Saturate(f, 0.0f, 256.0f, 0, 255) : v;
        o8[i] = static_cast<uint8_t>(static_cast<uint64_t>(r) & 0xffu);
        break;
      }
    }
  }
}

// out[i] = (i / x) % y as f32 (op 0) or i32.
__global__ void IotaKernel(void* out, uint32_t n, uint32_t op, uint32_t x, uint32_t y) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const uint32_t v = (i / x) % y;
    if (op == 0) {
      static_cast<float*>(out)[i] = static_cast<float>(v);
    } else {
      static_cast<int32_t*>(out)[i] = static_cast<int32_t>(v);
    }
  }
}

// ---------------------------------------------------------------------------
// Data movement.

// kCopy*'s parameter block (copy.glsl).
struct CopyParams {
  int32_t rank, src_base, dst_base, mode;
  int32_t dims[kMaxRank], src[kMaxRank], dst[kMaxRank], lo[kMaxRank], src_dims[kMaxRank];
};

template <typename T>
__global__ void CopyKernel(const T* src, const T* fill, T* dst, uint32_t n, CopyParams p) {
  const bool pad = p.mode == 1;
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    int32_t rest = static_cast<int32_t>(i);
    int32_t s = p.src_base, d = p.dst_base;
    bool inside = true;
    // Row-major coordinates, innermost first.
    for (int k = p.rank - 1; k >= 0; --k) {
      const int32_t dim = p.dims[k];
      const int32_t c = rest % dim;
      rest /= dim;
      d += c * p.dst[k];
      if (pad) {
        const int32_t sc = c - p.lo[k];
        inside = inside && sc >= 0 && sc < p.src_dims[k];
        s += sc * p.src[k];
      } else {
        s += c * p.src[k];
      }
    }
    dst[d] = inside ? src[s] : fill[0];
  }
}

// [0] outer, [1] dim, [2] inner, [3] J (gather.glsl, scatter_add.glsl).
struct IndexParams {
  int32_t outer, dim, inner, count;
};

template <typename T>
__global__ void GatherKernel(const T* a, const int32_t* idx, T* out, uint32_t n, IndexParams p) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const int32_t e = static_cast<int32_t>(i);
    const int32_t r = e % p.inner, j = (e / p.inner) % p.count, outer = e / (p.inner * p.count);
    const int32_t t = min(max(idx[j], 0), p.dim - 1);
    out[i] = a[(outer * p.dim + t) * p.inner + r];
  }
}

__device__ __forceinline__ float Add(float x, float y) { return x + y; }
__device__ __forceinline__ int32_t Add(int32_t x, int32_t y) { return Wrap(U(x) + U(y)); }

// scatter_add.glsl: item i sums, in index order, chunk i / x (of y
// indices) of the updates landing on result element i % x, from a's element
// (a given: one chunk) or zero (partials).
template <typename T>
__global__ void ScatterAddKernel(const T* a, const int32_t* idx, const T* u, T* out, uint32_t n,
                                 uint32_t results, uint32_t chunk, IndexParams p) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const int32_t e = static_cast<int32_t>(i % results), q = static_cast<int32_t>(i / results);
    const int32_t r = e % p.inner, t = (e / p.inner) % p.dim, outer = e / (p.inner * p.dim);
    T acc = a != nullptr ? a[e] : T(0);
    const int64_t first = int64_t{q} * chunk;
    const int32_t end = static_cast<int32_t>(min(int64_t{p.count}, first + chunk));
    for (int32_t j = static_cast<int32_t>(first); j < end; ++j) {
      if (idx[j] == t) acc = Add(acc, u[(outer * p.count + j) * p.inner + r]);
    }
    out[i] = acc;
  }
}

// ---------------------------------------------------------------------------
// Reductions (reduce.glsl): x = result elements, y = reduced items per
// chunk; item i reduces chunk i / x of result element i % x, visiting the
// reduced items in row-major order.

struct ReduceParams {
  int32_t kept, red, count;
  int32_t kept_dims[kMaxRank], kept_strides[kMaxRank], red_dims[kMaxRank],
      red_strides[kMaxRank];
};

template <typename T>
__global__ void ReduceKernel(const T* a, T* out, uint32_t n, uint32_t op, uint32_t results,
                             uint32_t chunk, ReduceParams p, T max_id, T min_id) {
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    const uint32_t q = i / results;
    int32_t rest = static_cast<int32_t>(i % results), base = 0;
    for (int k = p.kept - 1; k >= 0; --k) {
      const int32_t dim = p.kept_dims[k];
      base += (rest % dim) * p.kept_strides[k];
      rest /= dim;
    }
    T acc = op == 0 ? T(0) : op == 1 ? max_id : min_id;
    const int64_t first = int64_t{q} * chunk;
    const int32_t end = static_cast<int32_t>(min(int64_t{p.count}, first + chunk));
    const int32_t begin = static_cast<int32_t>(first);
    if (p.red <= 1) {
      const int32_t stride = p.red == 1 ? p.red_strides[0] : 0;
      for (int32_t r = begin; r < end; ++r) acc = Accumulate(op, acc, a[base + r * stride]);
    } else if (begin < end) {
      // An odometer over the reduced coordinates from `begin`: the order of
      // the shader's per-item decomposition without its divisions.
      int32_t coord[kMaxRank];
      int32_t off = base, rr = begin;
      for (int k = p.red - 1; k >= 0; --k) {
        coord[k] = rr % p.red_dims[k];
        off += coord[k] * p.red_strides[k];
        rr /= p.red_dims[k];
      }
      for (int32_t r = begin; r < end; ++r) {
        acc = Accumulate(op, acc, a[off]);
        for (int k = p.red - 1; k >= 0; --k) {
          off += p.red_strides[k];
          if (++coord[k] < p.red_dims[k]) break;
          off -= coord[k] * p.red_strides[k];
          coord[k] = 0;
        }
      }
    }
    out[i] = acc;
  }
}

// ---------------------------------------------------------------------------
// Random numbers (rng.comp): the cpu kind's counter-based generator, bit
// for bit: SplitMix64, 24 random bits per uniform, a normal from the cosine
// branch of Box-Muller on counters 2i and 2i+1.

__device__ __forceinline__ uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ float UniformAt(uint64_t key, uint64_t counter) {
  return static_cast<float>(static_cast<uint32_t>(SplitMix64(key ^ counter) >> 40)) *
         (1.0f / 16777216.0f);
}

__global__ void RngKernel(const int32_t* seed, float* out, uint32_t n, uint32_t op) {
  const uint64_t key =
      SplitMix64(static_cast<uint64_t>(static_cast<uint32_t>(seed[0])) ^ 0xD1B54A32D192ED03ull);
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    if (op == 0) {
      out[i] = UniformAt(key, i);
    } else {
      const uint64_t c = uint64_t{i} * 2;
      const float u1 = 1.0f - UniformAt(key, c);  // (0, 1]
      const float u2 = UniformAt(key, c + 1);
      out[i] = sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
    }
  }
}

// ---------------------------------------------------------------------------
// Rows (rows.glsl, rows_f32.comp): one block of kBlock threads per row,
// striding over the rows; its threads stride over the columns and meet for
// each sum or maximum in the shader's tree order (pairs s apart, s = 128
// ... 1; the last five steps within a warp by shuffles, the same pairs).

__device__ float CombineRow(float v, bool is_max, float* partial) {
  const unsigned t = threadIdx.x;
  partial[t] = v;
  __syncthreads();
  for (unsigned s = kBlock / 2; s >= 32; s >>= 1) {
    if (t < s) {
      partial[t] = is_max ? fmaxf(partial[t], partial[t + s]) : partial[t] + partial[t + s];
    }
    __syncthreads();
  }
  if (t < 32) {
    float r = partial[t];
    for (int s = 16; s > 0; s >>= 1) {
      const float o = __shfl_down_sync(0xffffffffu, r, s);
      r = is_max ? fmaxf(r, o) : r + o;
    }
    if (t == 0) partial[0] = r;
  }
  __syncthreads();
  const float r = partial[0];
  __syncthreads();  // partial is reused by the next combine
  return r;
}

// op: 0 softmax(a); 1 softmax_grad(y = a, g = b); 2 normalize(a, eps =
// b[0]); 3 normalize_grad(x = a, eps = b[0], g = c).
__global__ void __launch_bounds__(kBlock)
    RowsF32Kernel(const float* a, const float* b, const float* c, float* o, uint32_t rows,
                  uint32_t op, int32_t cols) {
  __shared__ float partial[kBlock];
  const float inv_n = 1.0f / static_cast<float>(cols);
  const int32_t first = static_cast<int32_t>(threadIdx.x), step = static_cast<int32_t>(kBlock);
  for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int32_t base = static_cast<int32_t>(row) * cols;
    if (op == 0) {
      float m = __uint_as_float(0xff800000u);
      for (int32_t j = first; j < cols; j += step) m = fmaxf(m, a[base + j]);
      m = CombineRow(m, true, partial);
      float s = 0.0f;
      for (int32_t j = first; j < cols; j += step) {
        const float e = expf(a[base + j] - m);
        o[base + j] = e;
        s += e;
      }
      const float inv = 1.0f / CombineRow(s, false, partial);
      for (int32_t j = first; j < cols; j += step) o[base + j] *= inv;
    } else if (op == 1) {
      float s = 0.0f;
      for (int32_t j = first; j < cols; j += step) s += b[base + j] * a[base + j];
      s = CombineRow(s, false, partial);
      for (int32_t j = first; j < cols; j += step) o[base + j] = a[base + j] * (b[base + j] - s);
    } else {
      const float eps = b[0];
      float sum = 0.0f;
      for (int32_t j = first; j < cols; j += step) sum += a[base + j];
      const float mean = CombineRow(sum, false, partial) * inv_n;
      float var = 0.0f;
      for (int32_t j = first; j < cols; j += step) {
        const float d = a[base + j] - mean;
        var += d * d;
      }
      const float inv_sigma = 1.0f / sqrtf(CombineRow(var, false, partial) * inv_n + eps);
      if (op == 2) {
        for (int32_t j = first; j < cols; j += step) o[base + j] = (a[base + j] - mean) * inv_sigma;
      } else {
        // dx = (g - mean(g) - x_hat mean(g x_hat)) / sigma
        float sg = 0.0f, sgx = 0.0f;
        for (int32_t j = first; j < cols; j += step) {
          const float g = c[base + j];
          sg += g;
          sgx += g * (a[base + j] - mean) * inv_sigma;
        }
        const float mean_g = CombineRow(sg, false, partial) * inv_n;
        const float mean_gx = CombineRow(sgx, false, partial) * inv_n;
        for (int32_t j = first; j < cols; j += step) {
          const float xh = (a[base + j] - mean) * inv_sigma;
          o[base + j] = inv_sigma * (c[base + j] - mean_g - xh * mean_gx);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Convolutions' data movement and pooling (conv_f32.comp): op 0 im2col,
// 1 col2im, 2 sum pooling, 3 max pooling. Rank 3, unit dims in front.

struct ConvParams {
  int32_t s[3], k[3], p[3], st[3], dl[3], pad[3];
};

__global__ void ConvF32Kernel(const float* a, float* o, uint32_t n, uint32_t op, ConvParams c) {
  const int32_t taps = c.k[0] * c.k[1] * c.k[2], plane = c.s[0] * c.s[1] * c.s[2];
  const int32_t outs = c.p[0] * c.p[1] * c.p[2];
  for (uint32_t item = FirstItem(); item < n; item += GridStride()) {
    const int32_t i = static_cast<int32_t>(item);
    if (op == 0) {  // i over col: a = x [N*C, S], o = col [N*C, taps, P]
      const int32_t q = i % outs, t = (i / outs) % taps, nc = i / (outs * taps);
      const int32_t pos[3] = {q / (c.p[1] * c.p[2]), (q / c.p[2]) % c.p[1], q % c.p[2]};
      const int32_t k[3] = {t / (c.k[1] * c.k[2]), (t / c.k[2]) % c.k[1], t % c.k[2]};
      int32_t at[3];
      bool inside = true;
      for (int d = 0; d < 3; ++d) {
        at[d] = pos[d] * c.st[d] + k[d] * c.dl[d] - c.pad[d];
        inside = inside && at[d] >= 0 && at[d] < c.s[d];
      }
      o[i] = inside ? a[nc * plane + (at[0] * c.s[1] + at[1]) * c.s[2] + at[2]] : 0.0f;
    } else if (op >= 2) {  // i over y: a = x [N*C, S], o = y [N*C, P]
      const int32_t q = i % outs, nc = i / outs;
      const int32_t pos[3] = {q / (c.p[1] * c.p[2]), (q / c.p[2]) % c.p[1], q % c.p[2]};
      float v = op == 3 ? __uint_as_float(0xff800000u) : 0.0f;
      for (int32_t t = 0; t < taps; ++t) {
        const int32_t k[3] = {t / (c.k[1] * c.k[2]), (t / c.k[2]) % c.k[1], t % c.k[2]};
        int32_t at[3];
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
          at[d] = pos[d] * c.st[d] + k[d] * c.dl[d] - c.pad[d];
          inside = inside && at[d] >= 0 && at[d] < c.s[d];
        }
        if (!inside) continue;
        const float e = a[nc * plane + (at[0] * c.s[1] + at[1]) * c.s[2] + at[2]];
        v = op == 3 ? fmaxf(v, e) : v + e;
      }
      o[i] = v;
    } else {  // i over x: a = col, o = x; the taps that read it, in order
      const int32_t s = i % plane, nc = i / plane;
      const int32_t at[3] = {s / (c.s[1] * c.s[2]), (s / c.s[2]) % c.s[1], s % c.s[2]};
      float sum = 0.0f;
      for (int32_t t = 0; t < taps; ++t) {
        const int32_t k[3] = {t / (c.k[1] * c.k[2]), (t / c.k[2]) % c.k[1], t % c.k[2]};
        int32_t pos[3];
        bool hit = true;
        for (int d = 0; d < 3; ++d) {
          const int32_t q = at[d] + c.pad[d] - k[d] * c.dl[d];
          hit = hit && q >= 0 && q % c.st[d] == 0;
          pos[d] = hit ? q / c.st[d] : 0;
          hit = hit && pos[d] < c.p[d];
        }
        if (!hit) continue;
        sum += a[(nc * taps + t) * outs + (pos[0] * c.p[1] + pos[1]) * c.p[2] + pos[2]];
      }
      o[i] = sum;
    }
  }
}

// ---------------------------------------------------------------------------
// kArgSort (argsort.comp): each element's rank in its line (the elements
// before it: smaller ones, or equal ones of lower index; descending
// reverses the order; NaN is greater than every number) is where its index
// goes. x: the line's length, y: the stride between its elements; op bit
// 0 descending, bit 1 i32.

__device__ __forceinline__ bool LessF32(float a, float b) {
  if (a != a) return false;
  if (b != b) return true;
  return a < b;
}

__global__ void ArgSortKernel(const void* in, int32_t* o, uint32_t n, uint32_t op, int32_t dim,
                              int32_t inner) {
  const bool descending = (op & 1u) != 0, ints = (op & 2u) != 0;
  const auto* af = static_cast<const float*>(in);
  const auto* ai = static_cast<const int32_t*>(in);
  for (uint32_t item = FirstItem(); item < n; item += GridStride()) {
    const int32_t i = static_cast<int32_t>(item);
    const int32_t r = i % inner, k = (i / inner) % dim, outer = i / (inner * dim);
    const int32_t base = outer * dim * inner + r;
    int32_t rank = 0;
    if (ints) {
      const int32_t v = ai[base + k * inner];
      for (int32_t j = 0; j < dim; ++j) {
        const int32_t u = ai[base + j * inner];
        const bool before = descending ? u > v : u < v;
        rank += (before || (u == v && j < k)) ? 1 : 0;
      }
    } else {
      const float v = af[base + k * inner];
      const bool vnan = v != v;
      for (int32_t j = 0; j < dim; ++j) {
        const float u = af[base + j * inner];
        const bool equal = (u != u && vnan) || u == v;
        const bool before = descending ? LessF32(v, u) : LessF32(u, v);
        rank += (before || (equal && j < k)) ? 1 : 0;
      }
    }
    o[base + rank * inner] = k;
  }
}

// ---------------------------------------------------------------------------
// kFusedF32 (fused_f32.comp), its operands resolved on the host: each
// thread evaluates the program op by op per element in registers (values
// 0..k-1 the ops', k..k+ni-1 the inputs'), then stores, after every read
// of the element (a store may share its buffer with an input).

struct FusedProgram {
  const float* in[dispatch::kMaxFusedInputs];
  float* out[dispatch::kMaxFusedStores];
  uint32_t rows[dispatch::kMaxFusedInputs];  // 0: dense; L: read at i % L
  uint8_t binary[dispatch::kMaxFusedOps];
  uint8_t code[dispatch::kMaxFusedOps];
  uint8_t src0[dispatch::kMaxFusedOps];
  uint8_t src1[dispatch::kMaxFusedOps];
  uint8_t store_op[dispatch::kMaxFusedStores];
  int32_t k, ni, ns;
};

__global__ void FusedF32Kernel(FusedProgram f, uint32_t n) {
  float value[dispatch::kMaxFusedOps + dispatch::kMaxFusedInputs];
  for (uint32_t i = FirstItem(); i < n; i += GridStride()) {
    for (int j = 0; j < f.ni; ++j) value[f.k + j] = f.in[j][f.rows[j] == 0 ? i : i % f.rows[j]];
    for (int t = 0; t < f.k; ++t) {
      const float x = value[f.src0[t]];
      value[t] = f.binary[t] != 0 ? BinaryF32(f.code[t], x, value[f.src1[t]])
                                  : UnaryF32(f.code[t], x);
    }
    for (int s = 0; s < f.ns; ++s) f.out[s][i] = value[f.store_op[s]];
  }
}

// Keeps the GPU busy until `nanos` have passed on its global timer.
__global__ void DelayKernel(uint64_t nanos) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanos);
}

// ---------------------------------------------------------------------------
// Host side.

cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }

uint32_t Blocks(uint32_t n) {
  return std::clamp<uint32_t>((n + kBlock - 1) / kBlock, 1, kMaxBlocks);
}

void SetError(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
}

// The launch just enqueued: 0, or its error named after `what`.
int LaunchResult(const char* what, std::string* error) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  SetError(error, std::string("cuda kernel ") + what + ": " + cudaGetErrorString(e));
  return static_cast<int>(e);
}

int Invalid(Kernel kernel, const std::string& why, std::string* error) {
  SetError(error, std::string("cuda kernel ") + dispatch::KernelName(kernel) + ": " + why);
  return static_cast<int>(cudaErrorInvalidValue);
}

// Enqueues a one-dimensional kernel over n items (nothing when n is 0).
template <typename... Params, typename... Args>
int Enqueue1D(Kernel kernel, void (*fn)(Params...), uint32_t n, cudaStream_t stream,
              std::string* error, Args... args) {
  if (n == 0) return 0;
  fn<<<Blocks(n), kBlock, 0, stream>>>(args...);
  return LaunchResult(dispatch::KernelName(kernel), error);
}

template <typename T>
const T* In(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* Out(void* p) {
  return static_cast<T*>(p);
}

// A rank of a strided kernel's parameter block within kMaxRank (the
// readers below copy at most kMaxRank dimensions; Launch refuses more).
bool RankOk(int32_t rank) { return rank >= 0 && rank <= kMaxRank; }

CopyParams ReadCopyParams(const int32_t* h) {
  CopyParams p{};
  p.rank = h[0];
  p.src_base = h[1];
  p.dst_base = h[2];
  p.mode = h[3];
  for (int k = 0; k < std::min(p.rank, kMaxRank); ++k) {
    p.dims[k] = h[4 + k];
    p.src[k] = h[12 + k];
    p.dst[k] = h[20 + k];
    if (p.mode == 1) {
      p.lo[k] = h[28 + k];
      p.src_dims[k] = h[36 + k];
    }
  }
  return p;
}

ReduceParams ReadReduceParams(const int32_t* h) {
  ReduceParams p{};
  p.kept = h[0];
  p.red = h[1];
  p.count = h[2];
  for (int k = 0; k < std::min(p.kept, kMaxRank); ++k) {
    p.kept_dims[k] = h[4 + k];
    p.kept_strides[k] = h[12 + k];
  }
  for (int k = 0; k < std::min(p.red, kMaxRank); ++k) {
    p.red_dims[k] = h[20 + k];
    p.red_strides[k] = h[28 + k];
  }
  return p;
}

int LaunchFused(const KernelArgs& args, cudaStream_t stream, std::string* error) {
  const Kernel kernel = Kernel::kFusedF32;
  if (args.n == 0) return 0;
  if (args.table == nullptr) return Invalid(kernel, "no argument table", error);
  const int32_t* h = args.host_params;
  FusedProgram f{};
  f.k = h[0];
  f.ni = h[1];
  f.ns = h[2];
  if (f.k < 0 || f.k > dispatch::kMaxFusedOps || f.ni < 0 || f.ni > dispatch::kMaxFusedInputs ||
      f.ns < 0 || f.ns > dispatch::kMaxFusedStores) {
    return Invalid(kernel, "ops, inputs or stores past the kernel's bounds", error);
  }
  // Slot and byte offset (low, high 32 bits) to a device address.
  const auto resolve = [&](int32_t slot, int32_t lo, int32_t hi, char** at) {
    if (slot < 0 || slot >= args.table_size || args.table[slot] == nullptr) return false;
    const uint64_t offset = (uint64_t{static_cast<uint32_t>(hi)} << 32) | static_cast<uint32_t>(lo);
    *at = static_cast<char*>(const_cast<void*>(args.table[slot])) + offset;
    return true;
  };
  for (int j = 0; j < f.ni; ++j) {
    const int32_t* e = h + 3 + 4 * j;
    char* at = nullptr;
    if (!resolve(e[0], e[1], e[2], &at)) {
      return Invalid(kernel, "input " + std::to_string(j) + " names no buffer", error);
    }
    f.in[j] = reinterpret_cast<const float*>(at);
    f.rows[j] = static_cast<uint32_t>(e[3]);
  }
  const int32_t* ops = h + 3 + 4 * f.ni;
  // An operand: an earlier op's value, or an input (k + j).
  const auto operand_ok = [&](int t, int32_t s) {
    return (s >= 0 && s < t) || (s >= f.k && s < f.k + f.ni);
  };
  for (int t = 0; t < f.k; ++t) {
    const int32_t* e = ops + 4 * t;
    f.binary[t] = e[0] != 0 ? 1 : 0;
    f.code[t] = static_cast<uint8_t>(e[1]);
    if (e[1] < 0 || e[1] > 15 || !operand_ok(t, e[2]) || (e[0] != 0 && !operand_ok(t, e[3]))) {
      return Invalid(kernel, "op " + std::to_string(t) + " is malformed", error);
    }
    f.src0[t] = static_cast<uint8_t>(e[2]);
    f.src1[t] = static_cast<uint8_t>(e[0] != 0 ? e[3] : 0);
  }
  const int32_t* stores = ops + 4 * f.k;
  for (int s = 0; s < f.ns; ++s) {
    const int32_t* e = stores + 4 * s;
    char* at = nullptr;
    if (e[0] < 0 || e[0] >= f.k || !resolve(e[1], e[2], e[3], &at)) {
      return Invalid(kernel, "store " + std::to_string(s) + " is malformed", error);
    }
    f.store_op[s] = static_cast<uint8_t>(e[0]);
    f.out[s] = reinterpret_cast<float*>(at);
  }
  return Enqueue1D(kernel, FusedF32Kernel, args.n, stream, error, f, args.n);
}

}  // namespace

namespace internal {
// kernels_matmul.cu: the matrix products (kMatmulF32 and its variants on
// cuBLASLt, kMatmulI32), as Launch; the parameter block on the host.
int LaunchMatmul(dispatch::Kernel kernel, const KernelArgs& args, const Libraries& libs,
                 void* stream, std::string* error);
}  // namespace internal

int Launch(dispatch::Kernel kernel, const KernelArgs& args, const Libraries& libs, void* stream,
           std::string* error) {
  const cudaStream_t s = Stream(stream);
  const uint32_t n = args.n;
  const void* a = args.a;
  const void* b = args.b;
  const void* c = args.c;
  void* out = args.out;
  switch (kernel) {
    case Kernel::kCopyB32:
    case Kernel::kCopyB8:
    case Kernel::kReduceF32:
    case Kernel::kReduceI32:
    case Kernel::kMatmulF32:
    case Kernel::kMatmulF32Cpu:
    case Kernel::kMatmulF32Large:
    case Kernel::kMatmulI32:
    case Kernel::kGatherB32:
    case Kernel::kGatherB8:
    case Kernel::kScatterAddF32:
    case Kernel::kScatterAddI32:
    case Kernel::kConvF32:
    case Kernel::kFusedF32:
      if (args.host_params == nullptr) return Invalid(kernel, "no parameter block", error);
      break;
    default:
      break;
  }
  switch (kernel) {
    case Kernel::kBinaryF32:
      return Enqueue1D(kernel, BinaryF32Kernel, n, s, error, In<float>(a), In<float>(b),
                       Out<float>(out), n, args.op, args.x, args.y);
    case Kernel::kBinaryI32:
      return Enqueue1D(kernel, BinaryI32Kernel, n, s, error, In<int32_t>(a), In<int32_t>(b),
                       Out<int32_t>(out), n, args.op);
    case Kernel::kUnaryF32:
      return Enqueue1D(kernel, UnaryF32Kernel, n, s, error, In<float>(a), Out<float>(out), n,
                       args.op);
    case Kernel::kUnaryI32:
      return Enqueue1D(kernel, UnaryI32Kernel, n, s, error, In<int32_t>(a), Out<int32_t>(out), n,
                       args.op);
    case Kernel::kCompareF32:
      return Enqueue1D(kernel, CompareKernel<float>, n, s, error, In<float>(a), In<float>(b),
                       Out<uint8_t>(out), n, args.op);
    case Kernel::kCompareI32:
      return Enqueue1D(kernel, CompareKernel<int32_t>, n, s, error, In<int32_t>(a),
                       In<int32_t>(b), Out<uint8_t>(out), n, args.op);
    case Kernel::kCompareU8:
      return Enqueue1D(kernel, CompareKernel<uint8_t>, n, s, error, In<uint8_t>(a),
                       In<uint8_t>(b), Out<uint8_t>(out), n, args.op);
    case Kernel::kSelectB32:
      return Enqueue1D(kernel, SelectKernel<uint32_t>, n, s, error, In<uint8_t>(a),
                       In<uint32_t>(b), In<uint32_t>(c), Out<uint32_t>(out), n);
    case Kernel::kSelectB8:
      return Enqueue1D(kernel, SelectKernel<uint8_t>, n, s, error, In<uint8_t>(a), In<uint8_t>(b),
                       In<uint8_t>(c), Out<uint8_t>(out), n);
    case Kernel::kConvert:
      return Enqueue1D(kernel, ConvertKernel, n, s, error, a, out, n, args.x, args.y);
    case Kernel::kIota:
      if (n > 0 && (args.x == 0 || args.y == 0)) return Invalid(kernel, "x or y is 0", error);
      return Enqueue1D(kernel, IotaKernel, n, s, error, out, n, args.op, args.x, args.y);
    case Kernel::kCopyB32:
    case Kernel::kCopyB8: {
      const CopyParams p = ReadCopyParams(args.host_params);
      if (!RankOk(p.rank)) return Invalid(kernel, "rank past kMaxRank", error);
      if (kernel == Kernel::kCopyB32) {
        return Enqueue1D(kernel, CopyKernel<uint32_t>, n, s, error, In<uint32_t>(a),
                         In<uint32_t>(b), Out<uint32_t>(out), n, p);
      }
      return Enqueue1D(kernel, CopyKernel<uint8_t>, n, s, error, In<uint8_t>(a), In<uint8_t>(b),
                       Out<uint8_t>(out), n, p);
    }
    case Kernel::kReduceF32:
    case Kernel::kReduceI32: {
      const ReduceParams p = ReadReduceParams(args.host_params);
      if (!RankOk(p.kept) || !RankOk(p.red)) return Invalid(kernel, "rank past kMaxRank", error);
      if (n > 0 && args.x == 0) return Invalid(kernel, "x (result elements) is 0", error);
      if (kernel == Kernel::kReduceF32) {
        return Enqueue1D(kernel, ReduceKernel<float>, n, s, error, In<float>(a), Out<float>(out),
                         n, args.op, args.x, args.y, p, -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::infinity());
      }
      return Enqueue1D(kernel, ReduceKernel<int32_t>, n, s, error, In<int32_t>(a),
                       Out<int32_t>(out), n, args.op, args.x, args.y, p, INT32_MIN, INT32_MAX);
    }
    case Kernel::kMatmulF32:
    case Kernel::kMatmulF32Cpu:
    case Kernel::kMatmulF32Large:
    case Kernel::kMatmulI32:
      return internal::LaunchMatmul(kernel, args, libs, stream, error);
    case Kernel::kGatherB32:
    case Kernel::kGatherB8: {
      const int32_t* h = args.host_params;
      const IndexParams p{h[0], h[1], h[2], h[3]};
      if (kernel == Kernel::kGatherB32) {
        return Enqueue1D(kernel, GatherKernel<uint32_t>, n, s, error, In<uint32_t>(a),
                         In<int32_t>(b), Out<uint32_t>(out), n, p);
      }
      return Enqueue1D(kernel, GatherKernel<uint8_t>, n, s, error, In<uint8_t>(a), In<int32_t>(b),
                       Out<uint8_t>(out), n, p);
    }
    case Kernel::kScatterAddF32:
    case Kernel::kScatterAddI32: {
      const int32_t* h = args.host_params;
      const IndexParams p{h[0], h[1], h[2], h[3]};
      if (n > 0 && args.x == 0) return Invalid(kernel, "x (result elements) is 0", error);
      if (kernel == Kernel::kScatterAddF32) {
        return Enqueue1D(kernel, ScatterAddKernel<float>, n, s, error, In<float>(a),
                         In<int32_t>(b), In<float>(c), Out<float>(out), n, args.x, args.y, p);
      }
      return Enqueue1D(kernel, ScatterAddKernel<int32_t>, n, s, error, In<int32_t>(a),
                       In<int32_t>(b), In<int32_t>(c), Out<int32_t>(out), n, args.x, args.y, p);
    }
    case Kernel::kRng:
      return Enqueue1D(kernel, RngKernel, n, s, error, In<int32_t>(a), Out<float>(out), n,
                       args.op);
    case Kernel::kRowsF32:
    case Kernel::kRowsF32Cpu:
      if (n == 0) return 0;
      RowsF32Kernel<<<std::min<uint32_t>(n, 1u << 20), kBlock, 0, s>>>(
          In<float>(a), In<float>(b), In<float>(c), Out<float>(out), n, args.op,
          static_cast<int32_t>(args.x));
      return LaunchResult(dispatch::KernelName(kernel), error);
    case Kernel::kConvF32: {
      const int32_t* h = args.host_params;
      ConvParams p;
      for (int d = 0; d < 3; ++d) {
        p.s[d] = h[2 + d];
        p.k[d] = h[5 + d];
        p.p[d] = h[8 + d];
        p.st[d] = h[11 + d];
        p.dl[d] = h[14 + d];
        p.pad[d] = h[17 + d];
      }
      return Enqueue1D(kernel, ConvF32Kernel, n, s, error, In<float>(a), Out<float>(out), n,
                       args.op, p);
    }
    case Kernel::kArgSort:
      return Enqueue1D(kernel, ArgSortKernel, n, s, error, a, Out<int32_t>(out), n, args.op,
                       static_cast<int32_t>(args.x), static_cast<int32_t>(args.y));
    case Kernel::kFusedF32:
      return LaunchFused(args, s, error);
    case Kernel::kMembersF32:
    case Kernel::kMembersI32:
      SetError(error, "the cuda kind reduces collectives through the host");
      return static_cast<int>(cudaErrorNotSupported);
    case Kernel::kNumKernels:
      break;
  }
  return Invalid(kernel, "no such kernel", error);
}

int LaunchDelay(int64_t micros, void* stream, std::string* error) {
  if (micros <= 0) return 0;
  const uint64_t nanos =
      static_cast<uint64_t>(std::min<int64_t>(micros, INT64_MAX / 1000)) * 1000;
  DelayKernel<<<1, 1, 0, Stream(stream)>>>(nanos);
  return LaunchResult("delay", error);
}

}  // namespace causeway::backend::cuda
