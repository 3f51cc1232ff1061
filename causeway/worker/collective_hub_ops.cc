#include "causeway/worker/collective_hub.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/check.h"
#include "causeway/base/status_macros.h"
#include "causeway/topology/mesh.h"

namespace causeway {
namespace {

// a + b; integers wrap (as the kinds' integer adds do), with no signed
// overflow.
template <typename T>
T Add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

// acc[i] (+ or max)= in[i]. In blocks of 16 with no aliasing, which the
// compiler turns into vector code at -O2 (a plain loop over unknown n it
// leaves scalar).
template <typename T>
void Combine(T* __restrict acc, const T* __restrict in, int64_t n, ir::ReduceKind kind) {
  constexpr int64_t kBlock = 16;
  int64_t i = 0;
  if (kind == ir::ReduceKind::kSum) {
    for (; i + kBlock <= n; i += kBlock) {
      for (int64_t j = 0; j < kBlock; ++j) acc[i + j] = Add(acc[i + j], in[i + j]);
    }
    for (; i < n; ++i) acc[i] = Add(acc[i], in[i]);
  } else {
    for (; i + kBlock <= n; i += kBlock) {
      for (int64_t j = 0; j < kBlock; ++j) acc[i + j] = std::max(acc[i + j], in[i + j]);
    }
    for (; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
  }
}

// Combines elements [begin, end) of `in` into `acc` (both of `dtype`).
void CombineRange(void* acc, const void* in, ir::DType dtype, int64_t begin, int64_t end,
                  ir::ReduceKind kind) {
  const int64_t n = end - begin;
  switch (dtype) {
    case ir::DType::kF32:
      return Combine(static_cast<float*>(acc) + begin, static_cast<const float*>(in) + begin, n,
                     kind);
    case ir::DType::kI32:
      return Combine(static_cast<int32_t*>(acc) + begin, static_cast<const int32_t*>(in) + begin,
                     n, kind);
    case ir::DType::kPred:
      return Combine(static_cast<uint8_t*>(acc) + begin, static_cast<const uint8_t*>(in) + begin,
                     n, kind);
    default:
      // Shape inference admits f32 and i32 collectives only.
      CW_CHECK(false) << "a reduction of " << ir::DTypeName(dtype);
  }
}

void CombineInto(void* acc, const void* in, const ir::Shape& shape, ir::ReduceKind kind) {
  CombineRange(acc, in, shape.dtype, 0, shape.num_elements(), kind);
}

std::vector<int64_t> Zeros(const ir::Shape& shape) {
  return std::vector<int64_t>(shape.dims.size(), 0);
}

// backend::CheckCollectiveShapes, naming the collective.
absl::Status Check(ir::OpKind op, const ir::Shape& in, const ir::Shape& out, int64_t dimension,
                   int64_t concat_dimension, absl::Span<const std::pair<int64_t, int64_t>> pairs,
                   int64_t group_size, const CollectiveWhat& what) {
  absl::Status s = backend::CheckCollectiveShapes(op, in, out, dimension, concat_dimension, pairs,
                                                  group_size);
  return s.ok() ? s : Annotate(s, what.str());
}

}  // namespace

void CollectiveHub::Reduce(State& state, const ir::Shape& shape, ir::ReduceKind kind,
                           int64_t begin, int64_t end) {
  if (begin >= end) return;
  // Reduce into rank 0's buffer in rank order, then broadcast: every part
  // of a parted reduction adds in the same order, so the result does not
  // depend on how it was split.
  const int64_t width = ir::ByteSize(shape.dtype);
  auto* acc = static_cast<std::byte*>(state.buffers[0]);
  for (size_t r = 1; r < state.buffers.size(); ++r) {
    CombineRange(acc, state.buffers[r], shape.dtype, begin, end, kind);
  }
  for (size_t r = 1; r < state.buffers.size(); ++r) {
    std::memcpy(static_cast<std::byte*>(state.buffers[r]) + begin * width, acc + begin * width,
                static_cast<size_t>((end - begin) * width));
  }
}

absl::Status CollectiveHub::AllReduce(const CollectiveKey& key, DeviceId self, int rank,
                                      const std::vector<DeviceId>& members,
                                      const ir::Shape& shape, ir::ReduceKind kind, void* data,
                                      const CollectiveWhat& what) {
  const Completion across = [&](State& state) -> absl::Status {
    // This process's members in rank order, then the processes.
    const std::vector<int>& local = state.local_ranks();
    void* acc = state.buffers[local[0]];
    for (size_t i = 1; i < local.size(); ++i) {
      CombineInto(acc, state.buffers[local[i]], shape, kind);
    }
    CW_RETURN_IF_ERROR(state.across->AllReduce(key, state.hosts, state.generation, shape.dtype,
                                               kind, acc, shape.num_elements(), state.deadline));
    for (size_t i = 1; i < local.size(); ++i) {
      std::memcpy(state.buffers[local[i]], acc, static_cast<size_t>(shape.byte_size()));
    }
    return absl::OkStatus();
  };
  // A part: a run of elements, its bounds on 64-byte lines so that no two
  // parts write the same cache line.
  const PartedCompletion parted = [&shape, kind](State& state, int part, int parts) {
    const int64_t n = shape.num_elements();
    const int64_t line = std::max<int64_t>(1, 64 / ir::ByteSize(shape.dtype));
    const auto bound = [&](int p) {
      return std::min(n, (n * p / parts + line - 1) / line * line);
    };
    Reduce(state, shape, kind, bound(part), bound(part + 1));
  };
  return Meet(key, self, rank, members, ir::OpKind::kAllReduce, data, shape.byte_size(), data,
              shape.byte_size(), what,
              [&shape, kind](State& state) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                Reduce(state, shape, kind, 0, shape.num_elements());
                return absl::OkStatus();
              },
              &across, &parted);
}

absl::Status CollectiveHub::AllGather(const CollectiveKey& key, DeviceId self, int rank,
                                      const std::vector<DeviceId>& members,
                                      const ir::Shape& in_shape, const ir::Shape& out_shape,
                                      int64_t dimension, const void* in, void* out,
                                      const CollectiveWhat& what) {
  const int64_t g = static_cast<int64_t>(members.size());
  CW_RETURN_IF_ERROR(Check(ir::OpKind::kAllGather, in_shape, out_shape, dimension, 0, {}, g, what));
  const Completion complete = [&](State& state) {
    // Into the first result here (across processes, the other processes'
    // ranks have none), then copied to the others.
    std::vector<void*> results;
    for (void* b : state.buffers) {
      if (b != nullptr) results.push_back(b);
    }
    std::vector<int64_t> offset(in_shape.dims.size(), 0);
    for (int64_t r = 0; r < g; ++r) {
      offset[dimension] = r * in_shape.dims[dimension];
      CopyBox(state.inputs[r], in_shape.dims, Zeros(in_shape), results[0], out_shape.dims,
              offset, in_shape.dims, ir::ByteSize(in_shape.dtype));
    }
    for (size_t i = 1; i < results.size(); ++i) {
      std::memcpy(results[i], results[0], static_cast<size_t>(out_shape.byte_size()));
    }
    return absl::OkStatus();
  };
  const Completion across = [&](State& state) -> absl::Status {
    CW_RETURN_IF_ERROR(GatherAcross(key, state));
    return complete(state);
  };
  return Meet(key, self, rank, members, ir::OpKind::kAllGather, in, in_shape.byte_size(), out,
              out_shape.byte_size(), what, complete, &across);
}

absl::Status CollectiveHub::ReduceScatter(const CollectiveKey& key, DeviceId self, int rank,
                                          const std::vector<DeviceId>& members,
                                          ir::ReduceKind kind, const ir::Shape& in_shape,
                                          const ir::Shape& out_shape, int64_t dimension,
                                          const void* in, void* out,
                                          const CollectiveWhat& what) {
  const int64_t g = static_cast<int64_t>(members.size());
  CW_RETURN_IF_ERROR(
      Check(ir::OpKind::kReduceScatter, in_shape, out_shape, dimension, 0, {}, g, what));
  // Reduces the operands of `ranks` in order, then, across processes, over
  // the processes; scatters the result to every rank that has a buffer.
  const auto reduce_scatter = [&](State& state, const std::vector<int>& ranks) -> absl::Status {
    std::vector<std::byte> acc(static_cast<size_t>(in_shape.byte_size()));
    if (!acc.empty()) std::memcpy(acc.data(), state.inputs[ranks[0]], acc.size());
    for (size_t i = 1; i < ranks.size(); ++i) {
      CombineInto(acc.data(), state.inputs[ranks[i]], in_shape, kind);
    }
    if (state.across != nullptr) {
      CW_RETURN_IF_ERROR(state.across->AllReduce(key, state.hosts, state.generation,
                                                 in_shape.dtype, kind, acc.data(),
                                                 in_shape.num_elements(), state.deadline));
    }
    std::vector<int64_t> offset(in_shape.dims.size(), 0);
    for (int64_t r = 0; r < g; ++r) {
      if (state.buffers[r] == nullptr) continue;  // another process's
      offset[dimension] = r * out_shape.dims[dimension];
      CopyBox(acc.data(), in_shape.dims, offset, state.buffers[r], out_shape.dims,
              Zeros(out_shape), out_shape.dims, ir::ByteSize(in_shape.dtype));
    }
    return absl::OkStatus();
  };
  const Completion complete = [&](State& state) {
    std::vector<int> all(static_cast<size_t>(g));
    for (int r = 0; r < g; ++r) all[r] = r;
    return reduce_scatter(state, all);
  };
  const Completion across = [&](State& state) {
    return reduce_scatter(state, state.local_ranks());
  };
  return Meet(key, self, rank, members, ir::OpKind::kReduceScatter, in, in_shape.byte_size(), out,
              out_shape.byte_size(), what, complete, &across);
}

absl::Status CollectiveHub::AllToAll(const CollectiveKey& key, DeviceId self, int rank,
                                     const std::vector<DeviceId>& members,
                                     const ir::Shape& in_shape, const ir::Shape& out_shape,
                                     int64_t split_dimension, int64_t concat_dimension,
                                     const void* in, void* out, const CollectiveWhat& what) {
  const int64_t g = static_cast<int64_t>(members.size());
  const int rank_n = in_shape.rank();
  CW_RETURN_IF_ERROR(Check(ir::OpKind::kAllToAll, in_shape, out_shape, split_dimension,
                           concat_dimension, {}, g, what));
  ir::Shape chunk = in_shape;
  chunk.dims[split_dimension] /= g;
  const Completion complete = [&](State& state) {
    std::vector<int64_t> src(rank_n, 0), dst(rank_n, 0);
    for (int64_t i = 0; i < g; ++i) {    // source rank
      for (int64_t j = 0; j < g; ++j) {  // destination rank
        if (state.buffers[j] == nullptr) continue;  // another process's
        src.assign(rank_n, 0);
        dst.assign(rank_n, 0);
        src[split_dimension] = j * chunk.dims[split_dimension];
        dst[concat_dimension] = i * chunk.dims[concat_dimension];
        CopyBox(state.inputs[i], in_shape.dims, src, state.buffers[j],
                out_shape.dims, dst, chunk.dims, ir::ByteSize(in_shape.dtype));
      }
    }
    return absl::OkStatus();
  };
  // Across processes: each process sends each other the chunks its members
  // have for that process's members, in one library all-to-all; the chunk
  // of source rank i for destination rank j travels as a contiguous block.
  const Completion across = [&](State& state) -> absl::Status {
    const int64_t cb = chunk.byte_size();
    const int64_t esize = ir::ByteSize(in_shape.dtype);
    const std::vector<int>& local = state.local_ranks();
    const std::vector<std::vector<int>>& ranks_on = state.ranks_on;
    const int64_t n_local = static_cast<int64_t>(local.size());
    std::vector<int64_t> send_bytes(state.hosts.size()), recv_bytes(state.hosts.size());
    int64_t send_total = 0, recv_total = 0;
    for (size_t h = 0; h < state.hosts.size(); ++h) {
      send_bytes[h] = n_local * static_cast<int64_t>(ranks_on[h].size()) * cb;
      recv_bytes[h] = send_bytes[h];  // the same ranks the other way
      send_total += send_bytes[h];
      recv_total += recv_bytes[h];
    }
    std::vector<std::byte> send(static_cast<size_t>(send_total));
    std::vector<std::byte> recv(static_cast<size_t>(recv_total));
    const std::vector<int64_t> zeros(rank_n, 0);
    std::vector<int64_t> at(rank_n, 0);
    std::byte* p = send.data();
    for (size_t h = 0; h < state.hosts.size(); ++h) {
      for (int i : local) {
        for (int j : ranks_on[h]) {
          at.assign(rank_n, 0);
          at[split_dimension] = j * chunk.dims[split_dimension];
          CopyBox(state.inputs[i], in_shape.dims, at, p, chunk.dims, zeros, chunk.dims, esize);
          p += cb;
        }
      }
    }
    CW_RETURN_IF_ERROR(state.across->AllToAll(key, state.hosts, state.generation, send.data(),
                                              send_bytes, recv.data(), recv_bytes,
                                              state.deadline));
    // From process h: its ranks i in order, each with a chunk per local j.
    const std::byte* q = recv.data();
    for (size_t h = 0; h < state.hosts.size(); ++h) {
      for (int i : ranks_on[h]) {
        for (int j : local) {
          at.assign(rank_n, 0);
          at[concat_dimension] = i * chunk.dims[concat_dimension];
          CopyBox(q, chunk.dims, zeros, state.buffers[j], out_shape.dims, at, chunk.dims, esize);
          q += cb;
        }
      }
    }
    return absl::OkStatus();
  };
  return Meet(key, self, rank, members, ir::OpKind::kAllToAll, in, in_shape.byte_size(), out,
              out_shape.byte_size(), what, complete, &across);
}

absl::Status CollectiveHub::CollectivePermute(
    const CollectiveKey& key, DeviceId self, int rank, const std::vector<DeviceId>& members,
    const ir::Shape& shape, absl::Span<const std::pair<int64_t, int64_t>> pairs,
    const void* in, void* out, const CollectiveWhat& what) {
  const int64_t g = static_cast<int64_t>(members.size());
  CW_RETURN_IF_ERROR(
      Check(ir::OpKind::kCollectivePermute, shape, shape, 0, 0, pairs, g, what));
  std::vector<std::pair<int64_t, int64_t>> copy(pairs.begin(), pairs.end());
  return Meet(key, self, rank, members, ir::OpKind::kCollectivePermute, in, shape.byte_size(),
              out, shape.byte_size(), what,
              [&shape, copy = std::move(copy)](State& state) {
                const size_t bytes = static_cast<size_t>(shape.byte_size());
                std::vector<bool> written(state.buffers.size(), false);
                for (const auto& [s, t] : copy) {
                  if (bytes > 0) std::memcpy(state.buffers[t], state.inputs[s], bytes);
                  written[t] = true;
                }
                for (size_t r = 0; r < written.size(); ++r) {
                  if (!written[r] && bytes > 0) std::memset(state.buffers[r], 0, bytes);
                }
                return absl::OkStatus();
              });
}

absl::Status CollectiveHub::MeetOnDevices(const CollectiveKey& key, DeviceId self, int rank,
                                          const std::vector<DeviceId>& members, ir::OpKind op,
                                          const void* operand, const CollectiveWhat& what,
                                          backend::CollectiveOps::PerformOnDevices perform) {
  if (peers_ != nullptr) {
    for (DeviceId d : members) {
      if (peers_->HostOf(d) != peers_->self()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what.str(), ": ", d.ToString(),
            " is in another process; only a group within one process meets on its devices"));
      }
    }
  }
  return Meet(
      key, self, rank, members, op, operand, 0, nullptr, 0, what,
      [perform](State& state) { return perform(state.inputs); }, nullptr, nullptr,
      /*on_device=*/true);
}

