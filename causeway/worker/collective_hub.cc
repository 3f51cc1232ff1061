#include "causeway/worker/collective_hub.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "causeway/base/fiber.h"
#include "causeway/base/status_macros.h"
#include "causeway/topology/mesh.h"

namespace causeway {
// The members of a collective wait on a word of their collective's own
// (fiber::WaitWhileEqual: a futex on a thread, a parked fiber on a fiber),
// not on a condition variable under the hub's lock: when the last member
// completes it, every other member wakes at once and returns without the
// lock. With a condition variable each woken member had to re-acquire the
// hub's lock in turn, a chain of hand-offs that cost a gang of 32 devices on
// 2 cores ~0.6 ms a step (docs/BENCHMARKS.md, "Where a gang step goes").

void CollectiveHub::Post(std::function<void()> send) {
  outbox_.push_back(std::move(send));
  outbox_pending_.store(true, std::memory_order_release);
}

void CollectiveHub::FlushOutbox() {
  if (!outbox_pending_.load(std::memory_order_acquire)) return;
  std::vector<std::function<void()>> sends;
  {
    MutexLock lock(&mu_);
    sends.swap(outbox_);
    outbox_pending_.store(false, std::memory_order_relaxed);
  }
  for (auto& send : sends) send();
}

void CollectiveHub::WakeLocked(State& state) {
  state.wake.fetch_add(1, std::memory_order_release);
  fiber::WakeAll(state.wake);
}

absl::Status CollectiveHub::GatherAcross(const CollectiveKey& key, State& state) const {
  const int64_t in_bytes = state.in_bytes;
  std::vector<int64_t> bytes;
  for (const std::vector<int>& ranks : state.ranks_on) {
    bytes.push_back(in_bytes * static_cast<int64_t>(ranks.size()));
  }
  std::vector<std::byte> mine;
  mine.reserve(static_cast<size_t>(in_bytes) * static_cast<size_t>(state.local_members));
  for (int r : state.local_ranks()) {
    const auto* p = static_cast<const std::byte*>(state.inputs[r]);
    mine.insert(mine.end(), p, p + in_bytes);
  }
  state.gathered.resize(static_cast<size_t>(in_bytes) * state.members.size());
  CW_RETURN_IF_ERROR(state.across->AllGather(key, state.hosts, state.generation, mine.data(),
                                             bytes, state.gathered.data(), state.deadline));
  // Each process's operands are its ranks', in rank order, process after
  // process.
  const std::byte* next = state.gathered.data();
  for (size_t h = 0; h < state.ranks_on.size(); ++h) {
    for (int r : state.ranks_on[h]) {
      if (static_cast<int>(h) != state.self_index) state.inputs[r] = next;
      next += in_bytes;
    }
  }
  return absl::OkStatus();
}

absl::Status CollectiveHub::Meet(const CollectiveKey& key, DeviceId self, int rank,
                                 const std::vector<DeviceId>& members, ir::OpKind op,
                                 const void* in, int64_t in_bytes, void* out, int64_t out_bytes,
                                 const CollectiveWhat& what, const Completion& complete,
                                 const Completion* across, const PartedCompletion* parted,
                                 bool on_device) {
  const int size = static_cast<int>(members.size());
  std::vector<HostId> member_hosts;
  // The processes with members, when there are several and they meet in a
  // library.
  std::vector<HostId> hosts;
  ProcessCollectives* library = nullptr;
  if (peers_ != nullptr) {
    const HostId here = peers_->self();
    member_hosts.reserve(members.size());
    for (DeviceId d : members) member_hosts.push_back(peers_->HostOf(d));
    hosts = member_hosts;
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
    if (hosts.size() > 1 && across != nullptr) library = peers_->process_collectives();
    const int64_t volume =
        op == ir::OpKind::kAllGather || op == ir::OpKind::kAllToAll ? in_bytes * size : in_bytes;
    if (library != nullptr && volume < library->from_bytes()) library = nullptr;
    if (library == nullptr) {
      // Every other process with a member gets this member's contribution.
      for (HostId h : hosts) {
        if (h != here) peers_->SendContribution(h, key, rank, in, in_bytes);
      }
    }
  }
  // The hub's lock, held from here except while this member completes the
  // collective or waits; a member woken by its collective's success returns
  // without taking it again (`held` false).
  mu_.Lock();
  struct Held {
    CollectiveHub* hub;
    bool held = true;
    ~Held() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (held) hub->mu_.Unlock();
      hub->FlushOutbox();
    }
  } held{this};
  if (shutdown_) return absl::AbortedError(absl::StrCat(what.str(), ": runtime shutting down"));
  if (auto it = aborted_gangs_.find({key.run, key.node}); it != aborted_gangs_.end()) {
    return it->second;
  }
  for (HostId h : member_hosts) {
    if (auto it = lost_hosts_.find(h); it != lost_hosts_.end()) {
      return absl::UnavailableError(absl::StrCat(what.str(), ": ", it->second.message()));
    }
  }
  std::shared_ptr<State>& slot = states_[key];
  if (slot == nullptr) {
    slot = std::make_shared<State>();
    slot->op = op;
    slot->members = members;
    slot->inputs.assign(members.size(), nullptr);
    slot->buffers.assign(members.size(), nullptr);
    slot->arrived_rank.assign(members.size(), false);
    slot->on_device = on_device;
    slot->in_bytes = in_bytes;
    slot->out_bytes = out_bytes;
    slot->local_members = size;
    if (peers_ != nullptr) {
      slot->remote_in.resize(members.size());
      slot->remote_out.resize(members.size());
      slot->local_members = static_cast<int>(
          std::count(member_hosts.begin(), member_hosts.end(), peers_->self()));
    }
    slot->what = what.str();
    slot->key = key;
    if (library != nullptr) {
      slot->across = library;
      slot->hosts = hosts;
      slot->rank_hosts = member_hosts;
      slot->ranks_on.resize(hosts.size());
      for (int r = 0; r < size; ++r) {
        const auto h = std::lower_bound(hosts.begin(), hosts.end(), member_hosts[r]);
        slot->ranks_on[static_cast<size_t>(h - hosts.begin())].push_back(r);
      }
      slot->self_index = static_cast<int>(
          std::lower_bound(hosts.begin(), hosts.end(), peers_->self()) - hosts.begin());
      slot->deadline = absl::Now() + timeout_;
    }
    if (auto it = early_remote_.find(key); it != early_remote_.end()) {
      EarlyRemote early = EraseEarlyLocked(it);
      for (auto& [r, bytes] : early.contributions) AbsorbRemoteLocked(*slot, r, std::move(bytes));
      for (const auto& [h, generation] : early.ready) AbsorbReadyLocked(*slot, h, generation);
    }
  }
  std::shared_ptr<State> state = slot;
  if (state->members != members || state->op != op || rank < 0 || rank >= size ||
      members[rank] != self || state->arrived_rank[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        what.str(), ": participants disagree on the collective (", ir::OpName(state->op), " vs ",
        ir::OpName(op), "), the group or rank ", rank));
  }
  if (state->on_device != on_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        what.str(), ": participants disagree on whether the collective moves its bytes on ",
        "their devices or through the host (rank ", rank, ")"));
  }
  if (!state->status.ok()) {
    // Aborted before this member arrived.
    const absl::Status status = state->status;
    state->arrived_rank[rank] = true;
    DepartLocked(key, *state);
    return status;
  }
  state->inputs[rank] = in;
  state->buffers[rank] = out;
  state->arrived_rank[rank] = true;
  ++state->arrived;
  if (state->across != nullptr && ++state->local_arrived == state->local_members) {
    // The other processes may enter the library's collective once every
    // process has told them so.
    const int64_t generation = state->across->Generation(state->hosts);
    state->generation = std::max(state->generation, generation);
    for (HostId h : state->hosts) {
      if (h != peers_->self()) {
        Post([this, h, key, generation] { peers_->SendReady(h, key, generation); });
      }
    }
  }
  // Read from the clock only by a member that waits (the last to arrive
  // does not).
  std::optional<fiber::Deadline> deadline;
  bool blocked = false;
  while (!state->finished()) {
    if (state->arrived == size && !state->completing) {
      // Everyone is here (the last arrival may have been a remote member's
      // contribution): this member performs the collective. Copy and reduce
      // outside the lock, so collectives of other meshes (and other
      // tenants) are not serialised behind this one.
      if (blocked) blocked_.erase(self);
      blocked = false;
      state->completing = true;
      if (parted != nullptr && state->across == nullptr && in_bytes >= kPartedFromBytes &&
          state->local_members > 1) {
        // Every member of this process takes parts (woken to do so).
        state->parts = std::min(state->local_members, kMaxParts);
        WakeLocked(*state);
        continue;
      }
      mu_.Unlock();
      FlushOutbox();  // this process's readiness goes before it enters the library
      absl::Status done = state->across != nullptr ? (*across)(*state) : complete(*state);
      mu_.Lock();
      state->completing = false;
      if (done.ok()) {
        SucceedLocked(key, state);
        return absl::OkStatus();
      }
      FailLocked(*state, Annotate(done, what.str()));
      continue;
    }
    if (state->completing && state->next_part < state->parts) {
      // A part of a parted completion: parts cannot fail, and no member
      // leaves before the last part is done.
      const int part = state->next_part++;
      mu_.Unlock();
      (*parted)(*state, part, state->parts);
      mu_.Lock();
      if (++state->parts_done == state->parts) {
        state->completing = false;  // SucceedLocked takes every member off blocked_
        SucceedLocked(key, state);
        return absl::OkStatus();
      }
      continue;
    }
    // A member waiting for a completion already under way (the parted
    // one's other parts) is in no wait-for edge: nothing to register.
    if (!blocked && !state->completing) {
      blocked = true;
      blocked_[self] = key;
      DetectDeadlockLocked(self);
      continue;
    }
    // Wait without the hub's lock; `seen` read under it, so a wake-up
    // between here and the wait is not lost.
    const uint32_t seen = state->wake.load(std::memory_order_relaxed);
    const bool finishing = state->completing;
    if (!deadline.has_value()) deadline = fiber::DeadlineAfter(timeout_);
    mu_.Unlock();
    FlushOutbox();
    // Past the deadline but every member here: it is finishing; give it a
    // second more.
    const bool in_time = fiber::WaitWhileEqual(
        state->wake, seen,
        finishing ? std::max(*deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1))
                  : *deadline);
    if (state->completed.load(std::memory_order_acquire)) {
      held.held = false;  // the completing member took this one off the books
      return absl::OkStatus();
    }
    mu_.Lock();
    if (in_time || finishing || state->completing) continue;
    if (state->arrived == size) continue;
    break;
  }
  if (blocked) blocked_.erase(self);
  if (!state->finished()) {
    std::vector<std::string> missing;
    for (int r = 0; r < size; ++r) {
      if (!state->arrived_rank[r]) missing.push_back(members[r].ToString());
    }
    FailLocked(*state, absl::DeadlineExceededError(
                           absl::StrCat(what.str(), ": timed out after ", absl::FormatDuration(timeout_),
                                        " waiting for ", absl::StrJoin(missing, ", "))));
  }
  const absl::Status status = state->done ? absl::OkStatus() : state->status;
  DepartLocked(key, *state);
  return status;
}

