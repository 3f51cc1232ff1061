#include "causeway/topology/mesh.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"

namespace causeway {

const Mesh::Layout& Mesh::layout() const {
  static const Layout* const kEmpty = new Layout();
  return layout_ != nullptr ? *layout_ : *kEmpty;
}

bool operator==(const Mesh& a, const Mesh& b) {
  if (a.id_ != b.id_ || a.island_ != b.island_) return false;
  if (a.layout_ == b.layout_) return true;
  const Mesh::Layout& x = a.layout();
  const Mesh::Layout& y = b.layout();
  return x.axes == y.axes && x.devices == y.devices;
}

int Mesh::AxisIndex(absl::string_view name) const {
  for (size_t i = 0; i < axes().size(); ++i) {
    if (axes()[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Mesh::IndexOf(DeviceId device) const {
  auto it = std::find(devices().begin(), devices().end(), device);
  return it == devices().end() ? -1 : static_cast<int>(it - devices().begin());
}

std::vector<int64_t> Mesh::Coordinates(int linear) const {
  std::vector<int64_t> coords(axes().size());
  int64_t rest = linear;
  for (int i = static_cast<int>(axes().size()) - 1; i >= 0; --i) {
    coords[i] = rest % axes()[i].size;
    rest /= axes()[i].size;
  }
  return coords;
}

absl::StatusOr<std::vector<int>> Mesh::Group(int linear,
                                             absl::Span<const std::string> axes) const {
  std::vector<int> axis_index;
  for (const std::string& name : axes) {
    int a = AxisIndex(name);
    if (a < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh axis '", name, "' is not in mesh ", ToString()));
    }
    if (std::find(axis_index.begin(), axis_index.end(), a) != axis_index.end()) {
      return absl::InvalidArgumentError(absl::StrCat("mesh axis '", name, "' named twice"));
    }
    axis_index.push_back(a);
  }
  // Member r varies the group's axes (the last named fastest) from the
  // caller's position with them zeroed: a sum of strides, no coordinates.
  std::vector<int64_t> stride(this->axes().size());
  int64_t s = 1;
  for (int i = static_cast<int>(this->axes().size()) - 1; i >= 0; --i) {
    stride[i] = s;
    s *= this->axes()[i].size;
  }
  int64_t origin = linear;
  int64_t group_size = 1;
  for (int a : axis_index) {
    origin -= (linear / stride[a] % this->axes()[a].size) * stride[a];
    group_size *= this->axes()[a].size;
  }
  std::vector<int> members;
  members.reserve(group_size);
  for (int64_t r = 0; r < group_size; ++r) {
    int64_t lin = origin;
    int64_t rest = r;
    for (int i = static_cast<int>(axis_index.size()) - 1; i >= 0; --i) {
      const int a = axis_index[i];
      lin += (rest % this->axes()[a].size) * stride[a];
      rest /= this->axes()[a].size;
    }
    members.push_back(static_cast<int>(lin));
  }
  return members;
}

Mesh::Layout::~Layout() {
  const GroupsEntry* e = groups.load(std::memory_order_acquire);
  while (e != nullptr) delete std::exchange(e, e->next);
}

absl::StatusOr<const Mesh::Groups*> Mesh::GroupsOver(absl::Span<const std::string> axes) const {
  const Layout& l = layout();
  const auto find = [&l, &axes]() -> const Groups* {
    for (const GroupsEntry* e = l.groups.load(std::memory_order_acquire); e != nullptr;
         e = e->next) {
      if (std::equal(e->axes.begin(), e->axes.end(), axes.begin(), axes.end())) {
        return &e->groups;
      }
    }
    return nullptr;
  };
  if (const Groups* known = find()) return known;
  auto entry = std::make_unique<GroupsEntry>();
  entry->axes.assign(axes.begin(), axes.end());
  Groups& groups = entry->groups;
  groups.group_of.assign(devices().size(), -1);
  groups.rank.assign(devices().size(), 0);
  for (int p = 0; p < size(); ++p) {
    if (groups.group_of[p] >= 0) continue;
    CW_ASSIGN_OR_RETURN(std::vector<int> group, Group(p, axes));
    const int g = static_cast<int>(groups.members.size());
    std::vector<DeviceId>& members = groups.members.emplace_back();
    members.reserve(group.size());
    for (size_t r = 0; r < group.size(); ++r) {
      groups.group_of[group[r]] = g;
      groups.rank[group[r]] = static_cast<int>(r);
      members.push_back(devices()[group[r]]);
    }
    groups.leader.push_back(*std::min_element(group.begin(), group.end()));
  }
  MutexLock lock(&l.mu);
  if (const Groups* known = find()) return known;  // computed meanwhile by another caller
  entry->next = l.groups.load(std::memory_order_relaxed);
  const GroupsEntry* added = entry.release();
  l.groups.store(added, std::memory_order_release);
  return &added->groups;
}

std::string Mesh::ToString() const {
  return absl::StrCat(
      "{",
      absl::StrJoin(axes(), ", ",
                    [](std::string* out, const MeshAxis& a) {
                      absl::StrAppend(out, a.name, ": ", a.size);
                    }),
      "} on ", island_.ToString());
}

bool Sharding::IsReplicated() const {
  for (const auto& d : dims_) {
    if (!d.empty()) return false;
  }
  return true;
}

absl::Status Sharding::Validate(const ir::Shape& shape, const Mesh& mesh) const {
  if (rank() != shape.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharding ", ToString(), " has rank ", rank(), " but the array ",
                     shape.ToString(), " has rank ", shape.rank()));
  }
  absl::flat_hash_set<std::string> used;
  for (int d = 0; d < rank(); ++d) {
    int64_t parts = 1;
    for (const std::string& axis : dims_[d]) {
      const int a = mesh.AxisIndex(axis);
      if (a < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sharding ", ToString(), " names mesh axis '", axis, "', which mesh ",
            mesh.ToString(), " does not have"));
      }
      if (!used.insert(axis).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sharding ", ToString(), " uses mesh axis '", axis, "' more than once"));
      }
      parts *= mesh.axes()[a].size;
    }
    if (shape.dims[d] % parts != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "uneven split: dimension ", d, " of ", shape.ToString(), " (size ", shape.dims[d],
          ") cannot be split into ", parts, " equal shards by sharding ", ToString(),
          " on mesh ", mesh.ToString()));
    }
  }
  return absl::OkStatus();
}

