// Configuration shared by the runtime's components and the transports that
// carry it: the emulated network between islands, how schedulers order runs,
// a client's share of an island, the report tree, and fault injection.
#ifndef CAUSEWAY_TRANSPORT_CONFIG_H_
#define CAUSEWAY_TRANSPORT_CONFIG_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "causeway/base/ids.h"

namespace causeway {

// Identifies a launch to fault injectors and in error messages.
struct LaunchInfo {
  RunId run;
  int node = -1;
  // The function's name, a view into the launch's program plan: valid while
  // the launch exists. Fault injectors must not keep it.
  absl::string_view name;
  DeviceId device;
  HostId host;
};

// Returns a non-OK status to make a launch fail as if its kernel had. For
// tests and fault drills. Runs on the device thread.
using FaultInjector = std::function<absl::Status(const LaunchInfo&)>;

// The emulated data-center network between an embedded cluster's islands.
struct DcnOptions {
  absl::Duration latency = absl::ZeroDuration();
  // Bytes per second per link; 0 means unlimited.
  double bytes_per_second = 0;
};

// How an island scheduler orders runs (docs/SCHEDULING.md).
enum class SchedulingPolicy { kFifo, kProportionalShare };

// A client's claim on an island's device time (docs/SCHEDULING.md).
struct ClientShare {
  // Relative share of device time among the clients of its priority class
  // that have work queued. Finite and > 0.
  double weight = 1.0;
  // Higher classes are served first: a client of class 1 with work queued
  // always goes before every client of class 0.
  int priority = 0;
  // Bytes the client may hold on each device (0: no limit). Beyond, its
  // allocations wait for its own frees, never holding other clients'
  // allocations back; one larger than the quota fails at once.
  int64_t memory_quota_bytes = 0;
  friend bool operator==(const ClientShare&, const ClientShare&) = default;
};
// INVALID_ARGUMENT unless the weight is finite, > 0 and <= 1e6, the class
// in [0, 7] and the quota in [0, 2^50].
absl::Status CheckClientShare(const ClientShare& share);

// Where `host` sits in the tree a program's hosts of one island report its
// runs up (HostExecutorOptions::report_fanout): the distinct `hosts`, in
// order, laid out as a complete `fanout`-ary tree (position p's children are
// p·fanout + 1 .. p·fanout + fanout). The first host is the root, the one
// that reports to the island's scheduler. Each host and the scheduler work
// the tree out from the plan alone, so nothing about it is sent.
struct ReportTreeNode {
  bool member = false;  // `host` is one of `hosts`
  HostId parent;        // invalid: the root
  std::vector<HostId> children;
};
ReportTreeNode ReportTreeOf(absl::Span<const HostId> hosts, HostId host, int fanout);
// OK if `fanout` is a report tree's fanout: 0 (no tree) to
// limits::kMaxReportFanout. Checked wherever one is configured or received.
absl::Status CheckReportFanout(int64_t fanout);

}  // namespace causeway

#endif  // CAUSEWAY_TRANSPORT_CONFIG_H_
