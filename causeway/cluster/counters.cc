#include "causeway/cluster/counters.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace causeway {

absl::StatusOr<std::vector<DeviceCounters>> ClusterCounters(ClusterConnection& cluster,
                                                            bool reset, absl::Duration timeout) {
  const Topology topology = cluster.resources()->GetTopology();
  std::vector<Future<std::vector<DeviceCounters>>> parts;
  std::vector<HostId> hosts;
  for (IslandId i : topology.islands()) {
    const IslandInfo island = *topology.island(i);
    for (HostId h : island.hosts) {
      HostService* host = cluster.host(h);
      if (host == nullptr) return absl::UnavailableError(absl::StrCat(h.ToString(), " is gone"));
      parts.push_back(host->GetCounters(reset));
      hosts.push_back(h);
    }
  }
  std::vector<DeviceCounters> out;
  const absl::Time deadline = absl::Now() + timeout;
  for (size_t i = 0; i < parts.size(); ++i) {
    const absl::StatusOr<std::vector<DeviceCounters>>* answer =
        parts[i].AwaitWithTimeout(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (answer == nullptr) {
      return absl::DeadlineExceededError(absl::StrCat(
          hosts[i].ToString(), " did not report its counters within ",
          absl::FormatDuration(timeout)));
    }
    const absl::StatusOr<std::vector<DeviceCounters>>& p = *answer;
    if (!p.ok()) return p.status();
    out.insert(out.end(), p->begin(), p->end());
  }
  return out;
}

}  // namespace causeway
