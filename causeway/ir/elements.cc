#include "causeway/ir/elements.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "causeway/base/check.h"

namespace causeway::ir {
namespace {

// One tag per dtype: its storage type and how an element widens to a
// double (floats) or an int64_t (integers and pred) and narrows back.
struct F32 { using T = float; static constexpr bool kFloat = true; };
struct F16 { using T = uint16_t; static constexpr bool kFloat = true; };
struct BF16 { using T = uint16_t; static constexpr bool kFloat = true; };
struct I32 { using T = int32_t; static constexpr bool kFloat = false; };
struct I64 { using T = int64_t; static constexpr bool kFloat = false; };
struct I8 { using T = int8_t; static constexpr bool kFloat = false; };
struct U8 { using T = uint8_t; static constexpr bool kFloat = false; };
struct Pred { using T = uint8_t; static constexpr bool kFloat = false; };

template <typename Tag>
float LoadFloat(typename Tag::T v) {
  if constexpr (std::is_same_v<Tag, F16>) {
    return HalfToFloat(v);
  } else if constexpr (std::is_same_v<Tag, BF16>) {
    return BFloat16ToFloat(v);
  } else {
    return v;
  }
}

template <typename Tag>
typename Tag::T StoreFloat(float v) {
  if constexpr (std::is_same_v<Tag, F16>) {
    return FloatToHalf(v);
  } else if constexpr (std::is_same_v<Tag, BF16>) {
    return FloatToBFloat16(v);
  } else {
    return v;
  }
}

// A float truncated toward zero and saturated at To's range; NaN -> 0.
template <typename To>
To SaturateFloat(float v) {
  if (std::isnan(v)) return 0;
  // Both bounds are powers of two (or 0), so exact as floats.
  const float lo = static_cast<float>(std::numeric_limits<To>::min());
  const float hi_excl = std::ldexp(1.0f, std::numeric_limits<To>::digits);
  if (v <= lo) return std::numeric_limits<To>::min();
  if (v >= hi_excl) return std::numeric_limits<To>::max();
  return static_cast<To>(v);
}

template <typename From, typename To>
void Loop(const void* in_ptr, void* out_ptr, int64_t n) {
  const auto* in = static_cast<const typename From::T*>(in_ptr);
  auto* out = static_cast<typename To::T*>(out_ptr);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<To, Pred>) {
      if constexpr (From::kFloat) {
        out[i] = LoadFloat<From>(in[i]) != 0.0f ? 1 : 0;
      } else {
        out[i] = in[i] != 0 ? 1 : 0;
      }
    } else if constexpr (std::is_same_v<From, Pred>) {
      if constexpr (To::kFloat) {
        out[i] = StoreFloat<To>(in[i] != 0 ? 1.0f : 0.0f);
      } else {
        out[i] = in[i] != 0 ? 1 : 0;
      }
    } else if constexpr (From::kFloat && To::kFloat) {
      out[i] = StoreFloat<To>(LoadFloat<From>(in[i]));
    } else if constexpr (From::kFloat) {
      out[i] = SaturateFloat<typename To::T>(LoadFloat<From>(in[i]));
    } else if constexpr (To::kFloat) {
      out[i] = StoreFloat<To>(static_cast<float>(in[i]));
    } else {
      // Integer to integer: wraps through the unsigned type of To's width.
      using U = std::make_unsigned_t<typename To::T>;
      out[i] = static_cast<typename To::T>(static_cast<U>(in[i]));
    }
  }
}

template <typename From>
void ConvertFrom(DType to, const void* in, void* out, int64_t n) {
  switch (to) {
    case DType::kF32: return Loop<From, F32>(in, out, n);
    case DType::kI32: return Loop<From, I32>(in, out, n);
    case DType::kPred: return Loop<From, Pred>(in, out, n);
    case DType::kF16: return Loop<From, F16>(in, out, n);
    case DType::kBF16: return Loop<From, BF16>(in, out, n);
    case DType::kI64: return Loop<From, I64>(in, out, n);
    case DType::kI8: return Loop<From, I8>(in, out, n);
    case DType::kU8: return Loop<From, U8>(in, out, n);
  }
  CW_CHECK(false) << "convert to an invalid dtype " << static_cast<int>(to);
}

}  // namespace

float HalfToFloat(uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
}

uint16_t FloatToHalf(float value) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::half(value));
}

float BFloat16ToFloat(uint16_t bits) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
}

uint16_t FloatToBFloat16(float value) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(value));
}

void ConvertElements(DType from, DType to, const void* in, void* out, int64_t n) {
  if (n <= 0) return;
  if (from == to) {
    std::memcpy(out, in, static_cast<size_t>(n * ByteSize(from)));
    return;
  }
  switch (from) {
    case DType::kF32: return ConvertFrom<F32>(to, in, out, n);
    case DType::kI32: return ConvertFrom<I32>(to, in, out, n);
    case DType::kPred: return ConvertFrom<Pred>(to, in, out, n);
    case DType::kF16: return ConvertFrom<F16>(to, in, out, n);
    case DType::kBF16: return ConvertFrom<BF16>(to, in, out, n);
    case DType::kI64: return ConvertFrom<I64>(to, in, out, n);
    case DType::kI8: return ConvertFrom<I8>(to, in, out, n);
    case DType::kU8: return ConvertFrom<U8>(to, in, out, n);
  }
  CW_CHECK(false) << "convert from an invalid dtype " << static_cast<int>(from);
}

Literal ConvertLiteral(const Literal& literal, DType to) {
  Literal out(Shape(to, literal.shape().dims));
  ConvertElements(literal.shape().dtype, to, literal.data(), out.data(),
                  literal.shape().num_elements());
  return out;
}

double ElementAsDouble(const Literal& literal, int64_t i) {
  const DType dtype = literal.shape().dtype;
  const std::byte* p = literal.data() + i * ByteSize(dtype);
  if (IsFloating(dtype)) {
    float f;
    ConvertElements(dtype, DType::kF32, p, &f, 1);
    return f;
  }
  int64_t v;
  ConvertElements(dtype, DType::kI64, p, &v, 1);
  return static_cast<double>(v);
}

}  // namespace causeway::ir
