// Serialisation of IR functions to protobuf (causeway/ir/ir.proto), and back
// with verification: bytes from anywhere (a file, the network, a fuzzer) go
// through Deserialize, which returns a verified Function or
// INVALID_ARGUMENT — never crashes and never allocates more than a small
// multiple of the input size.
#ifndef CAUSEWAY_IR_SERIALIZATION_H_
#define CAUSEWAY_IR_SERIALIZATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/ir/function.h"

namespace causeway::ir {

// The function's FunctionProto bytes. Deterministic for equal functions.
std::string Serialize(const Function& function);

// Parses and verifies. INVALID_ARGUMENT for unparsable bytes, out-of-range
// enums, literals whose data does not match their shape, and anything
// Verify rejects.
absl::StatusOr<Function> Deserialize(absl::string_view bytes);

}  // namespace causeway::ir

#endif  // CAUSEWAY_IR_SERIALIZATION_H_
