// libFuzzer target: decoding a program plan from the wire, as a coordinator
// (functions skipped) and as a worker (every function parsed, checked against
// its node, and compiled for the cpu kind as the worker's executor does).
#include <cstddef>
#include <cstdint>

#include "causeway/backend/cpu/executable.h"
#include "causeway/transport/grpc/wire_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  causeway::wire::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!causeway::wire::DecodePlan(plan, causeway::wire::FunctionMode::kSkip).ok()) return 0;
  auto decoded = causeway::wire::DecodePlan(plan, causeway::wire::FunctionMode::kParse);
  if (!decoded.ok()) return 0;
  for (const causeway::PlanNode& node : (*decoded)->nodes) {
    if (node.function != nullptr) causeway::backend::cpu::Compile(*node.function).IgnoreError();
  }
  return 0;
}
