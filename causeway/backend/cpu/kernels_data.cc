// Kernels added with the complete op set: comparisons, selection,
// reductions, data movement (iota, slice, pad, concatenate, gather,
// scatter-add), dot_general over BLAS, and random numbers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>
#include <vector>

#include "causeway/backend/cpu/kernels.h"
#include "causeway/base/check.h"

extern "C" {
#include <cblas.h>
}

namespace causeway::backend::cpu::kernels {
namespace {

using ir::Comparison;
using ir::DType;
using ir::OpKind;

template <typename T>
void CompareLoop(Comparison cmp, const T* a, const T* b, uint8_t* out, int64_t n) {
  switch (cmp) {
    case Comparison::kEq:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] == b[i];
      return;
    case Comparison::kNe:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] != b[i];
      return;
    case Comparison::kLt:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] < b[i];
      return;
    case Comparison::kLe:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] <= b[i];
      return;
    case Comparison::kGt:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] > b[i];
      return;
    case Comparison::kGe:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] >= b[i];
      return;
  }
}

// Views `dims` as [outer, dims[d], inner] around dimension d.
struct Split3 {
  int64_t outer = 1, mid = 1, inner = 1;
};
Split3 SplitAt(absl::Span<const int64_t> dims, int64_t d) {
  Split3 s;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < d) s.outer *= dims[i];
    if (i == d) s.mid = dims[i];
    if (i > d) s.inner *= dims[i];
  }
  return s;
}

template <typename T>
void ReduceLoop(OpKind op, const ir::Shape& operand, absl::Span<const int64_t> axes,
                const T* in, T* out) {
  std::vector<bool> reduced(operand.dims.size(), false);
  for (int64_t a : axes) reduced[a] = true;
  std::vector<int64_t> result_dims;
  for (size_t i = 0; i < operand.dims.size(); ++i) {
    if (!reduced[i]) result_dims.push_back(operand.dims[i]);
  }
  const std::vector<int64_t> rs = ir::RowMajorStrides(result_dims);
  std::vector<int64_t> dst_strides(operand.dims.size(), 0);
  for (size_t i = 0, r = 0; i < operand.dims.size(); ++i) {
    if (!reduced[i]) dst_strides[i] = rs[r++];
  }
  const int64_t out_n = ir::Shape(operand.dtype, result_dims).num_elements();
  const T init = op == OpKind::kReduceMax   ? std::numeric_limits<T>::lowest()
                 : op == OpKind::kReduceMin ? std::numeric_limits<T>::max()
                                            : T(0);
  if constexpr (std::is_floating_point_v<T>) {
    const T inf = std::numeric_limits<T>::infinity();
    std::fill(out, out + out_n, op == OpKind::kReduceMax   ? -inf
                                : op == OpKind::kReduceMin ? inf
                                                           : T(0));
  } else {
    std::fill(out, out + out_n, init);
  }
  const int64_t n = operand.num_elements();
  if (n == 0) return;
  const int rank = operand.rank();
  std::vector<int64_t> index(rank, 0);
  int64_t dst = 0;
  for (int64_t i = 0; i < n; ++i) {
    T& o = out[dst];
    if (op == OpKind::kReduceSum) {
      o += in[i];
    } else if (op == OpKind::kReduceMax) {
      o = std::max(o, in[i]);
    } else {
      o = std::min(o, in[i]);
    }
    for (int d = rank - 1; d >= 0; --d) {
      dst += dst_strides[d];
      if (++index[d] < operand.dims[d]) break;
      dst -= dst_strides[d] * operand.dims[d];
      index[d] = 0;
    }
  }
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 random bits, from (seed, counter).
float UniformAt(int32_t seed, uint64_t counter) {
  const uint64_t key = SplitMix64(static_cast<uint64_t>(static_cast<uint32_t>(seed)) ^
                                  0xD1B54A32D192ED03ull);
  return static_cast<float>(SplitMix64(key ^ counter) >> 40) * (1.0f / 16777216.0f);
}

// Permutes `in` (shape `dims`) by `perm` into `tmp` unless perm is the
// identity; returns the data to use.
const float* Permuted(const float* in, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& perm, std::vector<float>& tmp) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return in;
  const ir::Shape shape(DType::kF32, dims);
  tmp.resize(static_cast<size_t>(shape.num_elements()));
  Transpose(shape, perm, in, tmp.data());
  return tmp.data();
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

std::vector<int64_t> FreeDims(int rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> free;
  for (int i = 0; i < rank; ++i) {
    if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
        std::find(contracting.begin(), contracting.end(), i) == contracting.end()) {
      free.push_back(i);
    }
  }
  return free;
}

