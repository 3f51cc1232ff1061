// SimCluster: Causeway's real control plane on simulated devices and links,
// on a virtual clock (docs/SIM.md).
//
// The real ResourceManager, IslandSchedulers and HostExecutors (their object
// stores, plans, readiness wiring and run accounting) and the real Client
// run unchanged, on the thread that drives the event loop. What is
// simulated:
//
// - devices (SimDevice, a LaunchQueue): a launch takes the time the cost
//   model gives its function (delay ops exactly; matmuls from FLOPs,
//   everything else from bytes moved); the launches of a gang that has
//   collectives meet, and finish together once the last arrives plus the
//   collectives' time on the island's links;
// - links: a control message costs CPU at each end and the link's latency;
//   a reshard piece also its bytes over the link's bandwidth;
// - CPUs: every thread of the real system (the client, its sender, each
//   island's scheduler, each host's receiver, each device's thread) is a
//   server that does one thing at a time, and the threads of a machine
//   share its cores. What each thing costs comes from SimCosts, measured by
//   running the real code (`causeway sim calibrate`).
//
// Every hop between components is an event, so the real code never calls
// into another component from inside its own call, as with threads.
// Deterministic: the same options and driver give the same events.
#ifndef CAUSEWAY_SIM_SIM_CLUSTER_H_
#define CAUSEWAY_SIM_SIM_CLUSTER_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/plan/plan.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/sim/event_loop.h"
#include "causeway/transport/services.h"

namespace causeway {
class CollectiveHub;
class HostExecutor;
class IslandScheduler;
class ControlPlane;
class ResourceManager;
class TraceRecorder;
}  // namespace causeway

