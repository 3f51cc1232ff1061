#include "causeway/scheduler/island_scheduler.h"

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"

namespace causeway {

IslandScheduler::IslandScheduler(IslandSchedulerOptions options) : options_(std::move(options)) {}

absl::Status IslandScheduler::RegisterProgram(std::shared_ptr<const ProgramPlan> plan) {
  if (plan->hosts_by_island.size() != plan->islands.size()) {
    return absl::InvalidArgumentError(absl::StrCat(plan->id.ToString(), " lists ",
                                                   plan->hosts_by_island.size(),
                                                   " host lists for ", plan->islands.size(),
                                                   " islands"));
  }
  for (size_t i = 0; i < plan->islands.size(); ++i) {
    if (plan->islands[i] != options_.island) continue;
    for (HostId h : plan->hosts_by_island[i]) {
      if (options_.host_lookup(h) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            plan->id.ToString(), " names ", h.ToString(), ", which is not a host of ",
            options_.island.ToString()));
      }
    }
    MutexLock lock(&mu_);
    programs_[plan->id] =
        Program{plan->hosts_by_island[i], plan->parameters.size(), plan->outputs.size()};
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(plan->id.ToString(), " has no work on ",
                                                 options_.island.ToString()));
}

void IslandScheduler::UnregisterProgram(ProgramId program) {
  MutexLock lock(&mu_);
  programs_.erase(program);
}

absl::StatusOr<IslandScheduler::Hosts> IslandScheduler::Route(const RunRequest& run) const {
  auto it = programs_.find(run.program);
  if (it == programs_.end()) {
    return absl::NotFoundError(absl::StrCat(run.program.ToString(), " is not registered with ",
                                            options_.island.ToString(), "'s scheduler"));
  }
  const Program& program = it->second;
  if (run.arguments.size() != program.arguments || run.outputs.size() != program.outputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        run.run.ToString(), " of ", run.program.ToString(), " has ", run.arguments.size(),
        " arguments and ", run.outputs.size(), " outputs; the program takes ", program.arguments,
        " and returns ", program.outputs));
  }
  Hosts hosts;
  for (HostId h : program.hosts) {
    HostService* host = options_.host_lookup(h);
    if (host == nullptr) {
      return absl::UnavailableError(absl::StrCat(h.ToString(), " of ", run.program.ToString(),
                                                 " is gone"));
    }
    hosts.push_back(host);
  }
  return hosts;
}

absl::Status IslandScheduler::CheckRun(const RunRequest& run) const {
  MutexLock lock(&mu_);
  return Route(run).status();
}

absl::Status IslandScheduler::SubmitRun(RunRequest run) {
  // Forwarding happens under the lock: that is what makes the order of runs
  // the same on every host of the island. Hosts' EnqueueRun never blocks.
  MutexLock lock(&mu_);
  absl::StatusOr<Hosts> hosts = Route(run);
  if (!hosts.ok()) return hosts.status();
  run.sequence = next_sequence_++;
  for (HostService* h : *hosts) h->EnqueueRun(run);
  return absl::OkStatus();
}

std::vector<absl::Status> IslandScheduler::SubmitRuns(std::vector<RunRequest> runs) {
  std::vector<absl::Status> statuses;
  statuses.reserve(runs.size());
  MutexLock lock(&mu_);
  // One message per host, holding that host's runs in island order.
  absl::flat_hash_map<HostService*, std::vector<RunRequest>> by_host;
  std::vector<HostService*> host_order;
  for (RunRequest& run : runs) {
    absl::StatusOr<Hosts> hosts = Route(run);
    if (!hosts.ok()) {
      statuses.push_back(hosts.status());
      continue;
    }
    run.sequence = next_sequence_++;
    for (HostService* h : *hosts) {
      auto [entry, inserted] = by_host.try_emplace(h);
      if (inserted) host_order.push_back(h);
      entry->second.push_back(run);
    }
    statuses.push_back(absl::OkStatus());
  }
  for (HostService* h : host_order) h->EnqueueRuns(by_host[h]);
  return statuses;
}

absl::Status SubmitToIslands(const RunRequest& run, const std::vector<IslandId>& islands,
                             const std::vector<IslandScheduler*>& schedulers) {
  if (islands.empty()) return absl::InvalidArgumentError(absl::StrCat(run.run.ToString(), " names no island"));
  for (size_t i = 0; i < islands.size(); ++i) {
    if (schedulers[i] == nullptr) {
      return absl::NotFoundError(absl::StrCat("unknown ", islands[i].ToString()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (islands[j] == islands[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat(run.run.ToString(), " names ", islands[i].ToString(), " twice"));
      }
    }
    if (islands.size() > 1) CW_RETURN_IF_ERROR(schedulers[i]->CheckRun(run));
  }
  for (IslandScheduler* s : schedulers) CW_RETURN_IF_ERROR(s->SubmitRun(run));
  return absl::OkStatus();
}

}  // namespace causeway
