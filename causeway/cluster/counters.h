// Device counters of a whole cluster, embedded or distributed, gathered
// through each host's HostService::GetCounters.
#ifndef CAUSEWAY_CLUSTER_COUNTERS_H_
#define CAUSEWAY_CLUSTER_COUNTERS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/transport/services.h"

namespace causeway {

// Every device of every host in the cluster's topology, in host then local
// order; with `reset`, each host zeroes its launch and busy counters after
// reading them. UNAVAILABLE if a host cannot be reached; DEADLINE_EXCEEDED
// naming the host if one has not answered within `timeout` (a host that
// heartbeats but never answers would otherwise hold the caller forever).
absl::StatusOr<std::vector<DeviceCounters>> ClusterCounters(
    ClusterConnection& cluster, bool reset, absl::Duration timeout = absl::Seconds(30));

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_COUNTERS_H_
