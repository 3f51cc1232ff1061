#include "causeway/cluster/local_cluster.h"

#include <algorithm>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/base/mutex.h"
#include "causeway/base/status_macros.h"
#include "causeway/control/control_plane.h"
#include "causeway/transport/inproc/inproc_transport.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"

namespace causeway {

struct LocalCluster::State {
  explicit State(const LocalClusterOptions& options)
      : trace(options.trace),
        hub(options.collective_timeout),
        transport(options.dcn, options.clock) {
    if (options.device_threads > 0) pool = std::make_unique<FiberPool>(options.device_threads);
  }

  // The devices' pool, if any: destroyed after the hosts.
  std::unique_ptr<FiberPool> pool;
  TraceRecorder trace;
  CollectiveHub hub;
  InProcessDataTransport transport;
  // Resources, schedulers, shares; made after the hosts, never replaced.
  std::unique_ptr<ControlPlane> control;
  // Each island's scheduler by island id, for the devices' reports of
  // finished runs (filled once, before any run).
  std::vector<IslandScheduler*> by_island;
  std::vector<std::unique_ptr<HostExecutor>> hosts;
  std::vector<IslandId> host_island;  // by host id
  // One housekeeping thread for every host (HostExecutor::Housekeep).
  std::thread housekeeper;
  // Whether every host and its devices were made (the first error if not:
  // the cluster then has only the hosts made before it, and Create fails).
  absl::Status made;
  Notification stop_housekeeping;
};

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Create(
    const LocalClusterOptions& options) {
  if (options.islands < 1 || options.hosts_per_island < 1 || options.devices_per_host < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a local cluster needs at least one island, host and device; given ", options.islands,
        " islands x ", options.hosts_per_island, " hosts x ", options.devices_per_host,
        " devices"));
  }
  if (options.device_memory_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("device memory must be positive; given ", options.device_memory_bytes));
  }
  const int64_t devices =
      int64_t{options.islands} * options.hosts_per_island * options.devices_per_host;
  if (options.device_threads < 0 || options.device_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device threads must be 0 (a thread per device) to 1024; given ", options.device_threads));
  }
  if (devices > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local cluster of ", devices, " devices is too large (at most 4096)"));
  }
  CW_RETURN_IF_ERROR(CheckReportFanout(options.report_fanout));
  backend::RegisterBuiltinKinds();  // the built-in kinds, registered
  if (!options.island_device_kinds.empty() &&
      static_cast<int>(options.island_device_kinds.size()) != options.islands) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.island_device_kinds.size(), " island device kinds given for ",
                     options.islands, " islands"));
  }
  for (const std::string& kind : options.island_device_kinds.empty()
                                     ? std::vector<std::string>{options.device_kind}
                                     : options.island_device_kinds) {
    CW_RETURN_IF_ERROR(CheckDeviceKindName(kind));
    CW_RETURN_IF_ERROR(backend::FindDeviceKind(kind).status());
  }
  auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster(options));
  CW_RETURN_IF_ERROR(cluster->s_->made);
  return cluster;
}