template <typename T>
void SelectLoop(const uint8_t* p, const T* t, const T* f, T* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = p[i] ? t[i] : f[i];
}

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t p = 1;
  for (int64_t d : which) p *= dims[d];
  return p;
}

}  // namespace

void Compare(Comparison cmp, DType dtype, const void* a, const void* b, void* out,
             int64_t n) {
  uint8_t* o = static_cast<uint8_t*>(out);
  switch (dtype) {
    case DType::kF32:
      return CompareLoop(cmp, static_cast<const float*>(a), static_cast<const float*>(b), o,
                         n);
    case DType::kI32:
      return CompareLoop(cmp, static_cast<const int32_t*>(a),
                         static_cast<const int32_t*>(b), o, n);
    case DType::kPred:
      return CompareLoop(cmp, static_cast<const uint8_t*>(a),
                         static_cast<const uint8_t*>(b), o, n);
    default:
      CW_CHECK(false) << "compare on " << ir::DTypeName(dtype);
  }
}

void Select(const void* pred, const void* on_true, const void* on_false, void* out,
            int64_t n, int64_t element_bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(pred);
  switch (element_bytes) {
    case 1:
      return SelectLoop(p, static_cast<const uint8_t*>(on_true),
                        static_cast<const uint8_t*>(on_false), static_cast<uint8_t*>(out), n);
    case 2:
      return SelectLoop(p, static_cast<const uint16_t*>(on_true),
                        static_cast<const uint16_t*>(on_false), static_cast<uint16_t*>(out), n);
    case 4:
      return SelectLoop(p, static_cast<const uint32_t*>(on_true),
                        static_cast<const uint32_t*>(on_false), static_cast<uint32_t*>(out), n);
    case 8:
      return SelectLoop(p, static_cast<const uint64_t*>(on_true),
                        static_cast<const uint64_t*>(on_false), static_cast<uint64_t*>(out), n);
  }
  CW_CHECK(false) << "select of " << element_bytes << "-byte elements";
}

void Reduce(OpKind op, const ir::Shape& operand, absl::Span<const int64_t> axes,
            const void* in, void* out) {
  if (op == OpKind::kReduceSum) return ReduceSum(operand, axes, in, out);
  if (operand.dtype == DType::kF32) {
    ReduceLoop(op, operand, axes, static_cast<const float*>(in), static_cast<float*>(out));
  } else {
    CW_CHECK(operand.dtype == DType::kI32) << "reduce on " << ir::DTypeName(operand.dtype);
    ReduceLoop(op, operand, axes, static_cast<const int32_t*>(in),
               static_cast<int32_t*>(out));
  }
}