void CollectiveHub::AttachDevice(DeviceId id, backend::Device* device) {
  MutexLock lock(&devices_mu_);
  devices_[id] = device;
}

void CollectiveHub::DetachDevice(DeviceId id) {
  MutexLock lock(&devices_mu_);
  devices_.erase(id);
}

backend::Device* CollectiveHub::DeviceOf(DeviceId id) const {
  MutexLock lock(&devices_mu_);
  auto it = devices_.find(id);
  return it == devices_.end() ? nullptr : it->second;
}

absl::StatusOr<HubCollectives::Group> HubCollectives::MakeGroup(
    int index, absl::Span<const std::string> axes) const {
  CW_ASSIGN_OR_RETURN(const Mesh::Groups* groups, mesh_->GroupsOver(axes));
  const int group = groups->group_of[position_];
  Group g;
  g.rank = groups->rank[position_];
  g.members = &groups->members[group];
  g.key = CollectiveKey{run_, node_, index, groups->leader[group]};
  return g;
}

std::string HubCollectives::Describe(int index, absl::Span<const std::string> axes,
                                     absl::string_view op) const {
  return absl::StrCat(op, " #", index, " over {", absl::StrJoin(axes, ","), "} in node ", node_,
                      " (", function_name_, ") of ", run_.ToString());
}

