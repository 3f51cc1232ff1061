// ControlPlane: the part of a cluster that decides what runs where and when
// — the resource manager, one island scheduler per island, the clients'
// shares and the lock that gives runs spanning islands one global order.
// One assembly, used by the embedded cluster (LocalCluster), the
// distributed cluster's coordinator and the simulator, which differ only in
// how a scheduler reaches a host (ControlPlaneOptions::host_lookup: a
// HostExecutor, a worker's stream, a simulated message) and which hosts a
// client's memory quota reaches (ControlPlaneOptions::for_each_host).
//
// Islands and hosts may be added while it runs (workers joining a
// coordinator); an island's scheduler lives as long as the control plane,
// so a pointer to it stays valid.
#ifndef CAUSEWAY_CONTROL_CONTROL_PLANE_H_
#define CAUSEWAY_CONTROL_CONTROL_PLANE_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "causeway/base/mutex.h"
#include "causeway/resource/resource_manager.h"
#include "causeway/scheduler/island_scheduler.h"

namespace causeway {

struct ControlPlaneOptions {
  // What each island's scheduler is made with; `island` and `host_lookup`
  // are set per island.
  IslandSchedulerOptions scheduler;
  // Host `h` as the scheduler of `island` reaches it; nullptr if it is not
  // (or no longer) a host of that island. Called on the schedulers' threads,
  // with a scheduler's lock held: it must not call back into the control
  // plane. Must outlive the control plane.
  std::function<HostService*(IslandId island, HostId h)> host_lookup;
  // Calls `apply` on every host a client's memory quota applies to (the
  // live ones). May be empty: quotas then reach no host.
  std::function<void(const std::function<void(HostService&)>& apply)> for_each_host;
};

// Thread-safe.
class ControlPlane {
 public:
  // Makes a scheduler for every island of `topology`.
  ControlPlane(Topology topology, ControlPlaneOptions options);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  ResourceManager& resources() { return resources_; }
  const ResourceManager& resources() const { return resources_; }

  // Adds a host and its devices to `island` (ResourceManager::AddHost),
  // making the island's scheduler if it has none, and applies the memory
  // quotas set so far to `service` (nullptr: none). REQUIRES: the caller
  // holds no lock that host_lookup or for_each_host takes.
  void AddHost(HostId host, IslandId island, const std::vector<DeviceId>& devices,
               int64_t memory_bytes, const std::string& device_kind,
               const std::vector<std::string>& descriptions, HostService* service);
  // The host is gone: it leaves the topology (ResourceManager::RemoveHost)
  // and its island's scheduler fails what waited on it.
  void RemoveHost(HostId host, IslandId island, const std::string& reason);

  // nullptr if the island has no scheduler.
  IslandScheduler* scheduler(IslandId island) const;
  // Every island's scheduler, by ascending island id.
  std::vector<std::pair<IslandId, IslandScheduler*>> schedulers() const;

  // ClusterConnection::SubmitRun: the run goes to the scheduler of each of
  // `islands`; runs spanning islands are submitted one at a time.
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                         std::function<void(const absl::Status&)> forwarded);
  // ClusterConnection::ReleaseArrays: `hosts` grouped by island, each group
  // released behind the client's runs on its island.
  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays);
  // `hosts` grouped by their island, islands in order of first appearance;
  // unknown hosts are left out.
  std::vector<std::pair<IslandId, std::vector<HostId>>> GroupByIsland(
      const std::vector<HostId>& hosts) const;
  // INVALID_ARGUMENT for a malformed share. Records it (islands and hosts
  // added later get it too) and applies it to every scheduler and, as a
  // memory quota, to every host.
  absl::Status SetShare(ClientId client, const ClientShare& share);
  // The client is ending: its share is forgotten, and its runs not yet
  // forwarded and its place in every island's queue are dropped.
  void DropClient(ClientId client);

 private:
  IslandScheduler& AddIsland(IslandId island) ABSL_EXCLUSIVE_LOCKS_REQUIRED(share_mu_);

  const ControlPlaneOptions options_;
  ResourceManager resources_;
  // Serialises runs that span islands (SubmitToIslands' contract).
  Mutex multi_island_mu_;
  // Held while a share is recorded and applied, and while a new island or
  // host is given the shares so far, so that neither can apply an older
  // share after a newer one. Taken before mu_; schedulers and hosts are
  // called with it held but never with mu_ held.
  Mutex share_mu_;
  mutable Mutex mu_;
  absl::flat_hash_map<IslandId, std::unique_ptr<IslandScheduler>> schedulers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<HostId, IslandId> host_island_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ClientId, ClientShare> shares_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_CONTROL_CONTROL_PLANE_H_
