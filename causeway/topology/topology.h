// Physical topology: devices grouped into hosts, hosts into islands. The
// resource manager owns the authoritative Topology; components hold copies
// of the parts they need.
#ifndef CAUSEWAY_TOPOLOGY_TOPOLOGY_H_
#define CAUSEWAY_TOPOLOGY_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "causeway/base/ids.h"

namespace causeway {

// The kind of device a worker that names none has (the CPU backend's).
inline constexpr absl::string_view kDefaultDeviceKind = "cpu";
// INVALID_ARGUMENT unless `kind` is 1 to 32 characters of [a-z0-9_-].
absl::Status CheckDeviceKindName(absl::string_view kind);

struct DeviceInfo {
  DeviceId id;
  HostId host;
  IslandId island;
  int local_index = 0;  // position of the device on its host
  int64_t memory_bytes = 0;
  // Which backend runs its code (backend::DeviceKind::name()).
  std::string kind = std::string(kDefaultDeviceKind);
  // What the device says it is (backend::FormatDescription: its name,
  // driver and memory), at most kMaxDeviceDescription bytes; empty when
  // unknown.
  std::string description;
};
inline constexpr size_t kMaxDeviceDescription = 256;

struct HostInfo {
  HostId id;
  IslandId island;
  std::vector<DeviceId> devices;
};

struct IslandInfo {
  IslandId id;
  std::vector<HostId> hosts;
  std::vector<DeviceId> devices;  // in host order
};

// A registry of islands, hosts and devices. A value type; not thread-safe
// for mutation.
class Topology {
 public:
  void AddIsland(IslandId id);
  // REQUIRES: the island exists, the host does not.
  void AddHost(HostId id, IslandId island);
  // REQUIRES: the host exists, the device does not.
  void AddDevice(DeviceId id, HostId host, int64_t memory_bytes,
                 absl::string_view kind = kDefaultDeviceKind, absl::string_view description = "");
  // Sets a known device's description (cut to kMaxDeviceDescription).
  void SetDescription(DeviceId id, absl::string_view description);
  // Removes the host and its devices, and its island if it was the last
  // host there. NOT_FOUND if unknown. `reason` (why the host left) is kept
  // for its devices: a later device() lookup of one is UNAVAILABLE naming
  // it (the most recent kGoneRemembered devices are remembered).
  absl::Status RemoveHost(HostId id, const std::string& reason = "");
  // Records that `id` left, and why (decoding a topology).
  void MarkGone(DeviceId id, std::string reason);
  const absl::flat_hash_map<DeviceId, std::string>& gone() const { return gone_; }
  static constexpr size_t kGoneRemembered = 4096;

  absl::StatusOr<DeviceInfo> device(DeviceId id) const;
  absl::StatusOr<HostInfo> host(HostId id) const;
  absl::StatusOr<IslandInfo> island(IslandId id) const;
  const std::vector<IslandId>& islands() const { return island_order_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }

 private:
  std::vector<IslandId> island_order_;
  absl::flat_hash_map<IslandId, IslandInfo> islands_;
  absl::flat_hash_map<HostId, HostInfo> hosts_;
  absl::flat_hash_map<DeviceId, DeviceInfo> devices_;
  absl::flat_hash_map<DeviceId, std::string> gone_;
};

}  // namespace causeway

#endif  // CAUSEWAY_TOPOLOGY_TOPOLOGY_H_
