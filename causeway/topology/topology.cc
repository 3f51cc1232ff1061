#include "causeway/topology/topology.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"

namespace causeway {

void Topology::AddIsland(IslandId id) {
  CW_CHECK(!islands_.contains(id)) << id;
  islands_[id] = IslandInfo{id, {}, {}};
  island_order_.push_back(id);
}

void Topology::AddHost(HostId id, IslandId island) {
  CW_CHECK(islands_.contains(island)) << island;
  CW_CHECK(!hosts_.contains(id)) << id;
  hosts_[id] = HostInfo{id, island, {}};
  islands_[island].hosts.push_back(id);
}

absl::Status CheckDeviceKindName(absl::string_view kind) {
  const bool ok = !kind.empty() && kind.size() <= 32 &&
                  std::all_of(kind.begin(), kind.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                           c == '-';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "device kind \"", absl::CHexEscape(kind.substr(0, 64)),
      "\" is not 1 to 32 characters of a-z, 0-9, _ and -"));
}

void Topology::AddDevice(DeviceId id, HostId host, int64_t memory_bytes, absl::string_view kind,
                         absl::string_view description) {
  CW_CHECK(hosts_.contains(host)) << host;
  CW_CHECK(!devices_.contains(id)) << id;
  HostInfo& h = hosts_[host];
  devices_[id] = DeviceInfo{id,
                            host,
                            h.island,
                            static_cast<int>(h.devices.size()),
                            memory_bytes,
                            std::string(kind),
                            std::string(description.substr(0, kMaxDeviceDescription))};
  h.devices.push_back(id);
  islands_[h.island].devices.push_back(id);
}

void Topology::SetDescription(DeviceId id, absl::string_view description) {
  auto it = devices_.find(id);
  if (it != devices_.end()) {
    it->second.description = std::string(description.substr(0, kMaxDeviceDescription));
  }
}

void Topology::MarkGone(DeviceId id, std::string reason) {
  // Bounded: past the bound the oldest-known reasons are forgotten (all of
  // them; the set is rebuilt from later losses).
  if (gone_.size() >= kGoneRemembered) gone_.clear();
  gone_[id] = std::move(reason);
}

absl::Status Topology::RemoveHost(HostId id, const std::string& reason) {
  auto it = hosts_.find(id);
  if (it == hosts_.end()) return absl::NotFoundError(absl::StrCat("unknown ", id.ToString()));
  IslandInfo& island = islands_[it->second.island];
  std::erase(island.hosts, id);
  for (DeviceId d : it->second.devices) {
    std::erase(island.devices, d);
    devices_.erase(d);
    MarkGone(d, reason.empty() ? absl::StrCat(id.ToString(), " left the cluster") : reason);
  }
  const IslandId island_id = it->second.island;
  hosts_.erase(it);
  // An island whose last host left is no longer part of the topology: a
  // mesh request naming it fails as for any unknown island.
  if (island.hosts.empty()) {
    islands_.erase(island_id);
    std::erase(island_order_, island_id);
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceInfo> Topology::device(DeviceId id) const {
  auto it = devices_.find(id);
  if (it == devices_.end()) {
    if (auto gone = gone_.find(id); gone != gone_.end()) {
      return absl::UnavailableError(absl::StrCat(id.ToString(), " is gone: ", gone->second));
    }
    return absl::NotFoundError(absl::StrCat("unknown ", id.ToString()));
  }
  return it->second;
}

absl::StatusOr<HostInfo> Topology::host(HostId id) const {
  auto it = hosts_.find(id);
  if (it == hosts_.end()) return absl::NotFoundError(absl::StrCat("unknown ", id.ToString()));
  return it->second;
}

absl::StatusOr<IslandInfo> Topology::island(IslandId id) const {
  auto it = islands_.find(id);
  if (it == islands_.end()) return absl::NotFoundError(absl::StrCat("unknown ", id.ToString()));
  return it->second;
}

}  // namespace causeway
