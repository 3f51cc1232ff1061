// TraceRecorder: per-device timelines of what the runtime did (a launch
// prepared, waiting for inputs, running, a transfer), exported as Chrome
// trace JSON for Perfetto / chrome://tracing. Tests also read the recorded
// events to assert orderings (e.g. every launch was prepared before the
// first one finished).
#ifndef CAUSEWAY_WORKER_TRACE_H_
#define CAUSEWAY_WORKER_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"

namespace causeway {

enum class TraceKind {
  kPrepared,  // instant: launch queued on its device stream
  kWait,      // span: waiting for inputs and output memory
  kRun,       // span: kernel running
  kTransfer,  // span: a reshard piece copied into its destination
};

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
};

// Thread-safe. Recording is off unless enabled.
class TraceRecorder {
 public:
  explicit TraceRecorder(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }

  void Record(TraceEvent event);
  std::vector<TraceEvent> Events() const;
  void Clear();

  // Chrome trace JSON: one process per host, one thread per device.
  std::string ToChromeJson() const;
  absl::Status WriteChromeJson(const std::string& path) const;

 private:
  const bool enabled_;
  mutable Mutex mu_;
  std::vector<TraceEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_TRACE_H_