void CollectiveHub::SucceedLocked(const CollectiveKey& key, const std::shared_ptr<State>& state) {
  state->done = true;
  // No member can fail or leave it now: take it off the hub's books for all
  // of them, so that they return as soon as they wake.
  for (DeviceId m : state->members) {
    auto b = blocked_.find(m);
    if (b != blocked_.end() && b->second == key) blocked_.erase(b);
  }
  if (auto it = states_.find(key); it != states_.end() && it->second == state) {
    states_.erase(it);
  }
  state->completed.store(true, std::memory_order_release);
  WakeLocked(*state);
}

void CollectiveHub::AbsorbRemoteLocked(State& state, int rank, std::string bytes) {
  const int size = static_cast<int>(state.members.size());
  if (state.finished() || state.completing) return;
  if (state.across != nullptr) {
    // The peer's process sends contributions: tell it this one meets in
    // the library, so that it fails too instead of waiting.
    if (rank >= 0 && rank < size) {
      const HostId to = state.rank_hosts[rank];
      const CollectiveKey key = state.key;
      Post([this, to, key] { peers_->SendReady(to, key, 0); });
    }
    FailLocked(state, absl::InvalidArgumentError(absl::StrCat(
                          state.what, ": a contribution from rank ", rank,
                          " where the processes meet in ", state.across->name(),
                          ": the workers disagree on how collectives travel (their "
                          "--collectives and --gloo-from-bytes must match)")));
    return;
  }
  if (rank < 0 || rank >= size || state.arrived_rank[rank] ||
      peers_->HostOf(state.members[rank]) == peers_->self()) {
    FailLocked(state, absl::InvalidArgumentError(absl::StrCat(
                          state.what, ": unexpected contribution from rank ", rank)));
    return;
  }
  if (static_cast<int64_t>(bytes.size()) != state.in_bytes) {
    FailLocked(state, absl::InvalidArgumentError(
                          absl::StrCat(state.what, ": rank ", rank, " contributed ", bytes.size(),
                                       " bytes, expected ", state.in_bytes)));
    return;
  }
  state.remote_in[rank] = std::move(bytes);
  state.inputs[rank] = state.remote_in[rank].data();
  if (state.op == ir::OpKind::kAllReduce) {
    state.buffers[rank] = state.remote_in[rank].data();  // in place, as local members
  } else {
    state.remote_out[rank].resize(static_cast<size_t>(state.out_bytes));
    state.buffers[rank] = state.remote_out[rank].data();
  }
  state.arrived_rank[rank] = true;
  ++state.remote_arrived;
  if (++state.arrived == size) WakeLocked(state);
}

