#include "tools/bench_harness.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
#include "causeway/client/client.h"
#include "causeway/cluster/counters.h"
#include "causeway/cluster/local_cluster.h"
#include "causeway/cluster/remote_cluster.h"
#include "causeway/ir/builder.h"
#include "tools/spmd_loop.h"

namespace causeway::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

struct Bench {
  std::unique_ptr<LocalCluster> cluster;  // embedded
  std::unique_ptr<RemoteCluster> remote;  // distributed
  ClusterConnection* connection = nullptr;
  std::unique_ptr<Client> client;
  CompiledFunction step;      // one computation (opbyop)
  Program program;            // what one dispatch runs
  int computations_per_unit;  // computations per dispatch
  Array input;
};

absl::StatusOr<Bench> Setup(const DispatchBenchOptions& o) {
  if (o.controller == Controller::kMulti && o.cluster != "local") {
    return absl::InvalidArgumentError(
        "the multi-controller baseline runs on the embedded cluster only (tools/spmd_loop.h)");
  }
  if (o.hosts < 1 || o.devices < o.hosts || o.devices % o.hosts != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--devices (", o.devices, ") must be a positive multiple of --hosts (", o.hosts, ")"));
  }
  if (o.chain < 1) return absl::InvalidArgumentError("--chain must be >= 1");
  Bench bench;
  if (o.cluster == "local") {
    LocalClusterOptions co;
    co.islands = 1;
    co.hosts_per_island = o.hosts;
    co.devices_per_host = o.devices / o.hosts;
    co.scheduling = o.fifo ? SchedulingPolicy::kFifo : SchedulingPolicy::kProportionalShare;
    co.device_threads = o.device_threads;
    co.device_kind = o.device_kind;
    CW_ASSIGN_OR_RETURN(bench.cluster, LocalCluster::Create(co));
    bench.connection = bench.cluster.get();
  } else {
    RemoteClusterOptions ro;
    ro.address = o.cluster;
    ro.timeout = absl::Seconds(o.timeout_s);
    ro.token = o.token;
    CW_ASSIGN_OR_RETURN(bench.remote, RemoteCluster::Connect(ro));
    bench.connection = bench.remote.get();
  }
  CW_ASSIGN_OR_RETURN(bench.client, Client::Connect(bench.connection));
  DispatchProgramOptions po;
  po.mode = o.mode;
  po.computation = o.computation;
  po.devices = o.devices;
  po.chain = o.chain;
  po.compute_us = o.compute_us;
  CW_ASSIGN_OR_RETURN(DispatchProgram d, BuildDispatchProgram(*bench.client, po));
  bench.step = d.step;
  bench.program = d.program;
  bench.computations_per_unit = d.computations_per_unit;
  bench.input = d.input;
  return bench;
}

// Single controller: user code makes one call (opbyop) or one program run
// per unit, each on the previous output, never waiting for results.
absl::Status RunSingle(Bench& bench, const DispatchBenchOptions& o, int64_t units) {
  Array x = bench.input;
  for (int64_t i = 0; i < units; ++i) {
    absl::StatusOr<std::vector<Array>> out = o.mode == DispatchGranularity::kOpByOp
                                                  ? bench.client->Call(bench.step, {x})
                                                  : bench.program.Run({x});
    CW_RETURN_IF_ERROR(out.status());
    x = (*out)[0];
  }
  return x.Ready().Await().status();
}

// Multi-controller baseline: every host runs the same loop over the same
// registered plan, enqueuing straight onto its own devices (spmd_loop.h).
// Only the start and the end of each loop involve this thread.
absl::Status RunMulti(Bench& bench, int64_t units, int64_t* next_step) {
  const std::shared_ptr<const ProgramPlan> plan = bench.program.plan();
  SpmdLoop loop;
  loop.client = bench.client->id();
  loop.id_base = SpmdLoopIdBase(bench.client->id());
  loop.input = bench.input.id();
  loop.first = *next_step;
  loop.count = units;
  *next_step += units;
  std::vector<HostService*> hosts;
  for (HostId h : plan->hosts) hosts.push_back(bench.connection->host(h));
  return RunSpmdLoop(*plan, hosts, loop);
}

}  // namespace

absl::StatusOr<DispatchBenchResult> RunDispatchBench(const DispatchBenchOptions& o) {
  CW_ASSIGN_OR_RETURN(Bench bench, Setup(o));
  int64_t next_step = 0;
  auto run = [&](int64_t units) {
    return o.controller == Controller::kSingle ? RunSingle(bench, o, units)
                                               : RunMulti(bench, units, &next_step);
  };
  // Warm up (and calibrate): enough units for ~1024 computations, at least 2.
  const int64_t warm = std::max<int64_t>(2, 1024 / bench.computations_per_unit);
  auto start = SteadyClock::now();
  CW_RETURN_IF_ERROR(run(warm));
  const double warm_seconds = std::max(SecondsSince(start), 1e-6);
  const int64_t units =
      std::max<int64_t>(2, static_cast<int64_t>(o.seconds * warm / warm_seconds));

  CW_RETURN_IF_ERROR(ClusterCounters(*bench.connection, /*reset=*/true).status());
  start = SteadyClock::now();
  CW_RETURN_IF_ERROR(run(units));
  DispatchBenchResult result;
  result.seconds = SecondsSince(start);
  result.computations = units * bench.computations_per_unit;
  result.computations_per_second = result.computations / result.seconds;
  result.hosts = static_cast<int>(bench.program.plan()->hosts.size());
  // Busy time of the mesh's devices (a distributed cluster may have more).
  CW_ASSIGN_OR_RETURN(std::vector<DeviceCounters> counters,
                      ClusterCounters(*bench.connection, /*reset=*/false));
  const std::vector<DeviceId>& mesh = bench.program.plan()->values[0].mesh.devices();
  int64_t busy = 0;
  for (const DeviceCounters& c : counters) {
    if (std::find(mesh.begin(), mesh.end(), c.device) != mesh.end()) busy += c.busy_us;
  }
  result.busy_fraction = busy / (1e6 * result.seconds * o.devices);
  result.compute_fraction =
      static_cast<double>(result.computations) * o.compute_us / (1e6 * result.seconds);
  bench.client->Disconnect();
  return result;
}

double MeasureHandoffMicros() {
  constexpr int kRoundTrips = 2000;
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    Mutex mu;
    int turn = 0;  // guarded by mu
    std::thread peer([&] {
      for (int i = 0; i < kRoundTrips; ++i) {
        MutexLock lock(&mu);
        mu.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return turn == 1; });
        turn = 0;
      }
    });
    const auto start = SteadyClock::now();
    for (int i = 0; i < kRoundTrips; ++i) {
      MutexLock lock(&mu);
      turn = 1;
      mu.Await([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return turn == 0; });
    }
    samples.push_back(SecondsSince(start) * 1e6 / (2.0 * kRoundTrips));
    peer.join();
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace causeway::tools