namespace causeway::sim {

// CPU microseconds the real code spends on each thing it does, and the
// machine's hand-off and message costs. See CalibratedCosts().
struct HostCosts {
  double client_run_us = 0;        // client thread: one Run() or Call()
  double client_send_us = 0;       // client sender: one batch to a scheduler
  double scheduler_run_us = 0;     // scheduler: accept, order and forward one run
  double scheduler_report_us = 0;  // scheduler: one host's report of a finished run
  double host_run_us = 0;          // host receiver: one run of a batch
  double host_launch_us = 0;       // host receiver: prepare one launch
  double device_launch_us = 0;     // device thread: take a launch, mark outputs, tally
  double collective_member_us = 0; // device thread: one member's CPU in one collective
  // ... and this much more for each device thread per core of its machine
  // beyond one (context switches grow dearer on oversubscribed cores).
  double collective_member_slope_us = 0;
  // Where the line does not fit a machine: a member's CPU measured at
  // several sizes, (device threads per core, us) in ascending order,
  // interpolated linearly between them and flat beyond the ends; empty: the
  // line. The first for a member whose launch did not sleep in a `delay`
  // before the collective (with no compute, every device thread stays
  // runnable and contends for the cores); the second for one that did (an
  // emulated device's thread sleeps in its `delay` and wakes to a quieter
  // machine), empty: the first. See CollectiveMemberUs().
  std::vector<std::pair<double, double>> collective_member_points;
  std::vector<std::pair<double, double>> collective_member_after_delay_points;
  // At most this much of a member's CPU in a collective is spent once the
  // gang has met (its wake-up and return: serial on the machine's cores
  // after the last arrival); the rest when it arrives (the hub's bookkeeping
  // and parking, and the dearer context switches of oversubscribed cores),
  // which overlaps the other members' compute. 0: all of it once met.
  double collective_after_us = 0;
  double handoff_us = 0;           // latency of waking a parked thread (no CPU)
  double message_us = 0;           // one control message over the network, at each end
  double transfer_us = 0;          // one reshard piece, at each end
};

struct LinkCosts {
  double latency_us = 0;
  double gbytes_per_s = 1;
};

struct DeviceCosts {
  double gflops = 100;         // matmuls
  double gbytes_per_s = 20;    // every other op, from the bytes it reads and writes
  // What a `delay` takes beyond its length on this machine's emulated
  // devices (the sleeping thread's wake-up).
  double delay_overshoot_us = 0;
};

struct SimCosts {
  HostCosts host;
  LinkCosts ici;  // within an island
  LinkCosts dcn;  // between islands, and every control message between machines
  DeviceCosts device;
};

// This machine's costs, measured by `causeway sim calibrate` (the figures
// and the command are in sim/calibration.cc and docs/SIM.md).
SimCosts CalibratedCosts();

// One gang member's CPU in one collective on a machine of
// `threads_per_core` device threads per core (0 with a core per thread),
// `after_delay` if its launch slept in a `delay` since the collective before
// (or its start): from `h`'s points where it has them, else its line.
double CollectiveMemberUs(const HostCosts& h, double threads_per_core, bool after_delay);

// What the control plane's threads are charged for their work.
enum class CpuCosts {
  // The calibrated constants (SimCosts): deterministic.
  kCalibrated,
  // The CPU the real code (client, scheduler, executors) took for each
  // piece of work on this machine's thread, as it ran: how those costs grow
  // with the cluster, at the price of determinism.
  kMeasured,
};

struct SimClusterOptions {
  int islands = 1;
  int hosts_per_island = 1;
  int devices_per_host = 1;
  // true: every thread of the cluster (client, schedulers, hosts, devices)
  // shares one machine of `cores` cores and messages are in-process
  // hand-offs — the embedded cluster on this machine. false: the client
  // and the schedulers run on a machine each, every host is a machine of
  // `cores` cores, and control messages cross the DCN.
  bool one_machine = false;
  int cores = 8;
  // Cores of the client's machine and of the coordinator's (the island
  // schedulers and a writer and a reader thread per host connection);
  // 0: one per thread. Not used with one_machine.
  int client_cores = 0;
  int coordinator_cores = 32;
  SimCosts costs = CalibratedCosts();
  SchedulingPolicy scheduling = SchedulingPolicy::kProportionalShare;
  absl::Duration run_ahead = absl::Milliseconds(10);
  int64_t device_memory_bytes = int64_t{1} << 30;
  // The kind the simulated devices say they are, which the hosts compile
  // their plans for (its kernels never run: a simulated device costs a
  // launch by its ops). Any kind of this build (backend/builtin_kinds.h).
  std::string device_kind = "cpu";
  // Time the real code's CPU (this thread's CPU clock) in each kind of
  // work, for `causeway sim calibrate`. Does not change the simulation.
  bool profile_cpu = false;
  CpuCosts cpu = CpuCosts::kCalibrated;
  // The CPU clock (ns) that measured costs and profiles read; empty: the
  // calling thread's (CLOCK_THREAD_CPUTIME_ID). Tests give one they drive.
  std::function<int64_t()> cpu_clock;
  // Hosts report runs up a tree of this fanout (0: each to the scheduler;
  // HostExecutorOptions::report_fanout).
  int report_fanout = 0;
  // Told when every host reported a run finished (IslandSchedulerOptions).
  std::function<void(ClientId client, int64_t device_us, int launches)> on_run_accounted;
};

// Real CPU the control plane's code took on this machine, by kind of work
// (SimClusterOptions::profile_cpu).
struct CpuProfile {
  struct Kind {
    int64_t ns = 0;
    int64_t count = 0;
    // The simulator's own bookkeeping inside that work, left out of `ns`.
    int64_t bookkeeping_ns = 0;
    // Microseconds each, over `n` (by default its count); 0 for none.
    double us_per(double n) const { return n > 0 ? static_cast<double>(ns) / 1000 / n : 0; }
    double us_each() const { return us_per(static_cast<double>(count)); }
    double bookkeeping_us_each() const {
      return count > 0 ? static_cast<double>(bookkeeping_ns) / 1000 / static_cast<double>(count) : 0;
    }
  };
  Kind client_call;  // a Run() or Call()
  Kind client_send;  // a batch sent (the client's SendBatch)
  Kind scheduler;    // a batch of runs submitted to the real scheduler
  Kind scheduler_report;  // a host's report of a finished run
  Kind host_report;       // a child's report of its subtree, to its parent host
  Kind device;       // a launch taken and finished (the simulated device's part included)
  // Each batch of runs a host's executor prepared: its runs, launches and
  // CPU (to separate the cost per run from the cost per launch).
  struct HostBatch {
    int runs = 0;
    int launches = 0;
    int64_t ns = 0;
  };
  std::vector<HostBatch> host_batches;
};

// What the simulated machines did, for reports.
struct SimCounters {
  int64_t launches = 0;
  int64_t device_busy_ns = 0;     // launch start to finish, summed over devices
  int64_t device_compute_ns = 0;  // the cost model's kernel time, summed
  int64_t messages = 0;           // control messages (batches, between machines) sent
  int64_t requests = 0;           // control requests sent (a batch carries one or more)
  int64_t events = 0;
  // CPU charged to the control plane's threads: the client's two, the
  // busiest island scheduler's, the busiest host receiver's, and the
  // coordinator's connection threads (all, and the busiest).
  int64_t client_busy_ns = 0;
  int64_t scheduler_busy_ns = 0;
  int64_t host_busy_ns = 0;
  int64_t coordinator_connections_busy_ns = 0;
  int64_t coordinator_connection_max_busy_ns = 0;
};

class SimThread;
class SimDevice;
class SimMachine;

// Not thread-safe: one thread builds it, drives its loop and destroys it.
class SimCluster final : public ClusterConnection {
 public:
  static absl::StatusOr<std::unique_ptr<SimCluster>> Create(const SimClusterOptions& options);
  ~SimCluster() override;