void CollectiveHub::AbsorbReadyLocked(State& state, HostId from, int64_t generation) {
  if (state.finished() || state.completing) return;
  int ranks = 0;
  bool duplicate = false;
  for (size_t r = 0; r < state.rank_hosts.size(); ++r) {
    if (state.rank_hosts[r] != from) continue;
    ++ranks;
    duplicate = duplicate || state.arrived_rank[r];
  }
  if (state.across == nullptr) {
    FailLocked(state, absl::InvalidArgumentError(absl::StrCat(
                          state.what, ": host ", from.ToString(),
                          " meets in a collective library where this one sends contributions: "
                          "the workers disagree on how collectives travel (their --collectives "
                          "and --gloo-from-bytes must match)")));
    return;
  }
  // Generations count failures of the library's connections: a peer's is
  // small; a huge one would only overflow.
  if (from == peers_->self() || ranks == 0 || duplicate || generation < 0 ||
      generation > (int64_t{1} << 40)) {
    FailLocked(state, absl::InvalidArgumentError(absl::StrCat(
                          state.what, ": unexpected readiness from host ", from.ToString())));
    return;
  }
  for (size_t r = 0; r < state.rank_hosts.size(); ++r) {
    if (state.rank_hosts[r] == from) state.arrived_rank[r] = true;
  }
  state.generation = std::max(state.generation, generation);
  state.remote_arrived += ranks;
  state.arrived += ranks;
  if (state.arrived == static_cast<int>(state.members.size())) WakeLocked(state);
}

