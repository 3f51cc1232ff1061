// Element types and static shapes of IR values and arrays.
#ifndef CAUSEWAY_IR_SHAPE_H_
#define CAUSEWAY_IR_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace causeway::ir {

enum class DType { kF32, kI32, kPred };

// Bytes per element (pred is stored as one byte).
int64_t ByteSize(DType dtype);
const char* DTypeName(DType dtype);

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