namespace {

// Number of parts dimension `d` is split into, and the index of the part
// held by the device at `coords`.
std::pair<int64_t, int64_t> PartOf(const std::vector<std::string>& axes, const Mesh& mesh,
                                   const std::vector<int64_t>& coords) {
  int64_t parts = 1;
  int64_t index = 0;
  for (const std::string& axis : axes) {
    const int a = mesh.AxisIndex(axis);
    parts *= mesh.axes()[a].size;
    index = index * mesh.axes()[a].size + coords[a];
  }
  return {parts, index};
}

}  // namespace

ir::Shape Sharding::ShardShape(const ir::Shape& shape, const Mesh& mesh) const {
  ir::Shape out = shape;
  const std::vector<int64_t> coords(mesh.axes().size(), 0);
  for (int d = 0; d < rank(); ++d) out.dims[d] /= PartOf(dims_[d], mesh, coords).first;
  return out;
}

std::vector<Range> Sharding::ShardRanges(const ir::Shape& shape, const Mesh& mesh,
                                         int linear) const {
  const std::vector<int64_t> coords = mesh.Coordinates(linear);
  std::vector<Range> ranges(static_cast<size_t>(rank()));
  for (int d = 0; d < rank(); ++d) {
    auto [parts, index] = PartOf(dims_[d], mesh, coords);
    const int64_t size = shape.dims[d] / parts;
    ranges[d] = Range{index * size, (index + 1) * size};
  }
  return ranges;
}

std::string Sharding::ToString() const {
  return absl::StrCat("[",
                      absl::StrJoin(dims_, ", ",
                                    [](std::string* out, const std::vector<std::string>& d) {
                                      absl::StrAppend(out, "{", absl::StrJoin(d, ","), "}");
                                    }),
                      "]");
}

void CopyBox(const void* src, absl::Span<const int64_t> src_dims,
             absl::Span<const int64_t> src_offset, void* dst,
             absl::Span<const int64_t> dst_dims, absl::Span<const int64_t> dst_offset,
             absl::Span<const int64_t> extent, int64_t element_bytes) {
  const size_t rank = extent.size();
  for (int64_t e : extent) {
    if (e == 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst, src, static_cast<size_t>(element_bytes));
    return;
  }
  // Merge the contiguous innermost run into one memcpy.
  std::vector<int64_t> src_strides(rank), dst_strides(rank);
  int64_t s = element_bytes, t = element_bytes;
  for (int i = static_cast<int>(rank) - 1; i >= 0; --i) {
    src_strides[i] = s;
    dst_strides[i] = t;
    s *= src_dims[i];
    t *= dst_dims[i];
  }
  const int64_t row_bytes = extent[rank - 1] * element_bytes;
  std::vector<int64_t> idx(rank, 0);
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  while (true) {
    int64_t so = 0, dof = 0;
    for (size_t i = 0; i < rank; ++i) {
      so += (src_offset[i] + idx[i]) * src_strides[i];
      dof += (dst_offset[i] + idx[i]) * dst_strides[i];
    }
    std::memcpy(out + dof, in + so, static_cast<size_t>(row_bytes));
    int i = static_cast<int>(rank) - 2;
    for (; i >= 0; --i) {
      if (++idx[i] < extent[i]) break;
      idx[i] = 0;
    }
    if (i < 0) return;
  }
}

std::vector<Range> Intersect(absl::Span<const Range> a, absl::Span<const Range> b) {
  CW_CHECK(a.size() == b.size());
  std::vector<Range> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    out[i] = Range{std::max(a[i].begin, b[i].begin), std::min(a[i].end, b[i].end)};
    if (out[i].end < out[i].begin) out[i].end = out[i].begin;
  }
  return out;
}

bool IsEmpty(absl::Span<const Range> box) {
  for (const Range& r : box) {
    if (r.size() <= 0) return true;
  }
  return false;
}

}  // namespace causeway
