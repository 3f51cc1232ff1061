// libFuzzer target: decoding a program plan from the wire, as a coordinator
// (no compilation) and as a worker (every function compiled and checked
// against its node).
#include <cstddef>
#include <cstdint>

#include "causeway/backend/cpu/executable.h"
#include "causeway/transport/grpc/wire_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  causeway::backend::cpu::Kind();  // a worker's kind, as a worker registers it
  causeway::wire::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!causeway::wire::DecodePlan(plan, causeway::wire::CompileMode::kSkip).ok()) return 0;
  causeway::wire::DecodePlan(plan, causeway::wire::CompileMode::kCompile).IgnoreError();
  return 0;
}
