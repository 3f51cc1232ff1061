// TraceRecorder: timelines of what the runtime did — per device (a launch
// prepared, waiting for inputs, running, a transfer), per island scheduler
// (a run forwarded, and in flight until its hosts reported it done) and per
// client (a run submitted) — exported as Chrome trace JSON for Perfetto /
// chrome://tracing. Tests also read the recorded events to assert orderings
// (e.g. every launch was prepared before the first one finished). On the
// distributed cluster each process records its own, and a client collects
// its runs' events from all of them (docs/DEPLOYMENT.md, "Traces").
#ifndef CAUSEWAY_BASE_TRACE_H_
#define CAUSEWAY_BASE_TRACE_H_

#include <atomic>
#include <optional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"

namespace causeway {

enum class TraceKind {
  kPrepared,  // instant: launch queued on its device stream
  kWait,      // span: waiting for inputs and output memory
  kRun,       // span: kernel running
  kTransfer,  // span: a reshard piece copied into its destination
  kSend,      // instant: a reshard piece sent to another host
  kSubmit,    // instant, client track: a run submitted
  kForward,   // instant, scheduler track: a run forwarded to its hosts;
              // duration_us: how long the scheduler held it first
  kInFlight,  // span, scheduler track: from forwarded until every host
              // reported the run done
};

// Whose timeline an event belongs on.
inline bool IsClientEvent(TraceKind k) { return k == TraceKind::kSubmit; }
inline bool IsSchedulerEvent(TraceKind k) {
  return k == TraceKind::kForward || k == TraceKind::kInFlight;
}

const char* TraceKindName(TraceKind kind);

struct TraceEvent {
  TraceKind kind;
  HostId host;
  DeviceId device;
  RunId run;
  int node = -1;
  std::string name;
  int64_t start_us = 0;
  int64_t duration_us = 0;
  // kSend and kTransfer: the piece (TraceFlowId), so that the export can
  // draw a transfer from its send to its arrival.
  uint64_t flow = 0;
  // Scheduler events: the scheduler's island.
  IslandId island;
};

// The same at both ends of a piece: its run, reshard node, destination
// shard and piece index.
uint64_t TraceFlowId(RunId run, int node, int dst_shard, int piece);

// Longest event name kept (longer ones are cut): names come from clients.
inline constexpr size_t kMaxTraceName = 256;

// Thread-safe. Recording is off unless enabled.
class TraceRecorder {
 public:
  // At most `max_events` are kept; later ones are counted and dropped.
  explicit TraceRecorder(bool enabled, size_t max_events = size_t{1} << 21)
      : enabled_(enabled), max_events_(max_events) {}
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Starts or stops recording; what was recorded is kept.
  void SetEnabled(bool enabled) { enabled_.store(enabled, std::memory_order_relaxed); }
  // Records only the events of runs of `clients` (OwnerOfId of the event's
  // run) from now on, and drops what it holds of others; nullopt (the
  // default): every client's.
  void SetClients(std::optional<std::vector<ClientId>> clients);

  void Record(TraceEvent event);
  // Adds events recorded elsewhere (another process's, already on this
  // recorder's clock), within the same bound.
  void Merge(std::vector<TraceEvent> events);
  std::vector<TraceEvent> Events() const;
  // Removes and returns up to `max` of the events of runs of `clients`
  // (OwnerOfId of the event's run), oldest first; `*more`: whether any of
  // theirs are left.
  std::vector<TraceEvent> Take(const std::vector<ClientId>& clients, size_t max, bool* more);
  void Clear();
  int64_t dropped() const;
  // The name of a host's group of tracks (e.g. "island 0 / host 1").
  void NameHost(HostId host, std::string name);
  // What a device's track says besides "device N" (its kind and what it
  // is, e.g. "vulkan: NVIDIA H200"); the latest name of a device wins.
  void NameDevice(DeviceId device, std::string name);

  // Chrome trace JSON: one process per host (named), one thread per device
  // ("device N"); a "scheduler" process with a thread per island (runs
  // forwarded; runs in flight as async spans); a process per client (runs
  // submitted). A piece sent to another host is drawn on the receiving
  // device as an "in flight" span from its send to the start of its copy,
  // with a flow arrow from the sender.
  std::string ToChromeJson() const;
  absl::Status WriteChromeJson(const std::string& path) const;

 private:
  std::atomic<bool> enabled_;
  const size_t max_events_;
  mutable Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::pair<HostId, std::string>> host_names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::string> device_names_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::flat_hash_set<ClientId>> only_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_BASE_TRACE_H_
