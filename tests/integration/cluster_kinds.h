// The two ways a client reaches a cluster, for suites that must behave the
// same over both: the embedded LocalCluster, and a distributed cluster of
// real processes on 127.0.0.1 (one coordinator, one worker per host,
// started from the `causeway` binary) reached over gRPC.
#ifndef CAUSEWAY_TESTS_INTEGRATION_CLUSTER_KINDS_H_
#define CAUSEWAY_TESTS_INTEGRATION_CLUSTER_KINDS_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/process_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/cluster/worker_server.h"
#include "tests/integration/test_util.h"

namespace causeway::testing {

// kEmbeddedOtherDevice: the embedded cluster with devices of a second kind
// (tests/integration/wrapped_kind.h), reached only through the device seam:
// its memory is not the host's and its operations complete on threads of
// its own.
// kProcesses: worker processes whose collectives travel on the data plane
// (--collectives grpc); kProcessesGloo: every collective between processes
// on Gloo (--collectives gloo --gloo-from-bytes 0). kEmbeddedFibers: the
// embedded cluster with every device a fiber of one pool of a single thread
// (LocalClusterOptions::device_threads = 1): any wait on a device path that
// blocked the thread instead of parking the fiber would hang it.
// kEmbeddedVulkan: the embedded cluster on devices of the vulkan kind, all
// on the first Vulkan GPU (lavapipe where the machine has none).
enum class ClusterKind {
  kEmbedded,
  kProcesses,
  kEmbeddedOtherDevice,
  kProcessesGloo,
  kEmbeddedFibers,
  kEmbeddedVulkan
};

inline std::string KindName(const ::testing::TestParamInfo<ClusterKind>& info) {
  switch (info.param) {
    case ClusterKind::kEmbedded: return "Embedded";
    case ClusterKind::kProcesses: return "Processes";
    case ClusterKind::kEmbeddedOtherDevice: return "EmbeddedOtherDevice";
    case ClusterKind::kProcessesGloo: return "ProcessesGloo";
    case ClusterKind::kEmbeddedFibers: return "EmbeddedFibers";
    case ClusterKind::kEmbeddedVulkan: return "EmbeddedVulkan";
  }
  return "?";
}

// The `causeway` binary the process clusters run: $CAUSEWAY_BIN where set
// (the tests run from a bundle on another machine, scripts/gpu_check.sh),
// else this build's (set by CMake).
inline std::string CausewayBinary() {
  const char* bin = std::getenv("CAUSEWAY_BIN");
  return bin != nullptr && *bin != '\0' ? bin : CAUSEWAY_BINARY;
}

// Options for a process cluster of `islands` x `hosts_per_island` workers
// with `devices_per_host` devices each.
inline ProcessClusterOptions ProcessShape(int islands, int hosts_per_island,
                                          int devices_per_host) {
  ProcessClusterOptions o;
  o.islands = islands;
  o.hosts_per_island = hosts_per_island;
  o.devices_per_host = devices_per_host;
  return o;
}

// A heartbeat timeout short enough for a test to watch a hung worker be
// dropped. Under a sanitizer each process runs several times slower and
// shares two cores with the rest of the suite: there a worker that is only
// busy (starting, or one of several sanitized processes in a Gloo ring) may
// go 2 s without a heartbeat, so the timeout is longer.
inline absl::Duration TestHeartbeatTimeout() {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return absl::Seconds(8);
#else
  return absl::Seconds(2);
#endif
}

// Starts a process cluster of the given shape; fails the test if it cannot.
inline std::unique_ptr<ProcessCluster> StartProcesses(ProcessClusterOptions options) {
  options.binary = CausewayBinary();
  auto cluster = ProcessCluster::Start(options);
  CW_CHECK_OK(cluster.status());
  return std::move(*cluster);
}

// How many of `cluster`'s worker logs contain `text`.
inline int WorkerLogsWith(const ProcessCluster& cluster, const std::string& text) {
  int found = 0;
  for (int i = 0; i < cluster.num_workers(); ++i) {
    std::ifstream log(cluster.log_dir() + "/worker" + std::to_string(i) + ".log");
    const std::string all((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (all.find(text) != std::string::npos) ++found;
  }
  return found;
}

inline std::unique_ptr<RemoteCluster> ConnectRemote(const ProcessCluster& cluster) {
  RemoteClusterOptions o;
  o.address = cluster.url();
  o.token = cluster.token();
  auto remote = RemoteCluster::Connect(o);
  CW_CHECK_OK(remote.status());
  return std::move(*remote);
}

}  // namespace causeway::testing

#endif  // CAUSEWAY_TESTS_INTEGRATION_CLUSTER_KINDS_H_
