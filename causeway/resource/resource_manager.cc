#include "causeway/resource/resource_manager.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"

namespace causeway {

absl::StatusOr<ClientId> ResourceManager::RegisterClient() {
  MutexLock lock(&mu_);
  ClientId id(next_client_++);
  clients_[id] = true;
  return id;
}

void ResourceManager::UnregisterClient(ClientId client) {
  MutexLock lock(&mu_);
  clients_.erase(client);
}

bool ResourceManager::HasClient(ClientId client) const {
  MutexLock lock(&mu_);
  return clients_.contains(client);
}

absl::StatusOr<Mesh> ResourceManager::AllocateMesh(ClientId client, const MeshRequest& request) {
  if (request.axes.empty()) return absl::InvalidArgumentError("a mesh needs at least one axis");
  absl::flat_hash_set<std::string> names;
  int64_t size = 1;
  for (const MeshAxis& axis : request.axes) {
    if (axis.name.empty()) return absl::InvalidArgumentError("mesh axis with an empty name");
    if (!names.insert(axis.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("mesh axis '", axis.name, "' named twice"));
    }
    if (axis.size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis '", axis.name, "' has size ", axis.size, "; must be >= 1"));
    }
    if (size > limits::kMaxMeshDevices / axis.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh axes of more than ", limits::kMaxMeshDevices, " devices requested (axis '", axis.name,
          "' of size ", axis.size, ")"));
    }
    size *= axis.size;
  }
  MutexLock lock(&mu_);
  if (!clients_.contains(client)) {
    return absl::FailedPreconditionError(absl::StrCat(client.ToString(), " is not connected"));
  }
  std::vector<DeviceId> devices;
  IslandId island;
  if (!request.devices.empty()) {
    if (static_cast<int64_t>(request.devices.size()) != size) {
      return absl::InvalidArgumentError(absl::StrCat("mesh of ", size, " devices given ",
                                                     request.devices.size(), " devices"));
    }
    absl::flat_hash_set<DeviceId> seen;
    for (DeviceId d : request.devices) {
      CW_ASSIGN_OR_RETURN(DeviceInfo info, topology_.device(d));
      if (!seen.insert(d).second) {
        return absl::InvalidArgumentError(absl::StrCat(d.ToString(), " listed twice in a mesh"));
      }
      if (!island.valid()) island = info.island;
      if (info.island != island) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a mesh must lie in one island; ", d.ToString(), " is on ", info.island.ToString(),
            ", not ", island.ToString()));
      }
    }
    devices = request.devices;
  } else {
    std::vector<IslandId> candidates;
    if (request.island.valid()) {
      CW_RETURN_IF_ERROR(topology_.island(request.island).status());
      candidates.push_back(request.island);
    } else {
      candidates = topology_.islands();
    }
    int64_t largest = 0;
    for (IslandId id : candidates) {
      const IslandInfo info = *topology_.island(id);
      const int64_t n = static_cast<int64_t>(info.devices.size());
      largest = std::max(largest, n);
      if (n < size) continue;
      int64_t& offset = next_offset_[id];
      for (int64_t i = 0; i < size; ++i) devices.push_back(info.devices[(offset + i) % n]);
      offset = (offset + size) % n;
      island = id;
      break;
    }
    if (devices.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh of ", size, " devices is larger than ",
          request.island.valid() ? request.island.ToString() : std::string("every island"),
          " (largest has ", largest, " devices)"));
    }
  }
  return Mesh(MeshId(next_mesh_++), island, request.axes, std::move(devices));
}

Topology ResourceManager::GetTopology() const {
  MutexLock lock(&mu_);
  return topology_;
}

void ResourceManager::AddHost(HostId host, IslandId island, const std::vector<DeviceId>& devices,
                              int64_t memory_bytes, absl::string_view kind,
                              const std::vector<std::string>& descriptions) {
  MutexLock lock(&mu_);
  if (!topology_.island(island).ok()) topology_.AddIsland(island);
  topology_.AddHost(host, island);
  for (size_t i = 0; i < devices.size(); ++i) {
    topology_.AddDevice(devices[i], host, memory_bytes, kind,
                        i < descriptions.size() ? descriptions[i] : "");
  }
}

absl::Status ResourceManager::RemoveHost(HostId host, const std::string& reason) {
  MutexLock lock(&mu_);
  return topology_.RemoveHost(host, reason);
}

}  // namespace causeway
