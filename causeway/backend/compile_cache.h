// One executable per function and kind in a process, while anyone holds it.
//
// A plan carries IR and every host compiles the call nodes it runs when the
// plan is registered. The hosts of an embedded cluster share one process and
// the plan's functions, so without this each of them would compile the same
// function again: here the first compiles and the others take its result.
#ifndef CAUSEWAY_BACKEND_COMPILE_CACHE_H_
#define CAUSEWAY_BACKEND_COMPILE_CACHE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "causeway/backend/executable.h"
#include "causeway/ir/function.h"

namespace causeway::backend {

// `kind.Compile(*function)`, or the executable an earlier call made for this
// same function object (not an equal copy) and kind if one still holds it.
// Thread-safe. The cache holds neither the function nor the executable, only
// weak references, so it keeps nothing alive.
absl::StatusOr<std::shared_ptr<const Executable>> CompileShared(
    const DeviceKind& kind, const std::shared_ptr<const ir::Function>& function);

}  // namespace causeway::backend

#endif  // CAUSEWAY_BACKEND_COMPILE_CACHE_H_
