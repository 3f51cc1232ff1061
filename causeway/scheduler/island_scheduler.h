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
#include "absl/container/inlined_vector.h"
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
  // INVALID_ARGUMENT if the program has no work on this island or names a
  // host the lookup does not know.
  //
  // SubmitRun(s): NOT_FOUND for an unregistered program; INVALID_ARGUMENT
  // for a run whose argument or output count differs from the program's;
  // UNAVAILABLE if one of the run's hosts is gone. A refused run reaches no
  // host.
  absl::Status SubmitRun(RunRequest run) override;
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs) override;
  // What SubmitRun would refuse `run` for, without submitting it: lets a
  // run that spans islands be checked on every island before it is
  // submitted to any.
  absl::Status CheckRun(const RunRequest& run) const;

  IslandId island() const { return options_.island; }

 private:
  struct Program {
    std::vector<HostId> hosts;  // of this island, that the program touches
    size_t arguments = 0;
    size_t outputs = 0;
  };
  // The hosts `run` goes to, or why it cannot go. Inline: on the dispatch
  // path of every run, no allocation for islands of up to 8 hosts.
  using Hosts = absl::InlinedVector<HostService*, 8>;
  absl::StatusOr<Hosts> Route(const RunRequest& run) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const IslandSchedulerOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<ProgramId, Program> programs_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

// Submits a run that spans the islands of `schedulers` (one per island, in
// the client's order; null for an island that does not exist): checked on
// every island first, so a run refused anywhere reaches no host (a
// half-submitted run would leave its other islands waiting for pieces that
// never come). The caller serialises multi-island submissions, which gives
// such runs one global order.
absl::Status SubmitToIslands(const RunRequest& run, const std::vector<IslandId>& islands,
                             const std::vector<IslandScheduler*>& schedulers);

}  // namespace causeway

#endif  // CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_