  EventLoop& loop() { return loop_; }
  const SimClusterOptions& options() const { return options_; }

  // ClusterConnection. scheduler() and host() return proxies that deliver
  // each call as a message (an event) to the real component.
  ResourceService* resources() override;
  SchedulerService* scheduler(IslandId island) override;
  HostService* host(HostId host) override;
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                         std::function<void(const absl::Status&)> forwarded) override;
  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays) override;
  absl::Status SetClientShare(ClientId client, const ClientShare& share) override;
  void DropClient(ClientId client) override;

  // Clients: each has a thread of its own for its calls and one for its
  // sends, on the client machine. Slot 0 exists from the start; AddClient
  // makes another. Bind names which client (its id) uses a slot, so that
  // what the cluster receives from it leaves from that slot's sender.
  int AddClient();
  void BindClient(ClientId client, int slot);
  // For ClientOptions::send_executor: runs `send` on the slot's sender
  // thread after its cost.
  void PostClientSend(std::function<void()> send, int slot = 0);
  // Charges the slot's call thread one call (client_run_us) and runs `then`
  // when the call would have returned.
  void ClientCall(std::function<void()> then, int slot = 0);
  // A user's loop that never waits: `call` made `n` times on the slot's
  // thread, one after another; runs the event loop until the last returned.
  // The first error stops the loop and is returned.
  absl::Status CallRepeatedly(int64_t n, const std::function<absl::Status()>& call, int slot = 0);
  // Runs the event loop until `done` is ready and returns its status;
  // INTERNAL naming `what` if the events run out first (a broken chain).
  absl::Status Await(const Future<Unit>& done, absl::string_view what);
  // The multi-controller baseline: host `host`'s own loop enqueues `run`
  // straight onto its executor (no client, no scheduler), then releases
  // `release` there; runs `then` when the host's thread is free again.
  void HostEnqueue(HostId host, RunRequest run, std::vector<ArrayId> release,
                   std::function<void()> then);
  // The real executor of `host` (for the SPMD baseline's waits).
  HostExecutor* executor(HostId host);

  // What the simulated machines did since the cluster was made or
  // ResetCounters was last called.
  SimCounters counters() const;
  void ResetCounters();
  const CpuProfile& profile() const { return profile_; }
  // Runs `work`, adding its CPU time (and, if `counts`, one to the count)
  // to `kind` when profiling.
  void Profiled(CpuProfile::Kind* kind, const std::function<void()>& work, bool counts = true);
  CpuProfile& mutable_profile() { return profile_; }
  // The real scheduler's cost of choosing runs on `island`.
  DecisionStats decision_stats(IslandId island) const;
  // The real scheduler's figures for `client` on `island`.
  ClientScheduleStats scheduler_stats(IslandId island, ClientId client) const;
  int num_hosts() const { return static_cast<int>(hosts_.size()); }

  // --- Used by the simulated parts. ---
  struct NodeCost {
    int64_t compute_ns = 0;    // kernel time on one device
    int collectives = 0;       // collectives in the function
    int64_t network_ns = 0;    // their time on the island's links
    int gang = 1;              // devices of the node's mesh
    // Per collective, in program order: the compute before it (since the
    // previous one) and its time on the links; then the compute after the
    // last. Each collective is a meeting of the gang.
    struct Segment {
      int64_t compute_ns = 0;
      int64_t network_ns = 0;
      bool after_delay = false;  // the compute before it includes a `delay`
    };
    std::vector<Segment> segments;
    int64_t tail_compute_ns = 0;
  };
  // The cost of `node` of the run's program; nullptr if unknown.
  const NodeCost* CostOf(RunId run, int node) const;
  void Count(int64_t busy_ns, int64_t compute_ns);
  void NoteDeviceEnd(int64_t ns) { last_device_end_ = std::max(last_device_end_, ns); }
  // When a device last finished a launch.
  int64_t last_device_end() const { return last_device_end_; }
  // A message sent now from thread `from` to thread `to`, which then spends
  // `cost_ns` handling it and runs `then`.
  void Message(SimThread* from, SimThread* to, int64_t cost_ns, std::function<void()> then);
  // Member of the gang of collective #`collective` of (run, node), on a
  // thread of `machine`, arrives at
  // `arrival`; once all `gang` have, each member's `done` is told the gang's
  // finish time (the last arrival plus `network_ns`), how many members of
  // its machine arrived before it, and whether it was the last to arrive.
  void Rendezvous(RunId run, int node, int collective, int gang, int64_t network_ns,
                  int64_t arrival, const SimMachine* machine,
                  std::function<void(int64_t gang_end, int rank_on_machine, bool last)> done);
  const SimCosts& costs() const { return options_.costs; }
  static int64_t Ns(double us) { return static_cast<int64_t>(us * 1000.0 + 0.5); }

 private:
  class SchedulerProxy;
  class HostProxy;
  class Transport;
  struct Gang {
    int arrived = 0;
    // Each member's machine and what it does once the gang has met.
    std::vector<std::pair<const SimMachine*, std::function<void(int64_t, int, bool)>>> waiting;
  };

  explicit SimCluster(const SimClusterOptions& options);
  void Build();
  void NotePlan(const ProgramPlan& plan);
  void NoteRuns(const std::vector<RunRequest>& runs);
  // A host reported its part of `run` (to the scheduler or up the tree).
  void NoteReported(RunId run);
  int LaunchesOn(const RunRequest& run, HostId host) const;
  IslandScheduler* island_scheduler(IslandId island);
  // Runs `work` on `thread` once it is free, charging `cost_ns` (or, with
  // CpuCosts::kMeasured, the CPU `work` took, less the simulator's own
  // bookkeeping inside it).
  void OnThread(SimThread* thread, int64_t cost_ns, std::function<void()> work);
  // The simulator's own work done inside the real code's (a proxy's
  // message, the event queue, the counters), which a measured thread is not
  // charged and a CPU profile does not count: the real servers' equivalent
  // is a send, calibrated separately. Nested scopes count once.
  class Bookkeeping;
  bool measuring() const;
  int64_t CpuNow() const;
  int bookkeeping_depth_ = 0;
  int64_t bookkeeping_start_ns_ = 0;
  int64_t bookkeeping_ns_ = 0;  // thread CPU, all scopes so far
  // The writer (or reader) thread on `machine` of its connection with the
  // thread `peer` on another machine, made on first use.
  SimThread* Connection(SimMachine* machine, SimThread* peer, bool reader);
  // The connection `writer` (to thread `to`) sends what has queued.
  void SendBatch(SimThread* writer, SimThread* to);

  const SimClusterOptions options_;
  EventLoop loop_;
  std::vector<std::unique_ptr<SimMachine>> machines_;
  std::vector<std::unique_ptr<SimThread>> threads_;
  absl::flat_hash_map<std::tuple<SimMachine*, SimThread*, bool>, SimThread*> connections_;
  // Per connection writer: messages queued for its next batch (each with
  // the receiving thread's cost), and whether that batch is on its way.
  struct Outbox {
    std::vector<std::pair<int64_t, std::function<void()>>> items;
    bool open = false;
  };
  absl::flat_hash_map<SimThread*, Outbox> outboxes_;
  SimThread* client_thread_ = nullptr;  // slot 0's
  SimThread* client_sender_ = nullptr;  // slot 0's
  SimMachine* client_machine_ = nullptr;
  std::vector<std::pair<SimThread*, SimThread*>> client_slots_;  // (calls, sends)
  absl::flat_hash_map<ClientId, int> client_slot_;
  SimThread* SenderOf(ClientId client) const;
  std::vector<SimThread*> scheduler_threads_;  // by island
  std::vector<SimThread*> host_threads_;       // by host
  std::vector<IslandId> host_island_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<CollectiveHub> hub_;
  std::unique_ptr<TraceRecorder> trace_;
  // The real control plane (resources, island schedulers, shares).
  std::unique_ptr<ControlPlane> control_;
  std::vector<IslandScheduler*> schedulers_;  // control_'s, by island
  std::vector<std::unique_ptr<HostExecutor>> hosts_;
  std::vector<std::unique_ptr<SchedulerProxy>> scheduler_proxies_;
  std::vector<std::unique_ptr<HostProxy>> host_proxies_;            // the client's
  std::vector<std::unique_ptr<HostProxy>> scheduler_host_proxies_;  // the schedulers'

  std::vector<SimDevice*> devices_;
  // Per program: per node its cost; per host its launches per run.
  struct PlanCost {
    std::vector<NodeCost> nodes;
    absl::flat_hash_map<HostId, int> launches;
  };
  absl::flat_hash_map<ProgramId, PlanCost> plans_;
  struct RunEntry {
    ProgramId program;
    int hosts_left = 0;  // hosts that have not reported the run done
  };
  absl::flat_hash_map<RunId, RunEntry> run_program_;
  absl::flat_hash_map<std::tuple<RunId, int, int>, Gang> gangs_;
  SimCounters counters_;
  CpuProfile profile_;
  int64_t last_device_end_ = 0;
  int64_t events_base_ = 0;  // events run before the last ResetCounters
};

// The cost model of one launch of `f` on a gang of `gang` devices.
SimCluster::NodeCost FunctionCost(const ir::Function& f, int gang, const SimCosts& costs);

}  // namespace causeway::sim

#endif  // CAUSEWAY_SIM_SIM_CLUSTER_H_
