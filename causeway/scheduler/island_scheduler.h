// IslandScheduler: one per island. Puts every gang (one function call on all
// devices of its mesh) of every run on the island into one order, and
// forwards each run to the hosts it touches in that order, so every device
// of the island meets its peers in its collectives in the same order — across
// programs and clients — and gang-scheduled collectives cannot deadlock.
//
// The order is decided by a SchedulingPolicy. FIFO forwards runs as they
// arrive. Runs are forwarded whole: all gangs of one run on this island
// precede those of the next, which is a consistent order by construction.
#ifndef CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_
#define CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/services.h"

namespace causeway {

// Chooses which queued run an island forwards next. Called with the
// scheduler's lock held; must not block. FIFO is the only policy so far.
enum class SchedulingPolicy { kFifo };

struct IslandSchedulerOptions {
  IslandId island;
  SchedulingPolicy policy = SchedulingPolicy::kFifo;
  // Looks up a host of this island. Must outlive the scheduler.
  std::function<HostService*(HostId)> host_lookup;
};

// Thread-safe.
class IslandScheduler final : public SchedulerService {
 public:
  explicit IslandScheduler(IslandSchedulerOptions options);

  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override;
  void UnregisterProgram(ProgramId program) override;
  // NOT_FOUND for an unregistered program, INVALID_ARGUMENT if the program
  // has no work on this island.
  absl::Status SubmitRun(RunRequest run) override;
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs) override;

  IslandId island() const { return options_.island; }

 private:
  const IslandSchedulerOptions options_;
  mutable Mutex mu_;
  // Per program: the hosts of this island it touches.
  absl::flat_hash_map<ProgramId, std::vector<HostId>> programs_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace causeway

#endif  // CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_