void CollectiveHub::DeliverReady(const CollectiveKey& key, HostId from, int64_t generation) {
  CW_CHECK(peers_ != nullptr);
  AcceptReady(key, from, generation);
  FlushOutbox();
}

void CollectiveHub::AcceptReady(const CollectiveKey& key, HostId from,
                                       int64_t generation) {
  MutexLock lock(&mu_);
  if (shutdown_ || aborted_gangs_.contains({key.run, key.node})) return;
  auto it = states_.find(key);
  if (it != states_.end()) {
    AbsorbReadyLocked(*it->second, from, generation);
    return;
  }
  if (early_remote_count_ + 1 > kMaxEarlyRemoteCount) {
    AbortGangLocked(key.run, key.node,
                    absl::ResourceExhaustedError(absl::StrCat(
                        "host ", from.ToString(), " was ready for node ", key.node, " of ",
                        key.run.ToString(), " but ", early_remote_count_,
                        " messages already wait for collectives that have not started here")));
    return;
  }
  EarlyRemote& early = early_remote_[key];
  if (early.contributions.empty() && early.ready.empty()) early.arrived = absl::Now();
  early.ready.emplace_back(from, generation);
  ++early_remote_count_;
}

void CollectiveHub::DeliverContribution(const CollectiveKey& key, int rank, std::string bytes) {
  CW_CHECK(peers_ != nullptr);
  AcceptContribution(key, rank, std::move(bytes));
  FlushOutbox();
}

