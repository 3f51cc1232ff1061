// Literal: a dense, row-major host tensor. What clients put into and fetch
// out of arrays, and what constants hold.
#ifndef CAUSEWAY_IR_LITERAL_H_
#define CAUSEWAY_IR_LITERAL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "causeway/base/check.h"
#include "causeway/ir/shape.h"

namespace causeway::ir {

// Owns its bytes. A value type: copies are deep. Not thread-safe for
// concurrent mutation.
class Literal {
 public:
  Literal() = default;
  // Zero-filled literal of `shape`.
  explicit Literal(Shape shape)
      : shape_(std::move(shape)), bytes_(static_cast<size_t>(shape_.byte_size())) {}

  static Literal F32(std::vector<int64_t> dims, absl::Span<const float> values) {
    return FromSpan(Shape(DType::kF32, std::move(dims)), values);
  }
  static Literal I32(std::vector<int64_t> dims, absl::Span<const int32_t> values) {
    return FromSpan(Shape(DType::kI32, std::move(dims)), values);
  }
  static Literal I64(std::vector<int64_t> dims, absl::Span<const int64_t> values) {
    return FromSpan(Shape(DType::kI64, std::move(dims)), values);
  }
  static Literal ScalarF32(float v) { return F32({}, {v}); }

  const Shape& shape() const { return shape_; }
  const std::byte* data() const { return bytes_.data(); }
  std::byte* data() { return bytes_.data(); }
  size_t byte_size() const { return bytes_.size(); }

  // REQUIRES: T matches the dtype's storage (float for f32, int32_t for i32,
  // uint8_t for pred and u8, uint16_t for f16 and bf16 bits, int64_t for
  // i64, int8_t for i8).
  template <typename T>
  absl::Span<const T> values() const {
    return absl::MakeConstSpan(reinterpret_cast<const T*>(bytes_.data()),
                               bytes_.size() / sizeof(T));
  }
  template <typename T>
  absl::Span<T> mutable_values() {
    return absl::MakeSpan(reinterpret_cast<T*>(bytes_.data()), bytes_.size() / sizeof(T));
  }

  std::string ToString(int max_elements = 16) const;

  friend bool operator==(const Literal& a, const Literal& b) {
    return a.shape_ == b.shape_ && a.bytes_ == b.bytes_;
  }

 private:
  template <typename T>
  static Literal FromSpan(Shape shape, absl::Span<const T> values) {
    Literal lit(std::move(shape));
    CW_CHECK(static_cast<int64_t>(values.size()) == lit.shape_.num_elements())
        << "literal of " << lit.shape_.ToString() << " given " << values.size()
        << " values";
    if (!values.empty()) std::memcpy(lit.bytes_.data(), values.data(), lit.bytes_.size());
    return lit;
  }

  Shape shape_;
  std::vector<std::byte> bytes_;
};

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_LITERAL_H_
