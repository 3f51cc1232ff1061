// A device kind for tests that behaves as an accelerator does towards the
// runtime: its memory is not host-addressable (allocations are handles into
// an arena of the device's own, which only its copies and launches reach),
// and its copies and launches complete later, on the device's own thread,
// after an optional delay. Its kernels are the cpu kind's, run over staged
// host copies of the arena's bytes. Any path of the runtime that reaches
// device memory through a host pointer fails on it, so the conformance
// suites run on it as well as on `cpu`.
#ifndef CAUSEWAY_TESTING_ARENA_KIND_H_
#define CAUSEWAY_TESTING_ARENA_KIND_H_

#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "causeway/backend/device.h"

namespace causeway::testing {

inline constexpr absl::string_view kArenaKindName = "arena";

struct ArenaOptions {
  // Each copy and launch completes this long after it reached the head of
  // the device's queue (0: as soon as it ran).
  absl::Duration delay = absl::ZeroDuration();
};

// A device of the arena kind with an arena of `spec.memory_bytes` bytes.
absl::StatusOr<std::unique_ptr<backend::Device>> CreateArenaDevice(const backend::DeviceSpec& spec,
                                                                   ArenaOptions options = {});

// Registers the kind (once; the first call's options hold) and returns its
// name.
absl::string_view RegisterArenaKind(ArenaOptions options = {});

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTING_ARENA_KIND_H_