void CollectiveHub::AcceptContribution(const CollectiveKey& key, int rank,
                                              std::string bytes) {
  MutexLock lock(&mu_);
  if (shutdown_ || aborted_gangs_.contains({key.run, key.node})) return;
  auto it = states_.find(key);
  if (it == states_.end()) {
    const int64_t size = static_cast<int64_t>(bytes.size());
    if (early_remote_bytes_ + size > kMaxEarlyRemoteBytes ||
        early_remote_count_ + 1 > kMaxEarlyRemoteCount) {
      AbortGangLocked(key.run, key.node,
                      absl::ResourceExhaustedError(absl::StrCat(
                          "a contribution to node ", key.node, " of ", key.run.ToString(),
                          " was dropped: ", early_remote_count_, " contributions (",
                          early_remote_bytes_, " bytes) already wait for collectives that "
                          "have not started here")));
      return;
    }
    EarlyRemote& early = early_remote_[key];
    if (early.contributions.empty() && early.ready.empty()) early.arrived = absl::Now();
    early.contributions.emplace_back(rank, std::move(bytes));
    early_remote_bytes_ += size;
    ++early_remote_count_;
    return;
  }
  AbsorbRemoteLocked(*it->second, rank, std::move(bytes));
}

CollectiveHub::EarlyRemote CollectiveHub::EraseEarlyLocked(
    absl::flat_hash_map<CollectiveKey, EarlyRemote>::iterator it) {
  EarlyRemote early = std::move(it->second);
  for (const auto& [rank, bytes] : early.contributions) {
    early_remote_bytes_ -= static_cast<int64_t>(bytes.size());
    --early_remote_count_;
  }
  early_remote_count_ -= static_cast<int64_t>(early.ready.size());
  early_remote_.erase(it);
  return early;
}

int64_t CollectiveHub::early_remote_bytes() const {
  MutexLock lock(&mu_);
  return early_remote_bytes_;
}

void CollectiveHub::Housekeep(absl::Time now, absl::Duration ttl) {
  MutexLock lock(&mu_);
  std::vector<CollectiveKey> expired;
  for (const auto& [key, early] : early_remote_) {
    if (now - early.arrived > ttl) expired.push_back(key);
  }
  for (const CollectiveKey& key : expired) {
    AbortGangLocked(key.run, key.node,
                    absl::DeadlineExceededError(absl::StrCat(
                        "contributions to node ", key.node, " of ", key.run.ToString(),
                        " came from other hosts but the run did not come here within ",
                        absl::FormatDuration(ttl))));
  }
}

void CollectiveHub::HostLost(HostId host, const absl::Status& status) {
  if (peers_ == nullptr) return;
  MutexLock lock(&mu_);
  lost_hosts_[host] = status;
  for (auto& [key, state] : states_) {
    for (size_t r = 0; r < state->members.size(); ++r) {
      if (!state->arrived_rank[r] && peers_->HostOf(state->members[r]) == host) {
        FailLocked(*state, absl::UnavailableError(absl::StrCat(state->what, ": ", status.message())));
        break;
      }
    }
  }
}

