// ResourceManager: the registry of islands, hosts and devices, and the
// allocator of virtual meshes. A client asks for a mesh shape; the manager
// maps it onto physical devices of one island. Meshes are not exclusive:
// several clients' meshes may share devices, and the island scheduler
// interleaves their work. Hosts may be added and removed while running.
#ifndef CAUSEWAY_RESOURCE_RESOURCE_MANAGER_H_
#define CAUSEWAY_RESOURCE_RESOURCE_MANAGER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/services.h"

namespace causeway {

// Thread-safe.
class ResourceManager final : public ResourceService {
 public:
  explicit ResourceManager(Topology topology) : topology_(std::move(topology)) {}

  absl::StatusOr<ClientId> RegisterClient() override;
  void UnregisterClient(ClientId client) override;
  bool HasClient(ClientId client) const;

  // Errors: INVALID_ARGUMENT for a malformed shape (empty or repeated axis
  // names, sizes < 1) or a mesh larger than its island; NOT_FOUND for an
  // unknown island or device; INVALID_ARGUMENT if explicit devices span
  // islands or do not match the shape.
  absl::StatusOr<Mesh> AllocateMesh(ClientId client, const MeshRequest& request) override;
  Topology GetTopology() const override;

  // Adds a host (and its devices) to a known island.
  // `descriptions[i]` (where given) says what device i is.
  void AddHost(HostId host, IslandId island, const std::vector<DeviceId>& devices,
               int64_t memory_bytes, absl::string_view kind = kDefaultDeviceKind,
               const std::vector<std::string>& descriptions = {});
  // Removes a host and its devices; later meshes will not use them.
  absl::Status RemoveHost(HostId host, const std::string& reason = "");

 private:
  mutable Mutex mu_;
  Topology topology_ ABSL_GUARDED_BY(mu_);
  int64_t next_client_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_mesh_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ClientId, bool> clients_ ABSL_GUARDED_BY(mu_);
  // Where the next mesh on each island starts, so that small meshes spread
  // over the island's devices.
  absl::flat_hash_map<IslandId, int64_t> next_offset_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_RESOURCE_RESOURCE_MANAGER_H_
