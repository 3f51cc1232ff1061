// LocalCluster: the embedded default. Runs the resource manager, one island
// scheduler per island and N hosts (each with its devices, object store and
// device streams) inside the client's process, over the in-process
// transport. What `causeway demo` and most tests use.
//
// A public header: it names the runtime's internals (scheduler, hosts,
// collectives) only as incomplete types, for tests and tools that include
// their headers themselves.
#ifndef CAUSEWAY_CLUSTER_LOCAL_CLUSTER_H_
#define CAUSEWAY_CLUSTER_LOCAL_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/base/clock.h"
#include "causeway/base/trace.h"
#include "causeway/transport/services.h"

namespace causeway {

class CollectiveHub;
class HostExecutor;
class InProcessDataTransport;
class IslandScheduler;
class ResourceManager;

struct LocalClusterOptions {
  int islands = 2;
  int hosts_per_island = 2;
  int devices_per_host = 4;
  int64_t device_memory_bytes = int64_t{1} << 30;
  // Which backend runs the devices' code: a registered DeviceKind's name
  // (causeway/backend/executable.h; the CPU backend registers itself).
  std::string device_kind = std::string(kDefaultDeviceKind);
  // If not empty, the kind of each island's devices instead (one name per
  // island): a program may then span meshes of different kinds, each call
  // compiled by its hosts for theirs.
  std::vector<std::string> island_device_kinds;
  // Emulated data-center network between islands.
  DcnOptions dcn;
  // Record per-device timelines (see TraceRecorder).
  bool trace = false;
  // Upper bound on any wait inside a collective.
  absl::Duration collective_timeout = absl::Seconds(60);
  FaultInjector fault_injector;
  Clock* clock = Clock::Real();
  // Reclamation bounds of every host (see HostExecutorOptions).
  absl::Duration memory_stall_timeout = absl::Seconds(60);
  absl::Duration input_timeout = absl::Minutes(5);
  int64_t early_piece_budget_bytes = int64_t{256} << 20;
  // How each island scheduler orders runs (see IslandSchedulerOptions).
  SchedulingPolicy scheduling = SchedulingPolicy::kProportionalShare;
  absl::Duration run_ahead = absl::Milliseconds(10);
  // Hosts report runs up a tree of this fanout, its root to the island's
  // scheduler; 0: each host to the scheduler (HostExecutorOptions).
  int report_fanout = 0;
  // See IslandSchedulerOptions::on_run_accounted (every island's).
  std::function<void(ClientId client, int64_t device_us, int launches)> on_run_accounted;
  // 0: every device runs on a thread of its own. N > 0: every device of
  // every host is a fiber of one pool of N threads (causeway/base/fiber.h),
  // so that a wait parks a fiber, not a thread: how more devices than cores
  // are emulated without a kernel context switch per wait.
  int device_threads = 0;
};

// Thread-safe. Outlives every client connected to it.
class LocalCluster final : public ClusterConnection {
 public:
  // INVALID_ARGUMENT for non-positive counts or memory.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Create(const LocalClusterOptions& options);
  ~LocalCluster() override;

  ResourceService* resources() override;
  SchedulerService* scheduler(IslandId island) override;
  HostService* host(HostId host) override;
  using ClusterConnection::SubmitRun;
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                         std::function<void(const absl::Status&)> forwarded) override;
  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays) override;
  absl::Status SetClientShare(ClientId client, const ClientShare& share) override;
  void DropClient(ClientId client) override;
  TraceRecorder* client_trace() override;
  IslandScheduler* island_scheduler(IslandId island);

  ResourceManager& resource_manager();
  HostExecutor* executor(HostId host);
  const std::vector<std::unique_ptr<HostExecutor>>& executors() const;
  TraceRecorder& trace();
  CollectiveHub& collective_hub();
  InProcessDataTransport& transport();
  const LocalClusterOptions& options() const { return options_; }

  // Every device's counters and memory, in device id order (what each
  // host's GetCounters reports, read directly).
  std::vector<DeviceCounters> Counters() const;
  void ResetStats();
  // Sum of memory in use over every device.
  int64_t MemoryInUse() const;

  // Stops everything: pending allocations and collectives fail, queued
  // launches drain. Idempotent; the destructor calls it.
  void Shutdown();

 private:
  explicit LocalCluster(const LocalClusterOptions& options);

  const LocalClusterOptions options_;
  // The scheduler, hosts, collectives and transport (local_cluster.cc).
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_LOCAL_CLUSTER_H_