namespace {

// Sorts each line's indices by `key(index)`, stable.
template <typename T>
void ArgSortLines(const ir::Shape& operand, int64_t dimension, bool descending, const T* in,
                  int32_t* out) {
  const int64_t dim = operand.dims[static_cast<size_t>(dimension)];
  int64_t inner = 1;
  for (size_t k = static_cast<size_t>(dimension) + 1; k < operand.dims.size(); ++k) {
    inner *= operand.dims[k];
  }
  const int64_t outer = dim == 0 || inner == 0 ? 0 : operand.num_elements() / (dim * inner);
  // a before b: NaN counts as greater than every number.
  const auto less = [](T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return false;
      if (std::isnan(b)) return true;
    }
    return a < b;
  };
  std::vector<int32_t> order(static_cast<size_t>(dim));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r = 0; r < inner; ++r) {
      const T* line = in + o * dim * inner + r;
      for (int64_t k = 0; k < dim; ++k) order[static_cast<size_t>(k)] = static_cast<int32_t>(k);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const T va = line[a * inner], vb = line[b * inner];
        return descending ? less(vb, va) : less(va, vb);
      });
      int32_t* dst = out + o * dim * inner + r;
      for (int64_t k = 0; k < dim; ++k) dst[k * inner] = order[static_cast<size_t>(k)];
    }
  }
}

}  // namespace

void ArgSort(const ir::Shape& operand, int64_t dimension, bool descending, const void* in,
             int32_t* out) {
  if (operand.dtype == ir::DType::kF32) {
    ArgSortLines(operand, dimension, descending, static_cast<const float*>(in), out);
  } else {
    ArgSortLines(operand, dimension, descending, static_cast<const int32_t*>(in), out);
  }
}

void Iota(const ir::Shape& shape, int64_t dimension, void* out) {
  const Split3 s = SplitAt(shape.dims, dimension);
  int64_t i = 0;
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t m = 0; m < s.mid; ++m) {
      for (int64_t k = 0; k < s.inner; ++k, ++i) {
        if (shape.dtype == DType::kF32) {
          static_cast<float*>(out)[i] = static_cast<float>(m);
        } else {
          static_cast<int32_t*>(out)[i] = static_cast<int32_t>(m);
        }
      }
    }
  }
}

void Slice(const ir::Shape& operand, absl::Span<const int64_t> starts,
           absl::Span<const int64_t> steps, const ir::Shape& result, const void* in, void* out) {
  if (result.num_elements() == 0) return;
  std::vector<int64_t> strides = ir::RowMajorStrides(operand.dims);
  int64_t offset = 0;
  for (size_t i = 0; i < starts.size(); ++i) offset += starts[i] * strides[i];
  const int64_t eb = ir::ByteSize(operand.dtype);
  const std::byte* base = static_cast<const std::byte*>(in) + offset * eb;
  // Reuse the strided gather of Transpose with the identity permutation and
  // the operand's strides: a slice is a strided view.
  const int rank = operand.rank();
  if (rank == 0) {
    std::memcpy(out, base, static_cast<size_t>(eb));
    return;
  }
  // Steps scale the strides; the innermost one, if any, is a gather.
  const int64_t inner_step = steps.empty() ? 1 : steps[rank - 1];
  for (size_t i = 0; i < steps.size(); ++i) strides[i] *= steps[i];
  std::vector<int64_t> index(rank, 0);
  const int64_t inner = result.dims[rank - 1];
  std::byte* dst = static_cast<std::byte*>(out);
  const int64_t rows = result.num_elements() / inner;
  int64_t src = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (inner_step == 1) {
      std::memcpy(dst, base + src * eb, static_cast<size_t>(inner * eb));
    } else if (eb == 4) {
      const auto* from = reinterpret_cast<const uint32_t*>(base + src * eb);
      auto* to = reinterpret_cast<uint32_t*>(dst);
      for (int64_t j = 0; j < inner; ++j) to[j] = from[j * inner_step];
    } else if (eb == 1) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = base[src + j * inner_step];
    } else {
      for (int64_t j = 0; j < inner; ++j) {
        std::memcpy(dst + j * eb, base + (src + j * inner_step) * eb, static_cast<size_t>(eb));
      }
    }
    dst += inner * eb;
    for (int d = rank - 2; d >= 0; --d) {
      src += strides[d];
      if (++index[d] < result.dims[d]) break;
      src -= strides[d] * result.dims[d];
      index[d] = 0;
    }
  }
}

