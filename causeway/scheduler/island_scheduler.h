// IslandScheduler: one per island. Puts every gang (one function call on all
// devices of its mesh) of every run on the island into one order, and
// forwards each run to the hosts it touches in that order, so every device
// of the island meets its peers in its collectives in the same order — across
// programs and clients — and gang-scheduled collectives cannot deadlock.
//
// Two policies decide the order (docs/SCHEDULING.md):
//
// - kFifo forwards runs as they arrive.
// - kProportionalShare (the default) holds each client's runs in a queue of
//   its own and forwards them only as the island has room: forwarded runs
//   that have not finished may add up to `run_ahead` of estimated time (and
//   at least `min_in_flight` runs are always out); once half of it has
//   drained, the island is refilled in one batch. Which client's run goes
//   next is chosen by ShareQueue: strict priority classes, then stride
//   scheduling over device time by weight. Estimates come from the measured
//   device time of earlier runs of the same program, which hosts report
//   (RunFinished); a client's charge is corrected to the measured time.
//
// A client's own runs keep its order. A release of an array that one of the
// client's queued runs reads waits behind that run; other releases go at once.
// Runs that span islands are forwarded on every island in the order they
// were submitted (SubmitToIslands), whatever the shares, which gives them
// one global order.
#ifndef CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_
#define CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "causeway/base/clock.h"
#include "causeway/base/mutex.h"
#include "causeway/base/trace.h"
#include "causeway/scheduler/share_queue.h"
#include "causeway/transport/services.h"