LocalCluster::LocalCluster(const LocalClusterOptions& options)
    : options_(options), s_(std::make_unique<State>(options)) {
  Topology topology;
  int64_t next_host = 0;
  int64_t next_device = 0;
  for (int i = 0; i < options.islands; ++i) {
    const IslandId island(i);
    topology.AddIsland(island);
    for (int h = 0; h < options.hosts_per_island; ++h) {
      const HostId host(next_host++);
      topology.AddHost(host, island);
      for (int d = 0; d < options.devices_per_host; ++d) {
        topology.AddDevice(DeviceId(next_device++), host, options.device_memory_bytes,
                           options.island_device_kinds.empty() ? options.device_kind
                                                               : options.island_device_kinds[i]);
      }
    }
  }
  for (IslandId island : topology.islands()) {
    const IslandInfo info = *topology.island(island);
    for (HostId h : info.hosts) {
      s_->trace.NameHost(h, absl::StrCat("island ", island.value(), " / host ", h.value()));
      HostExecutorOptions ho;
      ho.host = *topology.host(h);
      for (DeviceId d : ho.host.devices) ho.devices.push_back(*topology.device(d));
      ho.device_memory_bytes = options.device_memory_bytes;
      ho.clock = options.clock;
      ho.trace = &s_->trace;
      ho.collectives = &s_->hub;
      ho.transport = &s_->transport;
      ho.fault_injector = options.fault_injector;
      ho.memory_stall_timeout = options.memory_stall_timeout;
      ho.input_timeout = options.input_timeout;
      ho.early_piece_budget_bytes = options.early_piece_budget_bytes;
      ho.housekeeping_period = absl::ZeroDuration();  // one thread below, for all hosts
      ho.device_pool = s_->pool.get();
      ho.on_run_done = [this, island](HostId h, RunId run, int64_t device_us, int launches) {
        s_->by_island[island.value()]->RunFinished(h, run, device_us, launches);
      };
      ho.report_fanout = options.report_fanout;
      ho.report_to_parent = [this](HostId parent, const SubtreeReport& report) {
        if (HostExecutor* p = executor(parent)) p->ChildReported(report);
      };
      absl::StatusOr<std::unique_ptr<HostExecutor>> executor =
          HostExecutor::Create(std::move(ho));
      if (!executor.ok()) {
        s_->made = executor.status();
        return;
      }
      for (int i = 0; i < (*executor)->num_devices(); ++i) {
        const DeviceInfo& d = (*executor)->stream(i).device();
        topology.SetDescription(d.id, d.description);
        s_->trace.NameDevice(d.id, absl::StrCat(d.kind, ": ", d.description));
      }
      s_->host_island.push_back(island);
      s_->hosts.push_back(*std::move(executor));
      s_->transport.RegisterHost(s_->hosts.back().get(), island);
    }
  }
  ControlPlaneOptions co;
  co.scheduler.policy = options.scheduling;
  co.scheduler.run_ahead = options.run_ahead;
  co.scheduler.on_run_accounted = options.on_run_accounted;
  co.scheduler.report_fanout = options.report_fanout;
  co.scheduler.trace = &s_->trace;
  co.scheduler.clock = options.clock;
  // Only the island's own hosts: a plan that places island work on a host
  // of another island is refused at registration.
  co.host_lookup = [this](IslandId island, HostId h) -> HostService* {
    HostExecutor* e = executor(h);
    return e != nullptr && s_->host_island[h.value()] == island ? e : nullptr;
  };
  co.for_each_host = [this](const std::function<void(HostService&)>& apply) {
    for (auto& h : s_->hosts) apply(*h);
  };
  s_->control = std::make_unique<ControlPlane>(std::move(topology), std::move(co));
  for (const auto& [island, scheduler] : s_->control->schedulers()) {
    s_->by_island.push_back(scheduler);
  }
  s_->housekeeper = std::thread([this] {
    while (!s_->stop_housekeeping.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      for (auto& h : s_->hosts) h->Housekeep(absl::Now());
    }
  });
}

LocalCluster::~LocalCluster() { Shutdown(); }

void LocalCluster::Shutdown() {
  s_->stop_housekeeping.Notify();
  if (s_->housekeeper.joinable()) s_->housekeeper.join();
  // Delayed transfers are delivered at once; then collectives and waiting
  // allocations fail so that every queued launch can drain.
  s_->transport.Shutdown();
  s_->hub.Shutdown();
  for (auto& h : s_->hosts) h->store().Shutdown();
  for (auto& h : s_->hosts) h->Shutdown();
}

SchedulerService* LocalCluster::scheduler(IslandId island) { return island_scheduler(island); }
ResourceService* LocalCluster::resources() { return &s_->control->resources(); }
TraceRecorder* LocalCluster::client_trace() { return &s_->trace; }
ResourceManager& LocalCluster::resource_manager() { return s_->control->resources(); }
const std::vector<std::unique_ptr<HostExecutor>>& LocalCluster::executors() const {
  return s_->hosts;
}
TraceRecorder& LocalCluster::trace() { return s_->trace; }
CollectiveHub& LocalCluster::collective_hub() { return s_->hub; }
InProcessDataTransport& LocalCluster::transport() { return s_->transport; }

IslandScheduler* LocalCluster::island_scheduler(IslandId island) {
  return s_->control->scheduler(island);
}

void LocalCluster::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                                 std::vector<ArrayId> arrays) {
  s_->control->ReleaseArrays(client, hosts, std::move(arrays));
}

absl::Status LocalCluster::SetClientShare(ClientId client, const ClientShare& share) {
  return s_->control->SetShare(client, share);
}

void LocalCluster::DropClient(ClientId client) { s_->control->DropClient(client); }

HostService* LocalCluster::host(HostId host) { return executor(host); }

HostExecutor* LocalCluster::executor(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(s_->hosts.size())) return nullptr;
  return s_->hosts[host.value()].get();
}

absl::Status LocalCluster::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                     std::function<void(const absl::Status&)> forwarded) {
  return s_->control->SubmitRun(run, islands, std::move(forwarded));
}

std::vector<DeviceCounters> LocalCluster::Counters() const {
  std::vector<DeviceCounters> out;
  for (const auto& h : s_->hosts) {
    for (int i = 0; i < h->num_devices(); ++i) {
      DeviceCounters c = h->stream(i).stats();
      c.memory_in_use = h->store().memory(i)->in_use();
      c.memory_peak = h->store().memory(i)->peak();
      out.push_back(std::move(c));
    }
  }
  return out;
}

void LocalCluster::ResetStats() {
  for (auto& h : s_->hosts) {
    for (int i = 0; i < h->num_devices(); ++i) h->stream(i).ResetStats();
  }
}

int64_t LocalCluster::MemoryInUse() const {
  int64_t total = 0;
  for (const auto& h : s_->hosts) total += h->store().memory_in_use();
  return total;
}

}  // namespace causeway