absl::Status HubCollectives::AllReduce(int index, absl::Span<const std::string> axes,
                                       ir::ReduceKind kind, const ir::Shape& shape,
                                       void* data) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, "all_reduce"); };
  const Timed timed(&micros_);
  return hub_->AllReduce(g.key, mesh_->devices()[position_], g.rank, *g.members, shape, kind,
                         data, CollectiveWhat(what));
}

absl::Status HubCollectives::AllGather(int index, absl::Span<const std::string> axes,
                                       const ir::Shape& in_shape, const ir::Shape& out_shape,
                                       int64_t dimension, const void* in, void* out) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, "all_gather"); };
  const Timed timed(&micros_);
  return hub_->AllGather(g.key, mesh_->devices()[position_], g.rank, *g.members, in_shape,
                         out_shape, dimension, in, out, CollectiveWhat(what));
}

absl::Status HubCollectives::ReduceScatter(int index, absl::Span<const std::string> axes,
                                           ir::ReduceKind kind, const ir::Shape& in_shape,
                                           const ir::Shape& out_shape, int64_t dimension,
                                           const void* in, void* out) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, "reduce_scatter"); };
  const Timed timed(&micros_);
  return hub_->ReduceScatter(g.key, mesh_->devices()[position_], g.rank, *g.members, kind,
                             in_shape, out_shape, dimension, in, out, CollectiveWhat(what));
}