namespace causeway {

struct IslandSchedulerOptions {
  IslandId island;
  SchedulingPolicy policy = SchedulingPolicy::kProportionalShare;
  // Looks up a host of this island. Must outlive the scheduler.
  std::function<HostService*(HostId)> host_lookup;
  // kProportionalShare: how far ahead of the devices the island runs.
  absl::Duration run_ahead = absl::Milliseconds(10);
  int min_in_flight = 2;
  // The estimate for a program never measured: this long on each device.
  int64_t default_estimate_us = 1000;
  // Runs (and releases) one client may have queued here; beyond,
  // RESOURCE_EXHAUSTED.
  size_t max_queued_per_client = size_t{1} << 18;
  // Told, outside the lock, when every host of a run reported it finished:
  // its client, measured device time and launches. For benchmarks and
  // metrics; may be empty.
  std::function<void(ClientId client, int64_t device_us, int launches)> on_run_accounted;
  // kProportionalShare: runs that finished runs let go are delivered to
  // their hosts by a thread of the scheduler's (RunFinished is called on
  // device threads); false: by the thread reporting, before it returns
  // (deterministic, for tests).
  bool deliver_on_own_thread = true;
  // 0: every host of a run reports its own part (RunFinished). k >= 1: the
  // hosts of a program report its runs up a k-ary tree of them
  // (ReportTreeOf; HostExecutorOptions::report_fanout, which must be the
  // same), and only its root reports to the scheduler, for the whole
  // island: a run costs the scheduler one report instead of one per host.
  int report_fanout = 0;
  // Where to record the island's track (runs forwarded, runs in flight);
  // nullptr: nowhere. Must outlive the scheduler.
  TraceRecorder* trace = nullptr;
  Clock* clock = Clock::Real();
};

// What the scheduler's choices cost: time spent choosing which run goes
// next (the stride scan, estimates, the window), over the runs chosen.
struct DecisionStats {
  int64_t decisions = 0;
  int64_t nanos = 0;
};

// Per-client figures, for tests, benchmarks and status.
struct ClientScheduleStats {
  int64_t forwarded = 0;     // runs forwarded to hosts
  int64_t finished = 0;      // runs every host reported done
  int64_t device_us = 0;     // measured device time of finished runs
  // What the shares were computed on: the same, each run's outlier
  // measurement clipped (docs/SCHEDULING.md, "Outliers").
  int64_t charged_us = 0;
  size_t queued = 0;         // runs and releases held now
  ClientShare share;
};

// Thread-safe.
class IslandScheduler final : public SchedulerService {
 public:
  explicit IslandScheduler(IslandSchedulerOptions options);
  ~IslandScheduler() override;

  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override;
  void UnregisterProgram(ProgramId program) override;
  // INVALID_ARGUMENT if the program has no work on this island or names a
  // host the lookup does not know.
  //
  // SubmitRun(s): NOT_FOUND for an unregistered program; INVALID_ARGUMENT
  // for a run whose argument or output count differs from the program's;
  // UNAVAILABLE if one of the run's hosts is gone; RESOURCE_EXHAUSTED if
  // the client has max_queued_per_client runs queued. A refused run reaches
  // no host. An accepted run may still be dropped before it is forwarded
  // (its program unregistered, a host lost, its client dropped): `forwarded`
  // says which.
  absl::Status SubmitRun(RunRequest run) override;
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs,
                                       RunsForwarded forwarded = nullptr) override;
  // What SubmitRun would refuse `run` for, without submitting it: lets a
  // run that spans islands be checked on every island before it is
  // submitted to any.
  absl::Status CheckRun(const RunRequest& run) const;
  // Queues a run that spans islands: forwarded here only after every such
  // run submitted before it. The caller serialises these calls (one global
  // order) and has checked the run (CheckRun). Errors as SubmitRun, except
  // that the queue bound is not applied (a refusal here would leave the
  // run half-submitted on the islands that took it).
  absl::Status SubmitSpanning(RunRequest run, std::function<void(const absl::Status&)> forwarded);

  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays);
  void SetShare(ClientId client, const ClientShare& share);
  // Drops the client's queued runs (their `forwarded` says CANCELLED) and
  // releases, and returns once nothing of the client is being forwarded:
  // afterwards no run of it reaches a host. Must not be called from a
  // `forwarded` callback.
  void DropClient(ClientId client);

  // `host` finished its part of `run` (every launch ran or failed), which
  // took `device_us` of device time over `launches` launches. Reports of
  // unknown runs (bypassing the scheduler, or already accounted) and
  // repeated reports of a host are ignored.
  void RunFinished(HostId host, RunId run, int64_t device_us, int launches);
  // `host` is gone: the runs still out on it count as finished there (it
  // will never report them).
  void HostLost(HostId host);

  IslandId island() const { return options_.island; }
  ClientScheduleStats client_stats(ClientId client) const;
  // Every connected client this scheduler has run or queued work for.
  std::vector<std::pair<ClientId, ClientScheduleStats>> all_client_stats() const;
  // Runs forwarded and not yet finished.
  int in_flight() const;
  DecisionStats decision_stats() const;

 private:
  // Each host's position in a program's host list.
  using HostIndex = absl::flat_hash_map<HostId, int>;
  struct Program {
    std::vector<HostId> hosts;  // of this island, that the program touches
    // The hosts that report its runs (the distinct `hosts`, or with a
    // report tree its root); shared with the program's runs in flight,
    // which may outlive its registration.
    std::shared_ptr<const HostIndex> host_index;
    size_t arguments = 0;
    size_t outputs = 0;
    // Devices of this island its calls run on (with no call here, one per
    // host): a run's wall time is taken as its device time over them.
    int devices = 1;
    // Estimated device time of one run (all its devices) and wall time;
    // samples: how many measurements they average (0: the default).
    double device_us = 0;
    double wall_us = 0;
    int64_t samples = 0;
  };
  // A client's queued item: a run, or a release of arrays.
  struct Pending {
    RunRequest run;
    std::function<void(const absl::Status&)> forwarded;
    int64_t spanning = -1;  // position among spanning runs on this island
    std::vector<HostId> release_hosts;
    std::vector<ArrayId> release;  // non-empty: a release
    int64_t arrived_us = 0;  // when queued, while tracing
  };
  // Something to do outside the lock, in order.
  struct Outgoing {
    absl::InlinedVector<HostService*, 8> hosts;
    RunRequest run;
    std::vector<ArrayId> release;  // non-empty: a release to `hosts`
    std::function<void(const absl::Status&)> forwarded;
    absl::Status status;  // not OK: the run is dropped, only `forwarded` is told
  };
  struct InFlight {
    ClientId client;
    ProgramId program;
    // Which of the program's hosts have reported (a bit per HostIndex
    // position), and how many have not: a report costs the same whatever
    // the number of hosts.
    std::shared_ptr<const HostIndex> host_index;
    absl::InlinedVector<uint64_t, 1> reported;
    int hosts_left = 0;
    // True if `host` is one of the run's and has not reported it.
    bool Owes(HostId host) const {
      const auto h = host_index->find(host);
      return h != host_index->end() &&
             (reported[static_cast<size_t>(h->second / 64)] & (uint64_t{1} << (h->second % 64))) ==
                 0;
    }
    double estimate_device_us = 0;
    double estimate_wall_us = 0;
    int64_t device_us = 0;
    int launches = 0;
    int64_t forwarded_us = 0;  // while tracing
  };
  // The hosts `run` goes to, or why it cannot go. Inline: on the dispatch
  // path of every run, no allocation for islands of up to 8 hosts.
  using Hosts = absl::InlinedVector<HostService*, 8>;
  absl::StatusOr<Hosts> Route(const RunRequest& run) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Accounts `run` as finished on `host`; true if that was its last host.
  // Fills the accounting of a finished run.
  bool FinishLocked(HostId host, RunId run, int64_t device_us, int launches,
                    ClientId* client, int64_t* total_us, int* total_launches)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Enqueue(RunRequest run, std::function<void(const absl::Status&)> forwarded,
                       bool spanning) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves what may go now from the queues to outbox_.
  void PickLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForwardLocked(Pending p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends to outbox_, waking the delivery thread if it was empty.
  void PushOutgoingLocked(Outgoing out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delivers outbox_ in order, on one thread at a time.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // Hosts' part of a batch, in order; then the callbacks (never under mu_).
  void SendToHosts(std::vector<Outgoing>& batch);
  static void Tell(std::vector<Outgoing>& batch);
  bool tracing() const { return options_.trace != nullptr && options_.trace->enabled(); }
  double EstimateDeviceUs(const Program& p) const;
  double EstimateWallUs(const Program& p) const;

  const IslandSchedulerOptions options_;
  mutable Mutex mu_;
  absl::flat_hash_map<ProgramId, Program> programs_ ABSL_GUARDED_BY(mu_);
  ShareQueue<Pending> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RunId, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  double in_flight_wall_us_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ClientId, ClientScheduleStats> stats_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t spanning_submitted_ ABSL_GUARDED_BY(mu_) = 0;
  // The next spanning position to forward; positions of spanning runs that
  // were dropped unforwarded (their client left) are skipped.
  int64_t spanning_forwarded_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<int64_t> spanning_dropped_ ABSL_GUARDED_BY(mu_);
  void SpanningDoneLocked(int64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED if `client` has max_queued_per_client items queued.
  absl::Status CheckQueueRoomLocked(ClientId client) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  // Batches taken from outbox_ and delivered, for DropClient's wait.
  int64_t batches_taken_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_delivered_ ABSL_GUARDED_BY(mu_) = 0;
  DecisionStats decision_stats_ ABSL_GUARDED_BY(mu_);
  void DeliverLoop();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  CondVar deliver_cv_;  // outbox_ gained its first item, or stopping_
  std::thread deliverer_;
  // How many queued runs read each array: a release of an array no queued
  // run reads goes at once (holding it could deadlock a device waiting for
  // the memory it frees); one that a queued run reads waits behind it.
  absl::flat_hash_map<ArrayId, int> held_reads_ ABSL_GUARDED_BY(mu_);
  void CountReads(const RunRequest& run, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// Submits a run that spans the islands of `schedulers` (one per island, in
// the client's order; null for an island that does not exist): checked on
// every island first, so a run refused anywhere reaches no host (a
// half-submitted run would leave its other islands waiting for pieces that
// never come). `forwarded` is told once, when every island forwarded it (or
// the first reason one did not). The caller serialises multi-island
// submissions, which gives such runs one global order.
absl::Status SubmitToIslands(const RunRequest& run, const std::vector<IslandId>& islands,
                             const std::vector<IslandScheduler*>& schedulers,
                             std::function<void(const absl::Status&)> forwarded = nullptr);

}  // namespace causeway

#endif  // CAUSEWAY_SCHEDULER_ISLAND_SCHEDULER_H_
