// What hosts report about their devices and runs: one shape of a device's
// counters for every layer (a device stream, a host, the embedded cluster, a
// worker's reply to the coordinator, `causeway demo`), and the report a host
// sends up the report tree.
#ifndef CAUSEWAY_TRANSPORT_STATS_H_
#define CAUSEWAY_TRANSPORT_STATS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "causeway/base/ids.h"

namespace causeway {

// One client's part of a device.
struct ClientUsage {
  ClientId client;
  int64_t memory_bytes = 0;   // granted to the client's buffers and launches
  int64_t waiting_bytes = 0;  // requested, not yet granted (quota or memory full)
  int64_t arrays = 0;         // its arrays with a shard on the device
};

// One device's counters. A device stream fills the launch and time counters;
// its host adds the device's id and memory.
struct DeviceCounters {
  DeviceId device;
  int64_t launches = 0;
  int64_t failed = 0;
  int64_t busy_us = 0;  // time spent running kernels
  // Of busy_us, the time inside collectives (waiting for peers, exchanging
  // data): busy_us - collective_us is the device's own computation.
  int64_t collective_us = 0;
  int64_t queued = 0;  // launches waiting in the device's queue now
  // Clock micros of the first launch's start and the last one's end since
  // the counters were reset; -1 before any.
  int64_t first_start_us = -1;
  int64_t last_end_us = -1;
  int64_t memory_in_use = 0;
  int64_t memory_peak = 0;
  // Every client with memory or arrays on the device, by id: filled only
  // when asked for (a worker, for the coordinator's HostCall.by_client).
  std::vector<ClientUsage> clients;

  // busy_us outside collectives (a peer's figures are clamped into range).
  int64_t compute_us() const {
    return busy_us - std::clamp<int64_t>(collective_us, 0, std::max<int64_t>(busy_us, 0));
  }
};

// A host's report of its subtree's part of a run, to its parent in the
// report tree: the device time and launches of the run on the reporting
// host and every host below it.
struct SubtreeReport {
  HostId child;
  ProgramId program;
  RunId run;
  int64_t device_us = 0;
  int launches = 0;
};

}  // namespace causeway

#endif  // CAUSEWAY_TRANSPORT_STATS_H_
