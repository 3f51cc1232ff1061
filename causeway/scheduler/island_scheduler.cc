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

std::vector<absl::Status> IslandScheduler::SubmitRuns(std::vector<RunRequest> runs) {
  std::vector<absl::Status> statuses;
  statuses.reserve(runs.size());
  MutexLock lock(&mu_);
  // One message per host, holding that host's runs in island order.
  absl::flat_hash_map<HostId, std::vector<RunRequest>> by_host;
  std::vector<HostId> host_order;
  for (RunRequest& run : runs) {
    auto it = programs_.find(run.program);
    if (it == programs_.end()) {
      statuses.push_back(absl::NotFoundError(absl::StrCat(
          run.program.ToString(), " is not registered with ", options_.island.ToString(),
          "'s scheduler")));
      continue;
    }
    run.sequence = next_sequence_++;
    for (HostId h : it->second) {
      auto [entry, inserted] = by_host.try_emplace(h);
      if (inserted) host_order.push_back(h);
      entry->second.push_back(run);
    }
    statuses.push_back(absl::OkStatus());
  }
  for (HostId h : host_order) options_.host_lookup(h)->EnqueueRuns(by_host[h]);
  return statuses;
}

}  // namespace causeway
