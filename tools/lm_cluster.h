// The embedded cluster that `causeway train lm` and `causeway bench lm` run
// on when no distributed cluster is named.
#ifndef CAUSEWAY_TOOLS_LM_CLUSTER_H_
#define CAUSEWAY_TOOLS_LM_CLUSTER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "causeway/cluster/local_cluster.h"

namespace causeway::tools {

// One island of `devices` devices split evenly over `hosts` hosts.
// INVALID_ARGUMENT if they do not split.
inline absl::StatusOr<LocalClusterOptions> LmLocalClusterOptions(int64_t devices,
                                                                  int64_t hosts) {
  if (hosts < 1 || devices < 1 || devices % hosts != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(devices, " devices do not split evenly over --hosts ", hosts));
  }
  LocalClusterOptions o;
  o.islands = 1;
  o.hosts_per_island = static_cast<int>(hosts);
  o.devices_per_host = static_cast<int>(devices / hosts);
  return o;
}
inline absl::StatusOr<std::unique_ptr<LocalCluster>> LmLocalCluster(int64_t devices,
                                                                    int64_t hosts) {
  absl::StatusOr<LocalClusterOptions> o = LmLocalClusterOptions(devices, hosts);
  if (!o.ok()) return o.status();
  return LocalCluster::Create(*o);
}

// For pipeline training: `islands` islands, each of as many hosts as it has
// stages (stages / islands), each host `data` devices: every stage on a
// host of its own. `dcn` emulates the network between the islands.
inline absl::StatusOr<LocalClusterOptions> LmPipelineClusterOptions(int64_t stages, int64_t data,
                                                                    int64_t islands,
                                                                    DcnOptions dcn) {
  if (islands < 1 || stages % islands != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(stages, " stages do not split evenly over --islands ", islands));
  }
  LocalClusterOptions o;
  o.islands = static_cast<int>(islands);
  o.hosts_per_island = static_cast<int>(stages / islands);
  o.devices_per_host = static_cast<int>(data);
  o.dcn = dcn;
  return o;
}

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_LM_CLUSTER_H_