void CopyInto(const ir::Shape& part, const void* in, const ir::Shape& whole,
              absl::Span<const int64_t> offset, void* out) {
  if (part.num_elements() == 0) return;
  const std::vector<int64_t> strides = ir::RowMajorStrides(whole.dims);
  const int64_t eb = ir::ByteSize(part.dtype);
  int64_t base = 0;
  for (size_t i = 0; i < offset.size(); ++i) base += offset[i] * strides[i];
  const int rank = part.rank();
  if (rank == 0) {
    std::memcpy(out, in, static_cast<size_t>(eb));
    return;
  }
  const int64_t inner = part.dims[rank - 1];
  const int64_t rows = part.num_elements() / inner;
  std::vector<int64_t> index(rank, 0);
  const std::byte* src = static_cast<const std::byte*>(in);
  std::byte* dst_base = static_cast<std::byte*>(out) + base * eb;
  int64_t dst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst_base + dst * eb, src, static_cast<size_t>(inner * eb));
    src += inner * eb;
    for (int d = rank - 2; d >= 0; --d) {
      dst += strides[d];
      if (++index[d] < part.dims[d]) break;
      dst -= strides[d] * part.dims[d];
      index[d] = 0;
    }
  }
}

void Fill(const void* value, int64_t element_bytes, int64_t n, void* out) {
  // One typed store per element (not a memcpy call each).
  if (element_bytes == 4) {
    uint32_t v;
    std::memcpy(&v, value, 4);
    std::fill_n(static_cast<uint32_t*>(out), n, v);
    return;
  }
  if (element_bytes == 1) {
    std::memset(out, std::to_integer<int>(*static_cast<const std::byte*>(value)),
                static_cast<size_t>(n));
    return;
  }
  std::byte* o = static_cast<std::byte*>(out);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(o + i * element_bytes, value, static_cast<size_t>(element_bytes));
  }
}

void Gather(const ir::Shape& operand, int64_t dimension, const int32_t* indices,
            int64_t num_indices, const void* in, void* out) {
  const Split3 s = SplitAt(operand.dims, dimension);
  if (s.mid == 0) {
    // Nothing to gather from: the result has no elements unless there are
    // no indices either.
    return;
  }
  const int64_t row = s.inner * ir::ByteSize(operand.dtype);
  const std::byte* src = static_cast<const std::byte*>(in);
  std::byte* dst = static_cast<std::byte*>(out);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < num_indices; ++j) {
      const int64_t k = std::clamp<int64_t>(indices[j], 0, s.mid - 1);
      std::memcpy(dst, src + (o * s.mid + k) * row, static_cast<size_t>(row));
      dst += row;
    }
  }
}

void ScatterAdd(const ir::Shape& operand, int64_t dimension, const int32_t* indices,
                int64_t num_indices, const void* in, const void* updates, void* out) {
  std::memcpy(out, in, static_cast<size_t>(operand.byte_size()));
  const Split3 s = SplitAt(operand.dims, dimension);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < num_indices; ++j) {
      const int64_t k = indices[j];
      if (k < 0 || k >= s.mid) continue;
      const int64_t dst = (o * s.mid + k) * s.inner;
      const int64_t src = (o * num_indices + j) * s.inner;
      if (operand.dtype == DType::kF32) {
        float* d = static_cast<float*>(out) + dst;
        const float* u = static_cast<const float*>(updates) + src;
        for (int64_t i = 0; i < s.inner; ++i) d[i] += u[i];
      } else {
        uint32_t* d = static_cast<uint32_t*>(out) + dst;
        const uint32_t* u = static_cast<const uint32_t*>(updates) + src;
        for (int64_t i = 0; i < s.inner; ++i) d[i] += u[i];
      }
    }
  }
}

