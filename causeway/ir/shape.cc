#include "causeway/ir/shape.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace causeway::ir {

bool IsValidDType(int64_t value) { return value >= 0 && value < kNumDTypes; }

int64_t ByteSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kPred:
    case DType::kI8:
    case DType::kU8:
      return 1;
  }
  return 0;  // Not a DType; ValidateShape rejects it.
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kI32:
      return "i32";
    case DType::kPred:
      return "pred";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI64:
      return "i64";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
  }
  return "unknown_dtype";
}

DType ComputeDType(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
      return DType::kF32;
    case DType::kI64:
    case DType::kI8:
    case DType::kU8:
      return DType::kI32;
    default:
      return dtype;
  }
}

// For a valid shape, the product of the dimensions. Shapes that ValidateShape
// rejects get a value that cannot overflow byte_size(): -1 if a dimension is
// negative, kMaxElements + 1 if the product exceeds kMaxElements.
int64_t Shape::num_elements() const {
  int64_t n = 1;
  bool too_big = false;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d == 0) return 0;
    if (too_big) continue;
    if (n > kMaxElements / d) {
      too_big = true;
      continue;
    }
    n *= d;
  }
  return too_big ? kMaxElements + 1 : n;
}

std::string Shape::ToString() const {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(dims, ","), "]");
}

absl::Status ValidateShape(const Shape& shape) {
  if (!IsValidDType(static_cast<int64_t>(shape.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid dtype ", static_cast<int>(shape.dtype)));
  }
  for (int64_t d : shape.dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in ", shape.ToString()));
    }
  }
  if (shape.num_elements() > kMaxElements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", shape.ToString(), " has more than ", kMaxElements, " elements"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> RowMajorStrides(absl::Span<const int64_t> dims) {
  std::vector<int64_t> strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

}  // namespace causeway::ir
