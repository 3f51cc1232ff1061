// The machinery shared by `causeway bench dispatch` and `bench utilization`:
// a chain of gang-scheduled computations, each output feeding the next,
// dispatched either by the single controller (client -> island scheduler ->
// hosts) or, as the baseline, by one loop per host dispatching straight to
// its own devices with no client or scheduler in the path — the way
// multi-controller SPMD systems (multi-controller JAX) run.
#ifndef CAUSEWAY_TOOLS_BENCH_HARNESS_H_
#define CAUSEWAY_TOOLS_BENCH_HARNESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "causeway/sim/dispatch.h"
#include "nlohmann/json.hpp"

namespace causeway::tools {

struct DispatchBenchOptions {
  DispatchGranularity mode = DispatchGranularity::kChained;
  Controller controller = Controller::kSingle;
  Computation computation = Computation::kAllReduceAdd;
  int devices = 8;
  int hosts = 1;
  int chain = 128;
  // Each computation also keeps its device busy this long (0: trivial).
  int64_t compute_us = 0;
  double seconds = 2.0;
  // "local": a fresh embedded cluster of `hosts` hosts. grpc://HOST:PORT: a
  // running distributed cluster (token from CAUSEWAY_TOKEN); the mesh takes
  // `devices` devices of one island and `hosts` is ignored.
  std::string cluster = "local";
  // Embedded cluster only: the island scheduler's policy, and the devices'
  // threads (0: one each; N: all devices are fibers of a pool of N,
  // LocalClusterOptions::device_threads).
  bool fifo = false;
  int device_threads = 0;
  // Embedded cluster: the kind of its devices (backend::DeviceKind::name()).
  std::string device_kind = "cpu";
  // Distributed cluster: seconds to wait for the coordinator, and its
  // token (empty: $CAUSEWAY_TOKEN).
  double timeout_s = 30;
  std::string token;
};

struct DispatchBenchResult {
  int64_t computations = 0;
  double seconds = 0;
  double computations_per_second = 0;
  // Sum of the mesh's device busy time / (devices x wall time): time in
  // collectives (waiting for peers) included, so not a measure of work.
  double busy_fraction = 0;
  // The requested computation time of every computation run / wall time
  // (each computation keeps every device of the mesh busy for compute_us):
  // the useful work done per device-second. 0 when compute_us is 0.
  double compute_fraction = 0;
  // Hosts the mesh spans.
  int hosts = 0;
};

// Runs one configuration on a fresh embedded cluster of `hosts` hosts with
// devices/hosts devices each: a warm-up, then about `seconds` of work with a
// run count fixed in advance (every host of the multi-controller baseline
// must run the same number of steps).
absl::StatusOr<DispatchBenchResult> RunDispatchBench(const DispatchBenchOptions& options);

// Median latency of one hand-off between two threads (a flag set under a
// mutex by one thread, seen by a waiter on another), in microseconds: the
// floor for any per-computation cost that crosses threads.
double MeasureHandoffMicros();

// Floors for moving bytes on this machine (bench_collective.cc): bytes per
// second of memcpy of `bytes` (best of several rounds), and of one TCP
// stream over loopback between two threads sending `bytes` per message.
double MemcpyFloor(int64_t bytes);
absl::StatusOr<double> TcpFloor(int64_t bytes);

}  // namespace causeway::tools

#endif  // CAUSEWAY_TOOLS_BENCH_HARNESS_H_
