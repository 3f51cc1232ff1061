// The multi-controller baseline of `causeway bench dispatch --controller
// multi` and `bench utilization`: one loop per host runs the steps of a
// registered plan, enqueuing straight onto that host's devices
// (HostService::EnqueueRun) with no client or island scheduler in the path
// — the way multi-controller SPMD systems (multi-controller JAX) run, one
// program per host. It lives with the benchmarks: no host, transport or
// cluster knows it exists.
//
// It is faithful only where each host is in the calling process (the
// embedded cluster): a loop driving a worker process through a client
// connection would pay the coordinator's hop per step, which is what the
// single controller is measured against.
#ifndef CAUSEWAY_TOOLS_SPMD_LOOP_H_
#define CAUSEWAY_TOOLS_SPMD_LOOP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/base/ids.h"
#include "causeway/plan/plan.h"
#include "causeway/transport/services.h"

namespace causeway::tools {

// Step k of a loop (run id `id_base + k`, output array `id_base + k`)
// consumes the output of step k - 1, or `input` when k is 0. Every host of
// the plan runs the same steps, and the hosts agree on ids without talking
// — as SPMD programs do.
struct SpmdLoop {
  ClientId client;
  int64_t id_base = 0;  // in the client's id space, clear of its own ids
  ArrayId input;
  int64_t first = 0;
  int64_t count = 0;
  // How far, in the devices' time, a loop prepares steps ahead of its
  // host's devices (the island scheduler's default run-ahead), and how long
  // it waits for one step before giving up.
  double run_ahead_us = 10'000;
  absl::Duration step_timeout = absl::Seconds(60);
};

// Steps of one call of RunSpmdLoop, at most.
inline constexpr int64_t kMaxSpmdLoopSteps = int64_t{1} << 24;

// An id base for `client`'s loops: in its id range, 2^38 ids above where its
// own counter starts, so a loop's ids never meet the ones it makes itself.
inline int64_t SpmdLoopIdBase(ClientId client) {
  return ClientIdBase(client) | (int64_t{1} << 38);
}

// Runs `loop` on every host of `plan` (one thread per host, hosts[i] for
// plan.hosts[i]) and returns when each host's shard of the last step is
// ready, or the first error, the step that failed first: every host stops
// enqueuing at once (a host whose peers stopped would otherwise wait for
// them in a collective), within its run-ahead window of that step.
// INVALID_ARGUMENT, before any step, for a plan that is not one parameter
// and one output, hosts that are not the plan's, a host holding no shard of
// the output, or a loop whose ids leave the client's range (1 to
// kMaxSpmdLoopSteps steps from `first` >= 0). A step not done within
// `step_timeout` is DEADLINE_EXCEEDED. The plan must be registered on every
// host.
absl::Status RunSpmdLoop(const ProgramPlan& plan, const std::vector<HostService*>& hosts,
                         const SpmdLoop& loop);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_SPMD_LOOP_H_
