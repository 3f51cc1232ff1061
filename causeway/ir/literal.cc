#include "causeway/ir/literal.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "causeway/ir/elements.h"

namespace causeway::ir {

std::string Literal::ToString(int max_elements) const {
  std::string out = absl::StrCat(shape_.ToString(), " {");
  const int64_t elem = ByteSize(shape_.dtype);
  const int64_t n = elem > 0 ? static_cast<int64_t>(bytes_.size()) / elem : 0;
  const int64_t shown = std::min<int64_t>(n, std::max(max_elements, 0));
  for (int64_t i = 0; i < shown; ++i) {
    if (i > 0) out += ", ";
    const std::byte* p = bytes_.data() + i * elem;
    switch (shape_.dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, p, sizeof(v));
        absl::StrAppend(&out, v);
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, p, sizeof(v));
        absl::StrAppend(&out, v);
        break;
      }
      case DType::kPred:
        out += std::to_integer<uint8_t>(*p) != 0 ? "true" : "false";
        break;
      case DType::kI64: {
        int64_t v;
        std::memcpy(&v, p, sizeof(v));
        absl::StrAppend(&out, v);
        break;
      }
      case DType::kF16:
      case DType::kBF16:
      case DType::kI8:
      case DType::kU8:
        absl::StrAppend(&out, ElementAsDouble(*this, i));
        break;
    }
  }
  if (shown < n) absl::StrAppend(&out, shown > 0 ? ", " : "", "... (", n, " total)");
  out += "}";
  return out;
}

}  // namespace causeway::ir
