#include "causeway/backend/cpu/kernels.h"

// Each device computes on one thread: keep Eigen single-threaded even if some
// build turns on OpenMP. f32 GEMM goes to OpenBLAS (chosen by measurement,
// see docs/IR.md), which InitBlas makes single-threaded.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#ifdef EIGEN_USE_BLAS
#undef EIGEN_USE_BLAS
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "unsupported/Eigen/SpecialFunctions"
#include "causeway/base/check.h"
#include "causeway/ir/elements.h"

extern "C" {
#include <cblas.h>
}

namespace causeway::backend::cpu::kernels {
namespace {

using ir::DType;
using ir::OpKind;

template <typename T>
using ConstArray = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using MutArray = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstMatrix =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename T>
using MutMatrix =
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Arithmetic on f32, or on i32 reinterpreted as uint32 so that overflow
// wraps instead of being undefined (int32 and uint32 may alias).
template <typename T>
void BinaryArith(OpKind op, const void* a_ptr, const void* b_ptr, void* out_ptr,
                 int64_t n) {
  ConstArray<T> a(static_cast<const T*>(a_ptr), n);
  ConstArray<T> b(static_cast<const T*>(b_ptr), n);
  MutArray<T> out(static_cast<T*>(out_ptr), n);
  switch (op) {
    case OpKind::kAdd:
      out = a + b;
      return;
    case OpKind::kSub:
      out = a - b;
      return;
    case OpKind::kMul:
      out = a * b;
      return;
    default:
      CW_CHECK(false) << "not an arithmetic op: " << ir::OpName(op);
  }
}

void DivI32(const int32_t* a, const int32_t* b, int32_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (b[i] == 0) {
      out[i] = -1;
    } else if (b[i] == -1 && a[i] == std::numeric_limits<int32_t>::min()) {
      out[i] = a[i];
    } else {
      out[i] = a[i] / b[i];
    }
  }
}

template <typename T>
void Min(const void* a_ptr, const void* b_ptr, void* out_ptr, int64_t n) {
  ConstArray<T> a(static_cast<const T*>(a_ptr), n);
  ConstArray<T> b(static_cast<const T*>(b_ptr), n);
  MutArray<T> out(static_cast<T*>(out_ptr), n);
  out = a.min(b);
}

template <typename T>
void Max(const void* a_ptr, const void* b_ptr, void* out_ptr, int64_t n) {
  ConstArray<T> a(static_cast<const T*>(a_ptr), n);
  ConstArray<T> b(static_cast<const T*>(b_ptr), n);
  MutArray<T> out(static_cast<T*>(out_ptr), n);
  out = a.max(b);
}

// Copies `src`, read with per-result-dimension element strides
// `src_strides` (0 repeats an element), into the dense row-major `dst` of
// shape `dims`.
template <typename T>
void StridedGather(const T* src, absl::Span<const int64_t> src_strides,
                   absl::Span<const int64_t> dims, T* dst) {
  const size_t rank = dims.size();
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  const int64_t inner = dims[rank - 1];
  const int64_t inner_stride = src_strides[rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  int64_t src_offset = 0;
  while (true) {
    const T* s = src + src_offset;
    if (inner_stride == 1) {
      std::memcpy(dst, s, static_cast<size_t>(inner) * sizeof(T));
    } else if (inner_stride == 0) {
      std::fill(dst, dst + inner, *s);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = s[j * inner_stride];
    }
    dst += inner;
    // Advance the multi-index over the outer dimensions.
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      src_offset += src_strides[d];
      if (++index[d] < dims[d]) break;
      src_offset -= src_strides[d] * dims[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

void Gather(DType dtype, const void* src, absl::Span<const int64_t> src_strides,
            absl::Span<const int64_t> dims, void* dst) {
  switch (ir::ByteSize(dtype)) {
    case 1:
      return StridedGather(static_cast<const uint8_t*>(src), src_strides, dims,
                           static_cast<uint8_t*>(dst));
    case 2:
      return StridedGather(static_cast<const uint16_t*>(src), src_strides, dims,
                           static_cast<uint16_t*>(dst));
    case 4:
      return StridedGather(static_cast<const uint32_t*>(src), src_strides, dims,
                           static_cast<uint32_t*>(dst));
    case 8:
      return StridedGather(static_cast<const uint64_t*>(src), src_strides, dims,
                           static_cast<uint64_t*>(dst));
  }
  CW_CHECK(false) << "no element of " << ir::ByteSize(dtype) << " bytes";
}

// Adds every element of `src` (shape `dims`, dense) into dst at offset
// sum(index[d] * dst_strides[d]); dst_strides is 0 along reduced axes.
template <typename T>
void ScatterAdd(const T* src, absl::Span<const int64_t> dims,
                absl::Span<const int64_t> dst_strides, T* dst) {
  const size_t rank = dims.size();
  if (rank == 0) {
    dst[0] += src[0];
    return;
  }
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  const int64_t inner = dims[rank - 1];
  const int64_t inner_stride = dst_strides[rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  int64_t dst_offset = 0;
  while (true) {
    T* o = dst + dst_offset;
    // The two common cases through Eigen, vectorised: a row summed to one
    // value (its partial sums in vector lanes, so in a fixed order other
    // than left to right), and a row added to a row of the result (bias
    // gradients: sums over the leading axes).
    if (inner_stride == 0) {
      *o += ConstArray<T>(src, inner).sum();
    } else if (inner_stride == 1) {
      MutArray<T>(o, inner) += ConstArray<T>(src, inner);
    } else {
      for (int64_t j = 0; j < inner; ++j) o[j * inner_stride] += src[j];
    }
    src += inner;
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      dst_offset += dst_strides[d];
      if (++index[d] < dims[d]) break;
      dst_offset -= dst_strides[d] * dims[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

}  // namespace

void Binary(OpKind op, DType dtype, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return;
  const bool f32 = dtype == DType::kF32;
  CW_CHECK(f32 || dtype == DType::kI32) << "binary op on " << ir::DTypeName(dtype);
  switch (op) {
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
      if (f32) return BinaryArith<float>(op, a, b, out, n);
      return BinaryArith<uint32_t>(op, a, b, out, n);
    case OpKind::kDiv:
      if (f32) {
        MutArray<float>(static_cast<float*>(out), n) =
            ConstArray<float>(static_cast<const float*>(a), n) /
            ConstArray<float>(static_cast<const float*>(b), n);
        return;
      }
      return DivI32(static_cast<const int32_t*>(a), static_cast<const int32_t*>(b),
                    static_cast<int32_t*>(out), n);
    case OpKind::kMax:
      if (f32) return Max<float>(a, b, out, n);
      return Max<int32_t>(a, b, out, n);
    case OpKind::kMin:
      if (f32) return Min<float>(a, b, out, n);
      return Min<int32_t>(a, b, out, n);
    case OpKind::kPow:
      CW_CHECK(f32) << "pow on i32";
      MutArray<float>(static_cast<float*>(out), n) =
          ConstArray<float>(static_cast<const float*>(a), n)
              .pow(ConstArray<float>(static_cast<const float*>(b), n));
      return;
    default:
      CW_CHECK(false) << "not a binary op: " << ir::OpName(op);
  }
}

namespace {

// out = x OP y elementwise over equal-length Eigen expressions.
template <typename X, typename Y, typename Out>
void Arith(OpKind op, const X& x, const Y& y, Out&& out) {
  switch (op) {
    case OpKind::kAdd:
      out = x + y;
      return;
    case OpKind::kSub:
      out = x - y;
      return;
    case OpKind::kMul:
      out = x * y;
      return;
    case OpKind::kDiv:
      out = x / y;
      return;
    case OpKind::kMax:
      out = x.max(y);
      return;
    case OpKind::kMin:
      out = x.min(y);
      return;
    default:
      CW_CHECK(false) << "not an arithmetic op: " << ir::OpName(op);
  }
}

}  // namespace

void BinaryRepeated(OpKind op, const float* a, int64_t a_row, const float* b, int64_t b_row,
                    float* out, int64_t n) {
  if (n == 0) return;
  CW_CHECK(a_row == 0 || b_row == 0) << "both operands repeated";
  const int64_t len = a_row > 0 ? a_row : b_row;
  if (len == 0) return Binary(op, DType::kF32, a, b, out, n);
  MutArray<float> o(out, n);
  if (len == 1) {
    // A scalar: Eigen broadcasts it with Constant, vectorised.
    if (a_row == 1) {
      Arith(op, ConstArray<float>::Constant(n, *a), ConstArray<float>(b, n), o);
    } else {
      Arith(op, ConstArray<float>(a, n), ConstArray<float>::Constant(n, *b), o);
    }
    return;
  }
  const float* row = a_row > 0 ? a : b;
  const float* dense = a_row > 0 ? b : a;
  const ConstArray<float> r(row, len);
  for (int64_t i = 0; i < n; i += len) {
    const ConstArray<float> d(dense + i, len);
    MutArray<float> oi(out + i, len);
    if (a_row > 0) {
      Arith(op, r, d, oi);
    } else {
      Arith(op, d, r, oi);
    }
  }
}

void Unary(OpKind op, DType dtype, const void* a, void* out, int64_t n) {
  if (n == 0) return;
  if (dtype == DType::kI32) {
    const int32_t* x = static_cast<const int32_t*>(a);
    int32_t* y = static_cast<int32_t*>(out);
    switch (op) {
      case OpKind::kNeg:
        MutArray<uint32_t>(static_cast<uint32_t*>(out), n) =
            uint32_t{0} - ConstArray<uint32_t>(static_cast<const uint32_t*>(a), n);
        return;
      case OpKind::kAbs:  // wraps: abs(INT32_MIN) == INT32_MIN
        for (int64_t i = 0; i < n; ++i) {
          y[i] = x[i] < 0 ? static_cast<int32_t>(0u - static_cast<uint32_t>(x[i])) : x[i];
        }
        return;
      case OpKind::kSign:
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] > 0) - (x[i] < 0);
        return;
      default:
        CW_CHECK(false) << ir::OpName(op) << " on i32";
    }
  }
  CW_CHECK(dtype == DType::kF32) << ir::OpName(op) << " on " << ir::DTypeName(dtype);
  ConstArray<float> x(static_cast<const float*>(a), n);
  MutArray<float> y(static_cast<float*>(out), n);
  switch (op) {
    case OpKind::kNeg:
      y = -x;
      return;
    case OpKind::kExp:
      y = x.exp();
      return;
    case OpKind::kAbs:
      y = x.abs();
      return;
    case OpKind::kLog:
      y = x.log();
      return;
    case OpKind::kTanh:
      y = x.tanh();
      return;
    case OpKind::kSin:
      y = x.sin();
      return;
    case OpKind::kCos:
      y = x.cos();
      return;
    case OpKind::kAtan:
      y = x.atan();
      return;
    case OpKind::kErf:
      y = x.erf();
      return;
    case OpKind::kLogistic:
      y = x.logistic();
      return;
    case OpKind::kSqrt:
      y = x.sqrt();
      return;
    case OpKind::kRsqrt:
      y = x.rsqrt();
      return;
    case OpKind::kSign:
      y = x.sign();
      return;
    case OpKind::kFloor:
      y = x.floor();
      return;
    default:
      CW_CHECK(false) << "not a unary op: " << ir::OpName(op);
  }
}

void BroadcastInDim(const ir::Shape& operand, absl::Span<const int64_t> operand_dims,
                    const ir::Shape& result, const void* in, void* out) {
  const std::vector<int64_t> operand_strides = ir::RowMajorStrides(operand.dims);
  std::vector<int64_t> src_strides(result.dims.size(), 0);
  for (size_t i = 0; i < operand_dims.size(); ++i) {
    if (operand.dims[i] != 1) src_strides[operand_dims[i]] = operand_strides[i];
  }
  Gather(result.dtype, in, src_strides, result.dims, out);
}

void Transpose(const ir::Shape& operand, absl::Span<const int64_t> perm, const void* in,
               void* out) {
  const std::vector<int64_t> operand_strides = ir::RowMajorStrides(operand.dims);
  std::vector<int64_t> src_strides(perm.size());
  std::vector<int64_t> result_dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    src_strides[i] = operand_strides[perm[i]];
    result_dims[i] = operand.dims[perm[i]];
  }
  Gather(operand.dtype, in, src_strides, result_dims, out);
}

void ReduceSum(const ir::Shape& operand, absl::Span<const int64_t> axes, const void* in,
               void* out) {
  std::vector<bool> reduced(operand.dims.size(), false);
  for (int64_t a : axes) reduced[a] = true;
  std::vector<int64_t> result_dims;
  for (size_t i = 0; i < operand.dims.size(); ++i) {
    if (!reduced[i]) result_dims.push_back(operand.dims[i]);
  }
  const std::vector<int64_t> result_strides = ir::RowMajorStrides(result_dims);
  std::vector<int64_t> dst_strides(operand.dims.size(), 0);
  for (size_t i = 0, r = 0; i < operand.dims.size(); ++i) {
    if (!reduced[i]) dst_strides[i] = result_strides[r++];
  }
  const ir::Shape result(operand.dtype, result_dims);
  std::memset(out, 0, static_cast<size_t>(result.byte_size()));
  if (operand.dtype == DType::kF32) {
    ScatterAdd(static_cast<const float*>(in), operand.dims, dst_strides,
               static_cast<float*>(out));
  } else {
    CW_CHECK(operand.dtype == DType::kI32) << "reduce_sum on "
                                           << ir::DTypeName(operand.dtype);
    ScatterAdd(static_cast<const uint32_t*>(in), operand.dims, dst_strides,
               static_cast<uint32_t*>(out));
  }
}

void Matmul(DType dtype, int64_t m, int64_t k, int64_t n, const void* a, const void* b,
            void* out) {
  if (m == 0 || n == 0) return;
  if (dtype == DType::kF32) {
    MutMatrix<float> c(static_cast<float*>(out), m, n);
    if (k == 0) {
      c.setZero();
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f,
                static_cast<const float*>(a), static_cast<blasint>(k),
                static_cast<const float*>(b), static_cast<blasint>(n), 0.0f,
                static_cast<float*>(out), static_cast<blasint>(n));
  } else {
    CW_CHECK(dtype == DType::kI32) << "matmul on " << ir::DTypeName(dtype);
    // Wrapping arithmetic: the low 32 bits of the product do not depend on
    // signedness.
    MutMatrix<uint32_t> c(static_cast<uint32_t*>(out), m, n);
    if (k == 0) {
      c.setZero();
      return;
    }
    c.noalias() = ConstMatrix<uint32_t>(static_cast<const uint32_t*>(a), m, k) *
                  ConstMatrix<uint32_t>(static_cast<const uint32_t*>(b), k, n);
  }
}

void Convert(DType from, DType to, const void* in, void* out, int64_t n) {
  ir::ConvertElements(from, to, in, out, n);
}

}  // namespace causeway::backend::cpu::kernels
