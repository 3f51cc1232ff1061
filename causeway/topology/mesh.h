// Meshes and shardings.
//
// A Mesh is an N-d arrangement of physical devices of one island with named
// axes, e.g. {data: 2, model: 4}; devices are listed in row-major order of
// the axes. A Sharding says, for each dimension of an array, which mesh axes
// that dimension is split over (major to minor); a dimension split over no
// axis is replicated, and so is the array over every mesh axis no dimension
// uses. Every device of a mesh holds exactly one shard of an array on it.
#ifndef CAUSEWAY_TOPOLOGY_MESH_H_
#define CAUSEWAY_TOPOLOGY_MESH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/shape.h"

namespace causeway {

struct MeshAxis {
  std::string name;
  int64_t size = 1;
  friend bool operator==(const MeshAxis&, const MeshAxis&) = default;
};

// A value type, cheap to copy (copies share their immutable axes and
// devices). Thread-compatible.
class Mesh {
 public:
  Mesh() = default;
  Mesh(MeshId id, IslandId island, std::vector<MeshAxis> axes,
       std::vector<DeviceId> devices)
      : id_(id),
        island_(island),
        layout_(std::make_shared<const Layout>(std::move(axes), std::move(devices))) {}

  MeshId id() const { return id_; }
  IslandId island() const { return island_; }
  const std::vector<MeshAxis>& axes() const { return layout().axes; }
  const std::vector<DeviceId>& devices() const { return layout().devices; }
  int size() const { return static_cast<int>(devices().size()); }

  // The same devices in the same order (O(1) for copies of one mesh).
  bool SameDevices(const Mesh& other) const {
    return layout_ == other.layout_ || devices() == other.devices();
  }

  // Index of axis `name`, or -1.
  int AxisIndex(absl::string_view name) const;
  // Position of `device` in devices(), or -1.
  int IndexOf(DeviceId device) const;
  // Coordinates of the device at `linear` along each axis.
  std::vector<int64_t> Coordinates(int linear) const;

  // The devices that share every coordinate of device `linear` except those
  // along `axes`: the group a collective over `axes` spans. Returned as
  // linear indices ordered by their position along `axes` (the group rank).
  // INVALID_ARGUMENT for an unknown or repeated axis.
  absl::StatusOr<std::vector<int>> Group(int linear, absl::Span<const std::string> axes) const;

  // Every device's group over `axes` at once (Group for each position),
  // computed on first use and kept with the mesh's devices, shared by every
  // copy: what a device needs at each collective it meets in. The pointer
  // lives as long as any copy of this mesh. Once computed, finding it takes
  // no lock and writes nothing: every member of every collective asks.
  struct Groups {
    std::vector<std::vector<DeviceId>> members;  // each group's devices, in rank order
    std::vector<int> leader;                      // each group's lowest position
    std::vector<int> group_of;                    // per position: its group
    std::vector<int> rank;                        // per position: its rank in it
  };
  absl::StatusOr<const Groups*> GroupsOver(absl::Span<const std::string> axes) const;

  // "{data: 2, model: 4} on island 0".
  std::string ToString() const;

  // Equal ids, islands, axes and devices (copies of one mesh compare in
  // O(1): they share their axes and devices).
  friend bool operator==(const Mesh& a, const Mesh& b);

 private:
  // GroupsOver's results: a list that only grows (few entries per mesh),
  // read without a lock.
  struct GroupsEntry {
    std::vector<std::string> axes;
    Groups groups;
    const GroupsEntry* next = nullptr;
  };
  struct Layout {
    Layout() = default;
    Layout(std::vector<MeshAxis> a, std::vector<DeviceId> d)
        : axes(std::move(a)), devices(std::move(d)) {}
    ~Layout();
    Layout(const Layout&) = delete;
    Layout& operator=(const Layout&) = delete;
    std::vector<MeshAxis> axes;
    std::vector<DeviceId> devices;
    // Serialises additions to `groups`; readers take no lock.
    mutable Mutex mu;
    mutable std::atomic<const GroupsEntry*> groups{nullptr};
  };
  const Layout& layout() const;

  MeshId id_;
  IslandId island_;
  // Immutable and shared by every copy: a mesh of 2048 devices is copied
  // with every array on it, so a copy must not be a copy of its devices.
  std::shared_ptr<const Layout> layout_;
};

// A half-open index range [begin, end) along one dimension.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const Range&, const Range&) = default;
};

// A value type.
class Sharding {
 public:
  Sharding() = default;
  // dims[i]: the mesh axes array dimension i is split over, major to minor.
  explicit Sharding(std::vector<std::vector<std::string>> dims) : dims_(std::move(dims)) {}
  static Sharding Replicated(int rank) {
    return Sharding(std::vector<std::vector<std::string>>(static_cast<size_t>(rank)));
  }

  const std::vector<std::vector<std::string>>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  bool IsReplicated() const;

  // INVALID_ARGUMENT if the rank differs from the shape's, an axis is not in
  // the mesh or is used twice, or a dimension does not divide evenly.
  absl::Status Validate(const ir::Shape& shape, const Mesh& mesh) const;

  // REQUIRES: Validate() is OK. The shape of every shard.
  ir::Shape ShardShape(const ir::Shape& shape, const Mesh& mesh) const;
  // REQUIRES: Validate() is OK. The index ranges of the shard held by the
  // device at mesh position `linear`.
  std::vector<Range> ShardRanges(const ir::Shape& shape, const Mesh& mesh, int linear) const;

  // "[{data}, {}]".
  std::string ToString() const;
  friend bool operator==(const Sharding&, const Sharding&) = default;

 private:
  std::vector<std::vector<std::string>> dims_;
};

// Copies the box of `extent` elements starting at `src_offset` in a
// row-major array of `src_dims` to `dst_offset` in one of `dst_dims`.
void CopyBox(const void* src, absl::Span<const int64_t> src_dims,
             absl::Span<const int64_t> src_offset, void* dst,
             absl::Span<const int64_t> dst_dims, absl::Span<const int64_t> dst_offset,
             absl::Span<const int64_t> extent, int64_t element_bytes);

// Intersection of two boxes given as per-dimension ranges; empty ranges if
// they do not overlap (IsEmpty() true).
std::vector<Range> Intersect(absl::Span<const Range> a, absl::Span<const Range> b);
bool IsEmpty(absl::Span<const Range> box);

}  // namespace causeway

#endif  // CAUSEWAY_TOPOLOGY_MESH_H_