void DotGeneral(const ir::Instruction& inst, const ir::Shape& lhs, const ir::Shape& rhs,
                const void* a, const void* b, void* out) {
  const std::vector<int64_t> lf = FreeDims(lhs.rank(), inst.lhs_batch, inst.lhs_contracting);
  const std::vector<int64_t> rf = FreeDims(rhs.rank(), inst.rhs_batch, inst.rhs_contracting);
  const int64_t batch = Product(lhs.dims, inst.lhs_batch);
  const int64_t m = Product(lhs.dims, lf);
  const int64_t k = Product(lhs.dims, inst.lhs_contracting);
  const int64_t n = Product(rhs.dims, rf);
  if (batch * m * n == 0) return;
  if (lhs.dtype != DType::kF32) {
    // i32: permute to [B,M,K] x [B,K,N] and use the wrapping Matmul kernel.
    const std::vector<int64_t> pl = Concat({&inst.lhs_batch, &lf, &inst.lhs_contracting});
    const std::vector<int64_t> pr = Concat({&inst.rhs_batch, &inst.rhs_contracting, &rf});
    std::vector<int32_t> ta(static_cast<size_t>(lhs.num_elements()));
    std::vector<int32_t> tb(static_cast<size_t>(rhs.num_elements()));
    Transpose(lhs, pl, a, ta.data());
    Transpose(rhs, pr, b, tb.data());
    for (int64_t i = 0; i < batch; ++i) {
      Matmul(DType::kI32, m, k, n, ta.data() + i * m * k, tb.data() + i * k * n,
             static_cast<int32_t*>(out) + i * m * n);
    }
    return;
  }
  // f32: each operand is used in place when it is already [B,M,K] / [B,K,M]
  // (lhs) or [B,K,N] / [B,N,K] (rhs), with BLAS transposing; else permuted.
  std::vector<float> tmp_a, tmp_b;
  const float* pa;
  const float* pb;
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  const std::vector<int64_t> l_mk = Concat({&inst.lhs_batch, &lf, &inst.lhs_contracting});
  const std::vector<int64_t> l_km = Concat({&inst.lhs_batch, &inst.lhs_contracting, &lf});
  if (!IsIdentity(l_mk) && IsIdentity(l_km)) {
    pa = static_cast<const float*>(a);
    ta = CblasTrans;
  } else {
    pa = Permuted(static_cast<const float*>(a), lhs.dims, l_mk, tmp_a);
  }
  const std::vector<int64_t> r_kn = Concat({&inst.rhs_batch, &inst.rhs_contracting, &rf});
  const std::vector<int64_t> r_nk = Concat({&inst.rhs_batch, &rf, &inst.rhs_contracting});
  if (!IsIdentity(r_kn) && IsIdentity(r_nk)) {
    pb = static_cast<const float*>(b);
    tb = CblasTrans;
  } else {
    pb = Permuted(static_cast<const float*>(b), rhs.dims, r_kn, tmp_b);
  }
  float* c = static_cast<float*>(out);
  if (k == 0) {
    std::fill(c, c + batch * m * n, 0.0f);
    return;
  }
  const blasint lda = static_cast<blasint>(ta == CblasNoTrans ? k : m);
  const blasint ldb = static_cast<blasint>(tb == CblasNoTrans ? n : k);
  for (int64_t i = 0; i < batch; ++i) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0f, pa + i * m * k, lda, pb + i * k * n, ldb,
                0.0f, c + i * m * n, static_cast<blasint>(n));
  }
}

void RngUniform(int32_t seed, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = UniformAt(seed, static_cast<uint64_t>(i));
}

void RngNormal(int32_t seed, int64_t n, float* out) {
  // Box-Muller on two uniforms per element (only the cosine branch, so each
  // element depends on its own counter only).
  constexpr float kTwoPi = 6.283185307179586f;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = static_cast<uint64_t>(i) * 2;
    const float u1 = 1.0f - UniformAt(seed, c);  // (0, 1]
    const float u2 = UniformAt(seed, c + 1);
    out[i] = std::sqrt(-2.0f * std::log(u1)) * std::cos(kTwoPi * u2);
  }
}

void InitBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace causeway::backend::cpu::kernels