absl::Status HubCollectives::AllToAll(int index, absl::Span<const std::string> axes,
                                      const ir::Shape& in_shape, const ir::Shape& out_shape,
                                      int64_t split_dimension, int64_t concat_dimension,
                                      const void* in, void* out) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, "all_to_all"); };
  const Timed timed(&micros_);
  return hub_->AllToAll(g.key, mesh_->devices()[position_], g.rank, *g.members, in_shape,
                        out_shape, split_dimension, concat_dimension, in, out,
                        CollectiveWhat(what));
}

absl::Status HubCollectives::CollectivePermute(
    int index, absl::Span<const std::string> axes, const ir::Shape& shape,
    absl::Span<const std::pair<int64_t, int64_t>> pairs, const void* in, void* out) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, "collective_permute"); };
  const Timed timed(&micros_);
  return hub_->CollectivePermute(g.key, mesh_->devices()[position_], g.rank, *g.members,
                                 shape, pairs, in, out, CollectiveWhat(what));
}

absl::StatusOr<backend::CollectiveGroup> HubCollectives::GroupOf(
    absl::Span<const std::string> axes) const {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(0, axes));
  backend::CollectiveGroup group;
  group.rank = g.rank;
  group.devices.reserve(g.members->size());
  for (DeviceId d : *g.members) group.devices.push_back(hub_->DeviceOf(d));
  return group;
}

absl::Status HubCollectives::MeetOnDevices(int index, absl::Span<const std::string> axes,
                                           ir::OpKind op, const void* operand,
                                           PerformOnDevices perform) {
  CW_ASSIGN_OR_RETURN(Group g, MakeGroup(index, axes));
  const auto what = [&] { return Describe(index, axes, ir::OpName(op)); };
  const Timed timed(&micros_);
  return hub_->MeetOnDevices(g.key, mesh_->devices()[position_], g.rank, *g.members, op, operand,
                             CollectiveWhat(what), perform);
}

}  // namespace causeway
