#include "causeway/control/control_plane.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "causeway/transport/config.h"

namespace causeway {

ControlPlane::ControlPlane(Topology topology, ControlPlaneOptions options)
    : options_(std::move(options)), resources_(std::move(topology)) {
  const Topology first = resources_.GetTopology();
  {
    MutexLock lock(&mu_);
    for (IslandId island : first.islands()) {
      const absl::StatusOr<IslandInfo> info = first.island(island);
      if (!info.ok()) continue;
      for (HostId h : info->hosts) host_island_[h] = island;
    }
  }
  MutexLock lock(&share_mu_);
  for (IslandId island : first.islands()) AddIsland(island);
}

ControlPlane::~ControlPlane() = default;

IslandScheduler& ControlPlane::AddIsland(IslandId island) {
  {
    MutexLock lock(&mu_);
    auto it = schedulers_.find(island);
    if (it != schedulers_.end()) return *it->second;
  }
  IslandSchedulerOptions so = options_.scheduler;
  so.island = island;
  so.host_lookup = [lookup = options_.host_lookup, island](HostId h) { return lookup(island, h); };
  auto scheduler = std::make_unique<IslandScheduler>(std::move(so));
  // Unpublished, so nothing else reaches it yet; share_mu_ keeps the shares
  // from changing meanwhile.
  absl::flat_hash_map<ClientId, ClientShare> shares;
  {
    MutexLock lock(&mu_);
    shares = shares_;
  }
  for (const auto& [client, share] : shares) scheduler->SetShare(client, share);
  MutexLock lock(&mu_);
  IslandScheduler& out = *scheduler;
  schedulers_[island] = std::move(scheduler);
  return out;
}

void ControlPlane::AddHost(HostId host, IslandId island, const std::vector<DeviceId>& devices,
                           int64_t memory_bytes, const std::string& device_kind,
                           const std::vector<std::string>& descriptions, HostService* service) {
  MutexLock share_lock(&share_mu_);
  AddIsland(island);
  absl::flat_hash_map<ClientId, ClientShare> shares;
  {
    MutexLock lock(&mu_);
    host_island_[host] = island;
    shares = shares_;
  }
  resources_.AddHost(host, island, devices, memory_bytes, device_kind, descriptions);
  if (service == nullptr) return;
  for (const auto& [client, share] : shares) {
    if (share.memory_quota_bytes > 0) service->SetMemoryQuota(client, share.memory_quota_bytes);
  }
}

void ControlPlane::RemoveHost(HostId host, IslandId island, const std::string& reason) {
  resources_.RemoveHost(host, reason).IgnoreError();
  {
    MutexLock lock(&mu_);
    host_island_.erase(host);
  }
  if (IslandScheduler* s = scheduler(island)) s->HostLost(host);
}

IslandScheduler* ControlPlane::scheduler(IslandId island) const {
  MutexLock lock(&mu_);
  auto it = schedulers_.find(island);
  return it == schedulers_.end() ? nullptr : it->second.get();
}

std::vector<std::pair<IslandId, IslandScheduler*>> ControlPlane::schedulers() const {
  std::vector<std::pair<IslandId, IslandScheduler*>> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [island, s] : schedulers_) out.emplace_back(island, s.get());
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first.value() < b.first.value(); });
  return out;
}

absl::Status ControlPlane::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                     std::function<void(const absl::Status&)> forwarded) {
  std::vector<IslandScheduler*> schedulers;
  schedulers.reserve(islands.size());
  {
    MutexLock lock(&mu_);
    for (IslandId island : islands) {
      auto it = schedulers_.find(island);
      schedulers.push_back(it == schedulers_.end() ? nullptr : it->second.get());
    }
  }
  if (islands.size() <= 1) return SubmitToIslands(run, islands, schedulers, std::move(forwarded));
  MutexLock lock(&multi_island_mu_);
  return SubmitToIslands(run, islands, schedulers, std::move(forwarded));
}

std::vector<std::pair<IslandId, std::vector<HostId>>> ControlPlane::GroupByIsland(
    const std::vector<HostId>& hosts) const {
  std::vector<std::pair<IslandId, std::vector<HostId>>> out;
  MutexLock lock(&mu_);
  for (HostId h : hosts) {
    auto it = host_island_.find(h);
    if (it == host_island_.end()) continue;
    auto group = std::find_if(out.begin(), out.end(),
                              [&](const auto& g) { return g.first == it->second; });
    if (group == out.end()) {
      out.emplace_back(it->second, std::vector<HostId>{h});
    } else {
      group->second.push_back(h);
    }
  }
  return out;
}

void ControlPlane::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                                 std::vector<ArrayId> arrays) {
  for (auto& [island, mine] : GroupByIsland(hosts)) {
    if (IslandScheduler* s = scheduler(island)) s->ReleaseArrays(client, mine, arrays);
  }
}

absl::Status ControlPlane::SetShare(ClientId client, const ClientShare& share) {
  if (absl::Status ok = CheckClientShare(share); !ok.ok()) return ok;
  MutexLock share_lock(&share_mu_);
  std::vector<IslandScheduler*> schedulers;
  {
    MutexLock lock(&mu_);
    shares_[client] = share;
    for (const auto& [island, s] : schedulers_) schedulers.push_back(s.get());
  }
  for (IslandScheduler* s : schedulers) s->SetShare(client, share);
  if (options_.for_each_host) {
    options_.for_each_host(
        [&](HostService& host) { host.SetMemoryQuota(client, share.memory_quota_bytes); });
  }
  return absl::OkStatus();
}

void ControlPlane::DropClient(ClientId client) {
  // Under share_mu_, its share gone first: an island added meanwhile gets
  // neither the share nor a stale copy of it.
  MutexLock share_lock(&share_mu_);
  std::vector<IslandScheduler*> schedulers;
  {
    MutexLock lock(&mu_);
    shares_.erase(client);
    for (const auto& [island, s] : schedulers_) schedulers.push_back(s.get());
  }
  for (IslandScheduler* s : schedulers) s->DropClient(client);
}

}  // namespace causeway
