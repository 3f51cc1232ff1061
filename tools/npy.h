// NumPy's .npy files (format versions 1 to 3), for the tensors `causeway
// run` reads and writes: little-endian float32, float16, int32, int64, int8,
// uint8 and bool as such, float64 read as float32 (the IR has no f64), bf16
// written as float32 (NumPy has no bfloat16); C order.
// A file is untrusted input: its header is bounded and checked, and its data
// must hold exactly what the header says.
#ifndef CAUSEWAY_TOOLS_NPY_H_
#define CAUSEWAY_TOOLS_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/literal.h"

namespace causeway::tools {

absl::StatusOr<ir::Literal> ReadNpy(const std::string& path);
absl::Status WriteNpy(const std::string& path, const ir::Literal& literal);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_NPY_H_