bool CollectiveHub::DetectDeadlockLocked(DeviceId self) {
  // Fast path: a cycle through `self` needs a missing member of its
  // collective that is itself blocked in another unfinished one. Usually the
  // missing members are simply running and will arrive.
  {
    const State& mine = *states_.at(blocked_.at(self));
    bool any_edge = false;
    for (size_t r = 0; r < mine.members.size() && !any_edge; ++r) {
      if (mine.arrived_rank[r]) continue;
      auto b = blocked_.find(mine.members[r]);
      any_edge = b != blocked_.end() && states_.at(b->second)->waiting();
    }
    if (!any_edge) return false;
  }
  // Depth-first search over blocked devices; `path` holds the devices on the
  // current branch.
  std::vector<DeviceId> path;
  absl::flat_hash_map<DeviceId, bool> visited;
  std::vector<DeviceId> cycle;
  // Runs under mu_ (held by the caller); the analysis cannot see into lambdas.
  std::function<bool(DeviceId)> visit = [&](DeviceId d) ABSL_NO_THREAD_SAFETY_ANALYSIS -> bool {
    path.push_back(d);
    visited[d] = true;
    const State& s = *states_.at(blocked_.at(d));
    for (size_t r = 0; r < s.members.size(); ++r) {
      if (s.arrived_rank[r]) continue;
      const DeviceId m = s.members[r];
      auto b = blocked_.find(m);
      if (b == blocked_.end()) continue;  // may still arrive
      // A device whose collective finished (aborted, not yet awake) or is
      // being completed is about to move on: not a wait edge.
      if (!states_.at(b->second)->waiting()) continue;
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
  for (DeviceId d : cycle) FailLocked(*states_.at(blocked_.at(d)), abort);
  return true;
}

void CollectiveHub::AbortGang(RunId run, int node, const absl::Status& status) {
  AbortGangLocal(run, node, status);
  if (peers_ != nullptr) peers_->BroadcastAbort(run, node, status);
}

void CollectiveHub::AbortGangFromPeer(RunId run, int node, const absl::Status& status) {
  AbortGangLocal(run, node, status);
}

void CollectiveHub::AbortGangLocal(RunId run, int node, const absl::Status& status) {
  MutexLock lock(&mu_);
  AbortGangLocked(run, node, status);
}

void CollectiveHub::AbortGangLocked(RunId run, int node, const absl::Status& status) {
  for (auto it = early_remote_.begin(); it != early_remote_.end();) {
    auto next = std::next(it);
    if (it->first.run == run && it->first.node == node) EraseEarlyLocked(it);
    it = next;
  }
  if (!aborted_gangs_.try_emplace({run, node}, status).second) return;
  aborted_order_.push_back({run, node});
  if (aborted_order_.size() > kMaxAbortedGangs) {
    aborted_gangs_.erase(aborted_order_.front());
    aborted_order_.pop_front();
  }
  for (auto& [key, state] : states_) {
    if (key.run == run && key.node == node) FailLocked(*state, status);
  }
}

void CollectiveHub::DepartLocked(const CollectiveKey& key, State& state) {
  ++state.departed;
  const bool all_left = state.departed == state.local_members;
  const bool aborted_gang_drained = !state.status.ok() && state.departed == state.arrived - state.remote_arrived &&
                                    aborted_gangs_.contains({key.run, key.node});
  if (all_left || aborted_gang_drained) {
    // Only this collective's entry: the key may have been reused since.
    if (auto it = states_.find(key); it != states_.end() && it->second.get() == &state) {
      states_.erase(it);
    }
  }
}

void CollectiveHub::FailLocked(State& state, const absl::Status& status) {
  if (state.finished() || state.completing) return;
  state.status = status;
  WakeLocked(state);
}

void CollectiveHub::Shutdown() {
  MutexLock lock(&mu_);
  shutdown_ = true;
  for (auto& [key, state] : states_) {
    FailLocked(*state, absl::AbortedError(absl::StrCat(state->what, ": runtime shutting down")));
  }
}

int64_t CollectiveHub::deadlocks_detected() const {
  MutexLock lock(&mu_);
  return deadlocks_;
}

}  // namespace causeway
