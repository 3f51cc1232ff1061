#include "causeway/cluster/local_cluster.h"

#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/status_macros.h"

namespace causeway {

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
  if (devices > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("a local cluster of ", devices, " devices (one thread each) is too large"));
  }
  backend::cpu::Kind();  // the built-in kind, registered
  CW_RETURN_IF_ERROR(CheckDeviceKindName(options.device_kind));
  CW_RETURN_IF_ERROR(backend::FindDeviceKind(options.device_kind).status());
  return std::unique_ptr<LocalCluster>(new LocalCluster(options));
}

LocalCluster::LocalCluster(const LocalClusterOptions& options)
    : options_(options),
      trace_(options.trace),
      hub_(options.collective_timeout),
      transport_(options.dcn, options.clock) {
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
                           options.device_kind);
      }
    }
  }
  for (IslandId island : topology.islands()) {
    const IslandInfo info = *topology.island(island);
    for (HostId h : info.hosts) {
      trace_.NameHost(h, absl::StrCat("island ", island.value(), " / host ", h.value()));
      HostExecutorOptions ho;
      ho.host = *topology.host(h);
      for (DeviceId d : ho.host.devices) ho.devices.push_back(*topology.device(d));
      ho.device_memory_bytes = options.device_memory_bytes;
      ho.clock = options.clock;
      ho.trace = &trace_;
      ho.collectives = &hub_;
      ho.transport = &transport_;
      ho.fault_injector = options.fault_injector;
      ho.memory_stall_timeout = options.memory_stall_timeout;
      ho.input_timeout = options.input_timeout;
      ho.early_piece_budget_bytes = options.early_piece_budget_bytes;
      ho.housekeeping_period = absl::ZeroDuration();  // one thread below, for all hosts
      ho.on_run_done = [this, island](HostId h, RunId run, int64_t device_us, int launches) {
        if (IslandScheduler* s = island_scheduler(island)) {
          s->RunFinished(h, run, device_us, launches);
        }
      };
      host_island_.push_back(island);
      hosts_.push_back(std::make_unique<HostExecutor>(std::move(ho)));
      transport_.RegisterHost(hosts_.back().get(), island);
    }
    IslandSchedulerOptions so;
    so.island = island;
    so.host_lookup = [this](HostId h) -> HostService* { return host(h); };
    so.policy = options.scheduling;
    so.run_ahead = options.run_ahead;
    so.on_run_accounted = options.on_run_accounted;
    so.trace = &trace_;
    so.clock = options.clock;
    schedulers_.push_back(std::make_unique<IslandScheduler>(std::move(so)));
  }
  resources_ = std::make_unique<ResourceManager>(std::move(topology));
  housekeeper_ = std::thread([this] {
    while (!stop_housekeeping_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      for (auto& h : hosts_) h->Housekeep(absl::Now());
    }
  });
}

LocalCluster::~LocalCluster() { Shutdown(); }

void LocalCluster::Shutdown() {
  stop_housekeeping_.Notify();
  if (housekeeper_.joinable()) housekeeper_.join();
  // Delayed transfers are delivered at once; then collectives and waiting
  // allocations fail so that every queued launch can drain.
  transport_.Shutdown();
  hub_.Shutdown();
  for (auto& h : hosts_) h->store().Shutdown();
  for (auto& h : hosts_) h->Shutdown();
}

SchedulerService* LocalCluster::scheduler(IslandId island) { return island_scheduler(island); }

IslandScheduler* LocalCluster::island_scheduler(IslandId island) {
  for (auto& s : schedulers_) {
    if (s->island() == island) return s.get();
  }
  return nullptr;
}

void LocalCluster::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                                 std::vector<ArrayId> arrays) {
  // An array lives on one island; its release queues behind the client's
  // runs there.
  absl::InlinedVector<IslandId, 2> islands;
  for (HostId h : hosts) {
    if (h.value() < 0 || h.value() >= static_cast<int64_t>(host_island_.size())) continue;
    const IslandId island = host_island_[h.value()];
    if (std::find(islands.begin(), islands.end(), island) == islands.end()) {
      islands.push_back(island);
    }
  }
  for (IslandId island : islands) {
    std::vector<HostId> mine;
    for (HostId h : hosts) {
      if (h.value() >= 0 && h.value() < static_cast<int64_t>(host_island_.size()) &&
          host_island_[h.value()] == island) {
        mine.push_back(h);
      }
    }
    if (IslandScheduler* s = island_scheduler(island)) s->ReleaseArrays(client, mine, arrays);
  }
}

absl::Status LocalCluster::SetClientShare(ClientId client, const ClientShare& share) {
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  for (auto& s : schedulers_) s->SetShare(client, share);
  for (auto& h : hosts_) h->SetMemoryQuota(client, share.memory_quota_bytes);
  return absl::OkStatus();
}

void LocalCluster::DropClient(ClientId client) {
  for (auto& s : schedulers_) s->DropClient(client);
}

HostService* LocalCluster::host(HostId host) { return executor(host); }

HostExecutor* LocalCluster::executor(HostId host) {
  if (host.value() < 0 || host.value() >= static_cast<int64_t>(hosts_.size())) return nullptr;
  return hosts_[host.value()].get();
}

absl::Status LocalCluster::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                     std::function<void(const absl::Status&)> forwarded) {
  std::vector<IslandScheduler*> schedulers;
  for (IslandId island : islands) {
    IslandScheduler* found = nullptr;
    for (auto& s : schedulers_) {
      if (s->island() == island) found = s.get();
    }
    schedulers.push_back(found);
  }
  if (islands.size() <= 1) return SubmitToIslands(run, islands, schedulers, std::move(forwarded));
  MutexLock lock(&multi_island_mu_);
  return SubmitToIslands(run, islands, schedulers, std::move(forwarded));
}

std::vector<DeviceReport> LocalCluster::Report() const {
  std::vector<DeviceReport> out;
  for (const auto& h : hosts_) {
    for (int i = 0; i < h->num_devices(); ++i) {
      DeviceReport r;
      r.device = h->stream(i).device();
      r.stats = h->stream(i).stats();
      r.memory_in_use = h->store().memory(i)->in_use();
      r.memory_peak = h->store().memory(i)->peak();
      out.push_back(r);
    }
  }
  return out;
}

void LocalCluster::ResetStats() {
  for (auto& h : hosts_) {
    for (int i = 0; i < h->num_devices(); ++i) h->stream(i).ResetStats();
  }
}

int64_t LocalCluster::MemoryInUse() const {
  int64_t total = 0;
  for (const auto& h : hosts_) total += h->store().memory_in_use();
  return total;
}

}  // namespace causeway
