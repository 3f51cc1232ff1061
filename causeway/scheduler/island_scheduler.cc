#include "causeway/scheduler/island_scheduler.h"

#include "absl/strings/str_cat.h"

namespace causeway {

IslandScheduler::IslandScheduler(IslandSchedulerOptions options) : options_(std::move(options)) {}

absl::Status IslandScheduler::RegisterProgram(std::shared_ptr<const ProgramPlan> plan) {
  for (size_t i = 0; i < plan->islands.size(); ++i) {
    if (plan->islands[i] != options_.island) continue;
    MutexLock lock(&mu_);
    programs_[plan->id] = plan->hosts_by_island[i];
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(plan->id.ToString(), " has no work on ",
                                                 options_.island.ToString()));
}

void IslandScheduler::UnregisterProgram(ProgramId program) {
  MutexLock lock(&mu_);
  programs_.erase(program);
}

absl::Status IslandScheduler::SubmitRun(RunRequest run) {
  // Forwarding happens under the lock: that is what makes the order of runs
  // the same on every host of the island. Hosts' EnqueueRun never blocks.
  MutexLock lock(&mu_);
  auto it = programs_.find(run.program);
  if (it == programs_.end()) {
    return absl::NotFoundError(absl::StrCat(run.program.ToString(), " is not registered with ",
                                            options_.island.ToString(), "'s scheduler"));
  }
  run.sequence = next_sequence_++;
  for (HostId h : it->second) options_.host_lookup(h)->EnqueueRun(run);
  return absl::OkStatus();
}

int64_t IslandScheduler::runs_scheduled() const {
  MutexLock lock(&mu_);
  return next_sequence_;
}

}  // namespace causeway
