// Tensor files: named host tensors plus string metadata in one file, in the
// safetensors layout, so checkpoints are readable without Causeway (Python's
// `safetensors`, or twenty lines of any language):
//
//   bytes 0..7   N, the header length, unsigned 64-bit little-endian
//   bytes 8..8+N a JSON object: for each tensor
//                  "name": {"dtype": "F32"|"F16"|"BF16"|"I32"|"I64"|"I8"|"U8"|"BOOL",
//                           "shape": [...],
//                           "data_offsets": [begin, end]}
//                and "__metadata__": {"key": "string value", ...};
//                padded with spaces to a multiple of 8 bytes
//   the rest     the tensors' raw little-endian row-major bytes; offsets are
//                relative to the end of the header, contiguous, in order
//
// Reading treats the file as untrusted: every length, offset, shape and
// dtype is checked before use.
#ifndef CAUSEWAY_MODELS_TENSOR_FILE_H_
#define CAUSEWAY_MODELS_TENSOR_FILE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "causeway/ir/literal.h"

namespace causeway::models {

struct TensorFile {
  std::map<std::string, std::string> metadata;
  // In file order; names distinct and not "__metadata__".
  std::vector<std::pair<std::string, ir::Literal>> tensors;

  // The tensor called `name`, or null.
  const ir::Literal* Find(const std::string& name) const;
};

// Writes `file` to `path` atomically: to `path`.tmp, flushed to disk, then
// renamed over `path`, so a reader sees the old file or the new one, never
// a torn one. INVALID_ARGUMENT for a bad or repeated name; the error of
// the file system otherwise (the temporary file is removed).
absl::Status WriteTensorFile(const std::string& path, const TensorFile& file);

// Reads a file written by WriteTensorFile (or any safetensors file of f32,
// i32 and bool tensors). NOT_FOUND if it does not exist; DATA_LOSS naming
// the problem if it is truncated or malformed; INVALID_ARGUMENT for a dtype
// Causeway has no type for.
absl::StatusOr<TensorFile> ReadTensorFile(const std::string& path);

}  // namespace causeway::models

#endif  // CAUSEWAY_MODELS_TENSOR_FILE_H_
