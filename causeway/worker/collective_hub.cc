#include "causeway/worker/collective_hub.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/status_macros.h"

namespace causeway {
namespace {

template <typename T>
void Combine(T* acc, const T* in, int64_t n, ir::ReduceKind kind) {
  if (kind == ir::ReduceKind::kSum) {
    for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
  }
}

}  // namespace

void CollectiveHub::ReduceLocked(State& state, const ir::Shape& shape, ir::ReduceKind kind) {
  const int64_t n = shape.num_elements();
  const size_t bytes = static_cast<size_t>(shape.byte_size());
  // Reduce into rank 0's buffer in rank order, then broadcast.
  void* acc = state.buffers[0];
  for (size_t r = 1; r < state.buffers.size(); ++r) {
    switch (shape.dtype) {
      case ir::DType::kF32:
        Combine(static_cast<float*>(acc), static_cast<const float*>(state.buffers[r]), n, kind);
        break;
      case ir::DType::kI32:
        Combine(static_cast<int32_t*>(acc), static_cast<const int32_t*>(state.buffers[r]), n,
                kind);
        break;
      case ir::DType::kPred:
        Combine(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(state.buffers[r]), n,
                kind);
        break;
    }
  }
  for (size_t r = 1; r < state.buffers.size(); ++r) std::memcpy(state.buffers[r], acc, bytes);
}

absl::Status CollectiveHub::AllReduce(const CollectiveKey& key, DeviceId self, int rank,
                                      const std::vector<DeviceId>& members,
                                      const ir::Shape& shape, ir::ReduceKind kind, void* data,
                                      const std::string& what) {
  MutexLock lock(&mu_);
  if (shutdown_) return absl::AbortedError(absl::StrCat(what, ": runtime shutting down"));
  if (auto it = aborted_gangs_.find({key.run, key.node}); it != aborted_gangs_.end()) {
    return it->second;
  }
  std::shared_ptr<State>& slot = states_[key];
  if (slot == nullptr) {
    slot = std::make_shared<State>();
    slot->members = members;
    slot->buffers.assign(members.size(), nullptr);
    slot->arrived_rank.assign(members.size(), false);
    slot->what = what;
  }
  std::shared_ptr<State> state = slot;
  if (state->members != members || rank < 0 || rank >= static_cast<int>(members.size()) ||
      state->arrived_rank[rank]) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": participants disagree on the group or rank ", rank));
  }
  if (!state->status.ok()) {
    // Aborted before this member arrived.
    const absl::Status status = state->status;
    state->arrived_rank[rank] = true;
    if (++state->departed == static_cast<int>(members.size())) states_.erase(key);
    return status;
  }
  state->buffers[rank] = data;
  state->arrived_rank[rank] = true;
  if (++state->arrived == static_cast<int>(members.size())) {
    ReduceLocked(*state, shape, kind);
    state->done = true;
  } else {
    blocked_[self] = key;
    DetectDeadlockLocked(self);
    const bool finished = mu_.AwaitWithTimeout(
        [&state]() { return state->done || !state->status.ok(); }, timeout_);
    blocked_.erase(self);
    if (!finished) {
      std::vector<std::string> missing;
      for (size_t r = 0; r < members.size(); ++r) {
        if (!state->arrived_rank[r]) missing.push_back(members[r].ToString());
      }
      state->status = absl::DeadlineExceededError(
          absl::StrCat(what, ": timed out after ", absl::FormatDuration(timeout_),
                       " waiting for ", absl::StrJoin(missing, ", ")));
    }
  }
  const absl::Status status = state->done ? absl::OkStatus() : state->status;
  if (++state->departed == static_cast<int>(members.size())) states_.erase(key);
  return status;
}

bool CollectiveHub::DetectDeadlockLocked(DeviceId self) {
  // Depth-first search over blocked devices; `path` holds the devices on the
  // current branch.
  std::vector<DeviceId> path;
  absl::flat_hash_map<DeviceId, bool> visited;
  std::vector<DeviceId> cycle;
  std::function<bool(DeviceId)> visit = [&](DeviceId d) -> bool {
    path.push_back(d);
    visited[d] = true;
    const State& s = *states_.at(blocked_.at(d));
    for (size_t r = 0; r < s.members.size(); ++r) {
      if (s.arrived_rank[r]) continue;
      const DeviceId m = s.members[r];
      if (!blocked_.contains(m)) continue;  // may still arrive
      if (m == self) {
        cycle = path;
        return true;
      }
      if (!visited[m] && visit(m)) return true;
    }
    path.pop_back();
    return false;
  };
  if (!visit(self)) return false;

  ++deadlocks_;
  std::vector<std::string> links;
  for (size_t i = 0; i < cycle.size(); ++i) {
    const DeviceId next = cycle[(i + 1) % cycle.size()];
    links.push_back(absl::StrCat(cycle[i].ToString(), " waits in ",
                                 states_.at(blocked_.at(cycle[i]))->what, " for ",
                                 next.ToString()));
  }
  const absl::Status abort = absl::AbortedError(absl::StrCat(
      "deadlock detected by the collective watchdog: devices reached collectives in "
      "inconsistent orders (",
      absl::StrJoin(links, "; "), ")"));
  for (DeviceId d : cycle) {
    State& s = *states_.at(blocked_.at(d));
    if (s.status.ok()) s.status = abort;
  }
  return true;
}

void CollectiveHub::AbortGang(RunId run, int node, const absl::Status& status) {
  MutexLock lock(&mu_);
  if (!aborted_gangs_.try_emplace({run, node}, status).second) return;
  aborted_order_.push_back({run, node});
  if (aborted_order_.size() > kMaxAbortedGangs) {
    aborted_gangs_.erase(aborted_order_.front());
    aborted_order_.erase(aborted_order_.begin());
  }
  for (auto& [key, state] : states_) {
    if (key.run == run && key.node == node && !state->done && state->status.ok()) {
      state->status = status;
    }
  }
}

void CollectiveHub::Shutdown() {
  MutexLock lock(&mu_);
  shutdown_ = true;
  for (auto& [key, state] : states_) {
    if (!state->done && state->status.ok()) {
      state->status = absl::AbortedError(absl::StrCat(state->what, ": runtime shutting down"));
    }
  }
}

int64_t CollectiveHub::deadlocks_detected() const {
  MutexLock lock(&mu_);
  return deadlocks_;
}

absl::Status HubCollectives::AllReduce(int index, absl::Span<const std::string> axes,
                                       ir::ReduceKind kind, const ir::Shape& shape,
                                       void* data) {
  CW_ASSIGN_OR_RETURN(std::vector<int> group, mesh_->Group(position_, axes));
  const int rank =
      static_cast<int>(std::find(group.begin(), group.end(), position_) - group.begin());
  std::vector<DeviceId> members;
  members.reserve(group.size());
  for (int p : group) members.push_back(mesh_->devices()[p]);
  const CollectiveKey key{run_, node_, index, *std::min_element(group.begin(), group.end())};
  const std::string what =
      absl::StrCat("all_reduce #", index, " over {", absl::StrJoin(axes, ","), "} in node ",
                   node_, " (", function_name_, ") of ", run_.ToString());
  return hub_->AllReduce(key, mesh_->devices()[position_], rank, members, shape, kind, data,
                         what);
}

}  // namespace causeway
