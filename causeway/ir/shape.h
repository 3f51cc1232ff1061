// Element types and static shapes of IR values and arrays.
#ifndef CAUSEWAY_IR_SHAPE_H_
#define CAUSEWAY_IR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace causeway::ir {

// Element types. f32, i32 and pred are computed on; the others are storage
// dtypes: arrays, parameters, constants and results hold them as such, and
// the ops that only move or pick elements (reshape, transpose, broadcast,
// slice, concatenate, pad, gather, select, convert, control flow) take them,
// while arithmetic runs in their compute dtype (ComputeDType), reached by a
// convert. New dtypes are appended: the numbers are serialized.
enum class DType { kF32, kI32, kPred, kF16, kBF16, kI64, kI8, kU8 };
inline constexpr int kNumDTypes = 8;

// True for the number of a DType (what a serialized dtype must be).
bool IsValidDType(int64_t value);
// Bytes per element (pred is stored as one byte).
int64_t ByteSize(DType dtype);
// "f32", "f16", "bf16", "i64", ...
const char* DTypeName(DType dtype);
// The dtype arithmetic on `dtype` runs in: f32 for f16 and bf16, i32 for
// i64, i8 and u8, the dtype itself otherwise.
DType ComputeDType(DType dtype);
// f16, bf16, i64, i8 or u8.
inline bool IsStorageOnly(DType dtype) { return ComputeDType(dtype) != dtype; }
// f32, f16 or bf16.
inline bool IsFloating(DType dtype) { return ComputeDType(dtype) == DType::kF32; }

// A dtype and static dimensions. A value type.
struct Shape {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  Shape() = default;
  Shape(DType d, std::vector<int64_t> ds) : dtype(d), dims(std::move(ds)) {}

  int rank() const { return static_cast<int>(dims.size()); }
  int64_t num_elements() const;
  int64_t byte_size() const { return num_elements() * ByteSize(dtype); }
  // "f32[2,3]".
  std::string ToString() const;

  friend bool operator==(const Shape&, const Shape&) = default;
};

// Largest number of elements a single value may have; shapes beyond it are
// rejected by the verifier rather than overflowing an allocation.
inline constexpr int64_t kMaxElements = int64_t{1} << 34;

// INVALID_ARGUMENT if a dimension is negative or the element count overflows
// kMaxElements.
absl::Status ValidateShape(const Shape& shape);

// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> dims);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_SHAPE_H_
