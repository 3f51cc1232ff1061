#include "causeway/cluster/counters.h"

#include "absl/strings/str_cat.h"

namespace causeway {

absl::StatusOr<std::vector<DeviceCounters>> ClusterCounters(ClusterConnection& cluster,
                                                            bool reset) {
  const Topology topology = cluster.resources()->GetTopology();
  std::vector<Future<std::vector<DeviceCounters>>> parts;
  for (IslandId i : topology.islands()) {
    const IslandInfo island = *topology.island(i);
    for (HostId h : island.hosts) {
      HostService* host = cluster.host(h);
      if (host == nullptr) return absl::UnavailableError(absl::StrCat(h.ToString(), " is gone"));
      parts.push_back(host->GetCounters(reset));
    }
  }
  std::vector<DeviceCounters> out;
  for (const auto& part : parts) {
    const absl::StatusOr<std::vector<DeviceCounters>>& p = part.Await();
    if (!p.ok()) return p.status();
    out.insert(out.end(), p->begin(), p->end());
  }
  return out;
}

}  // namespace causeway
