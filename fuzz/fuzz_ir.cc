// libFuzzer target: IR deserialisation, verification and compilation.
// Deserialize must never crash and must return either a verified function
// or a status; a verified function must compile or be refused cleanly.
#include <cstddef>
#include <cstdint>

#include "causeway/backend/cpu/executable.h"
#include "causeway/ir/serialization.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<causeway::ir::Function> f =
      causeway::ir::Deserialize(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!f.ok()) return 0;
  // Compiling plans buffers and kernels but allocates nothing per element.
  causeway::backend::cpu::Compile(*f).IgnoreError();
  return 0;
}
