// CollectiveHub: where the devices of a gang meet for collectives, for all
// devices of one process (shared memory). Each participant contributes its
// buffers and blocks until the whole group has; the last to arrive performs
// the whole collective — reductions in rank order, so every run gives
// bit-identical results — writing every participant's result buffer. Every
// kind (all_reduce, all_gather, reduce_scatter, all_to_all,
// collective_permute) meets the same way, so all of them take part in the
// watchdog below, the timeout, AbortGang and Shutdown.
//
// The hub is also the collective watchdog. Gang scheduling makes every
// device meet its peers in the same order; when that order is violated
// (e.g. the scheduler is bypassed), devices can each block in a different
// collective waiting for the other. The hub keeps a wait-for graph of blocked
// devices — device d, blocked in collective K, waits for each member of K
// that has not arrived and is itself blocked in another collective — and on
// a cycle aborts every collective on it with ABORTED, naming the devices and
// collectives involved. A timeout bounds every wait as a last resort.
#ifndef CAUSEWAY_WORKER_COLLECTIVE_HUB_H_
#define CAUSEWAY_WORKER_COLLECTIVE_HUB_H_

#include <chrono>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "causeway/backend/executable.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/function.h"
#include "causeway/topology/mesh.h"

namespace causeway {

struct CollectiveKey {
  RunId run;
  int node = 0;
  int index = 0;         // collective instruction within the function
  int group_leader = 0;  // lowest mesh position in the group
  friend bool operator==(const CollectiveKey&, const CollectiveKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const CollectiveKey& k) {
    return H::combine(std::move(h), k.run, k.node, k.index, k.group_leader);
  }
};

// Collectives among whole processes, one rank per process: the step
// between processes of a hierarchical collective, done by a collective
// library (Gloo: ring and halving-doubling algorithms over TCP). Every
// process of `hosts` (sorted, distinct, this one among them) makes the same
// call for the same `key` and `generation`; calls for different keys may
// run concurrently. Each call ends by `deadline`. Thread-safe.
//
// The library's connections between a group of processes have a
// generation: a call that fails drops them, and the next connects afresh
// under a higher one. Processes agree on it before a call: each tells the
// others its own (Generation, sent with its readiness) and all use the
// highest, so a process that saw a failure the others did not makes them
// all reconnect.
class ProcessCollectives {
 public:
  virtual ~ProcessCollectives() = default;
  // For messages: "gloo".
  virtual absl::string_view name() const = 0;
  // Collectives moving fewer bytes than this (a member's operand; for
  // all_gather and all_to_all, every member's) take the data plane instead:
  // the library's latency on small operands can be the higher. Every
  // process of a cluster must use the same value.
  virtual int64_t from_bytes() const = 0;
  // Reduces `elements` values of `dtype` at `data`, in place, over the
  // processes; every process gets the same bits.
  // This process's generation of the group's connections: that of the
  // connections it holds, or the next after a failure (0 at first).
  virtual int64_t Generation(absl::Span<const HostId> hosts) = 0;
  virtual absl::Status AllReduce(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                 int64_t generation, ir::DType dtype, ir::ReduceKind kind,
                                 void* data, int64_t elements, absl::Time deadline) = 0;
  // Process i of `hosts` contributes `bytes[i]` bytes (this one from `in`);
  // `out` receives every contribution, in `hosts` order.
  virtual absl::Status AllGather(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                 int64_t generation, const void* in,
                                 absl::Span<const int64_t> bytes, void* out,
                                 absl::Time deadline) = 0;
  // Process i of `hosts` sends `send_bytes[j]` bytes to process j (the
  // parts consecutive in `in`, in `hosts` order) and receives
  // `recv_bytes[j]` from process j (consecutive in `out`, in `hosts`
  // order); its own part is copied.
  virtual absl::Status AllToAll(const CollectiveKey& key, absl::Span<const HostId> hosts,
                                int64_t generation, const void* in,
                                absl::Span<const int64_t> send_bytes, void* out,
                                absl::Span<const int64_t> recv_bytes, absl::Time deadline) = 0;
  // An entry, from host `from`, of the rendezvous through which the
  // library connects processes (untrusted: checked and bounded).
  virtual void DeliverRendezvous(HostId from, std::string key, std::string value) = 0;
  // `host` is gone (`status` says why): drops whatever connects to it. A
  // call that fails because a peer died names the lost host as its cause.
  virtual void HostLost(HostId host, const absl::Status& status) = 0;
};

// How a hub reaches the hubs of other processes, when a gang spans several
// (the distributed cluster). Each process's hub meets its own members.
// Then, one of two ways:
// - with process_collectives(): once all of a process's members of a
//   collective have arrived it tells the other processes (SendReady); once
//   every process is ready, one local member per process combines its
//   process's members (reductions in rank order) and the processes meet in
//   the library's collective (all_reduce and reduce_scatter: an all-reduce
//   of the combined operand; all_gather and all_to_all: an all-gather of
//   the processes' operands), each writing its own members' results.
//   collective_permute always takes the other way.
// - otherwise every member's contribution is sent to every other process
//   with a member, and each process performs the whole collective itself
//   (in rank order, so all get bit-identical results).
// Implementations are thread-safe and never block on the network.
class CollectivePeers {
 public:
  virtual ~CollectivePeers() = default;
  virtual HostId self() const = 0;
  // The host of `device`; known for every device the cluster ever had.
  virtual HostId HostOf(DeviceId device) const = 0;
  // Sends member `rank`'s `bytes` for `key` to host `to`.
  virtual void SendContribution(HostId to, const CollectiveKey& key, int rank, const void* data,
                                int64_t bytes) = 0;
  // Tells every other host that gang (run, node) failed.
  virtual void BroadcastAbort(RunId run, int node, const absl::Status& status) = 0;
  // The library for collectives between processes; nullptr: none (every
  // contribution is sent to every process).
  virtual ProcessCollectives* process_collectives() { return nullptr; }
  // Tells host `to` that every member of `key` in this process has
  // arrived, and this process's generation of the library's connections.
  virtual void SendReady(HostId /*to*/, const CollectiveKey& /*key*/, int64_t /*generation*/) {}
};

// What a collective is, for error messages: a text, or a way to format one
// that runs only when a message (or the first member's record of the
// collective) needs it, so that no member formats it on the way through.
// Refers to what it was made from: valid for the call it is passed to.
class CollectiveWhat {
 public:
  CollectiveWhat(const std::string& text) : text_(text) {}  // NOLINT: implicit
  CollectiveWhat(const char* text) : text_(text) {}         // NOLINT: implicit
  explicit CollectiveWhat(absl::FunctionRef<std::string()> format) : format_(format) {}

  std::string str() const { return format_.has_value() ? (*format_)() : std::string(text_); }

 private:
  absl::string_view text_;
  std::optional<absl::FunctionRef<std::string()>> format_;
};

// Thread-safe.
class CollectiveHub {
 public:
  // `peers` (optional, not owned, must outlive the hub) connects this hub
  // to the hubs of other processes.
  explicit CollectiveHub(absl::Duration timeout, CollectivePeers* peers = nullptr)
      : timeout_(timeout), peers_(peers) {}

  // Contributes `data` (`shape`) as member `rank` of `members` (device ids
  // in rank order) and blocks until every member has; then `data` holds the
  // reduction. `what` describes the collective for error messages.
  // Errors: ABORTED (deadlock detected, or Shutdown), DEADLINE_EXCEEDED
  // (timeout), INVALID_ARGUMENT (members disagree on the group).
  // From kPartedFromBytes per member, the reduction is split into parts
  // (one per member of this process, up to kMaxParts) that the members
  // perform together, each on its own thread, when they all meet here (not
  // in a library across processes). Every part adds in rank order, so the
  // result is the same bit for bit.
  absl::Status AllReduce(const CollectiveKey& key, DeviceId self, int rank,
                         const std::vector<DeviceId>& members, const ir::Shape& shape,
                         ir::ReduceKind kind, void* data, const CollectiveWhat& what);
  static constexpr int64_t kPartedFromBytes = 256 << 10;
  static constexpr int kMaxParts = 16;

  // The other collectives: `in` (`in_shape`) is this member's operand, `out`
  // (`out_shape`) its result; they must not overlap. Semantics as in
  // ir::OpKind. Errors as AllReduce, plus INVALID_ARGUMENT when the shapes
  // or source/target pairs do not fit the group (reported by every member
  // without meeting, since every member sees the same shapes).
  absl::Status AllGather(const CollectiveKey& key, DeviceId self, int rank,
                         const std::vector<DeviceId>& members, const ir::Shape& in_shape,
                         const ir::Shape& out_shape, int64_t dimension, const void* in,
                         void* out, const CollectiveWhat& what);
  absl::Status ReduceScatter(const CollectiveKey& key, DeviceId self, int rank,
                             const std::vector<DeviceId>& members, ir::ReduceKind kind,
                             const ir::Shape& in_shape, const ir::Shape& out_shape,
                             int64_t dimension, const void* in, void* out,
                             const CollectiveWhat& what);
  absl::Status AllToAll(const CollectiveKey& key, DeviceId self, int rank,
                        const std::vector<DeviceId>& members, const ir::Shape& in_shape,
                        const ir::Shape& out_shape, int64_t split_dimension,
                        int64_t concat_dimension, const void* in, void* out,
                        const CollectiveWhat& what);
  absl::Status CollectivePermute(const CollectiveKey& key, DeviceId self, int rank,
                                 const std::vector<DeviceId>& members, const ir::Shape& shape,
                                 absl::Span<const std::pair<int64_t, int64_t>> pairs,
                                 const void* in, void* out, const CollectiveWhat& what);

  // A collective whose bytes the members' device kind moves itself
  // (backend::CollectiveOps::MeetOnDevices): each member passes its
  // `operand`, opaque to the hub; once every member has arrived, the last
  // runs `perform` over all of them in rank order while the others wait, and
  // all return its status. The rendezvous, the watchdog, the timeout and the
  // aborts are the other collectives'. INVALID_ARGUMENT for a group with a
  // member in another process, and when members disagree on whether they
  // meet on devices.
  absl::Status MeetOnDevices(const CollectiveKey& key, DeviceId self, int rank,
                             const std::vector<DeviceId>& members, ir::OpKind op,
                             const void* operand, const CollectiveWhat& what,
                             backend::CollectiveOps::PerformOnDevices perform);

  // The devices of this process, for kinds that move a collective's bytes
  // themselves (HubCollectives::GroupOf). A host attaches its devices when
  // made and detaches them before they are destroyed.
  void AttachDevice(DeviceId id, backend::Device* device);
  void DetachDevice(DeviceId id);
  // Null unless attached.
  backend::Device* DeviceOf(DeviceId id) const;

  // The launch of node `node` of `run` failed on one device without
  // reaching (all of) its collectives: fails every pending and later
  // collective of that gang with `status`, so its peers do not wait for a
  // member that will never come.
  void AbortGang(RunId run, int node, const absl::Status& status);

  // Aborts every pending and future collective.
  void Shutdown();

  // Cross-process collectives (see CollectivePeers).
  // Member `rank`'s contribution to `key`, from another process. Kept until
  // a local member of `key` arrives; a contribution of the wrong size fails
  // the collective with INVALID_ARGUMENT.
  void DeliverContribution(const CollectiveKey& key, int rank, std::string bytes);
  // Every member of `key` on host `from` has arrived (with
  // process_collectives()). Kept, as contributions are, until a local
  // member arrives; unexpected ones fail the collective.
  void DeliverReady(const CollectiveKey& key, HostId from, int64_t generation);
  // AbortGang, reported by another process (not sent on again).
  void AbortGangFromPeer(RunId run, int node, const absl::Status& status);
  // `host` is gone: every collective still waiting for one of its members
  // fails with `status`, and so does every later one that includes it.
  void HostLost(HostId host, const absl::Status& status);

  // Drops contributions from other processes that have waited more than
  // `ttl` for their collective's first local member (its run never came
  // here), failing that gang for members that arrive later. Called by the
  // host's housekeeping.
  void Housekeep(absl::Time now, absl::Duration ttl = absl::Seconds(60));
  // Bytes of contributions held for collectives with no local member yet.
  int64_t early_remote_bytes() const;
  // Bounds on those: beyond either, a new one is dropped and its gang fails.
  static constexpr int64_t kMaxEarlyRemoteBytes = int64_t{256} << 20;
  static constexpr int64_t kMaxEarlyRemoteCount = 65536;

  int64_t deadlocks_detected() const;

 private:
  struct State {
    ir::OpKind op = ir::OpKind::kAllReduce;
    CollectiveKey key;
    std::vector<DeviceId> members;
    std::vector<const void*> inputs;
    std::vector<void*> buffers;  // results (all_reduce: in place)
    std::vector<bool> arrived_rank;
    bool on_device = false;  // MeetOnDevices: `inputs` are the kind's operands
    // Members from other processes: their contribution and result space.
    int64_t in_bytes = 0;
    int64_t out_bytes = 0;
    std::vector<std::string> remote_in;
    std::vector<std::string> remote_out;
    int local_members = 0;
    int local_arrived = 0;
    int arrived = 0;  // local and remote
    int remote_arrived = 0;
    int departed = 0;
    bool done = false;
    absl::Status status;
    std::string what;
    // Bumped (and its waiters woken, all at once: WakeLocked) when `done`,
    // `status` or `arrived` changes; only this collective's members wait on
    // it, without the hub's lock.
    std::atomic<uint32_t> wake{0};
    // Set (release) once the collective succeeded and its last member took
    // it off the hub's books: a woken member returns at once, without
    // taking the hub's lock again.
    std::atomic<bool> completed{false};
    // Set while the last member performs the collective outside the hub's
    // lock; members cannot leave (their buffers are being written) and the
    // collective can no longer be aborted.
    bool completing = false;
    // A completion split into `parts` ranges (PartedCompletion): members
    // claim the next part under the hub's lock and perform it outside, so a
    // large reduction runs on every member's thread, not the last one's;
    // the member finishing the last part completes the collective. 0: the
    // last member performs the whole completion.
    int parts = 0;
    int next_part = 0;
    int parts_done = 0;

    // Through the library of CollectivePeers::process_collectives(): the
    // processes with members (sorted), each rank's host, the call's
    // deadline, and the other processes' operands (all_gather, all_to_all).
    ProcessCollectives* across = nullptr;
    std::vector<HostId> hosts;
    std::vector<HostId> rank_hosts;
    std::vector<std::vector<int>> ranks_on;  // each process's ranks, in `hosts` order
    int self_index = 0;                       // this process in `hosts`
    const std::vector<int>& local_ranks() const { return ranks_on[self_index]; }
    absl::Time deadline;
    int64_t generation = 0;  // the highest of the processes'
    std::vector<std::byte> gathered;

    bool finished() const { return done || !status.ok(); }
    // Neither finished nor about to be: a member waiting here is stuck.
    bool waiting() const { return !finished() && !completing; }
  };

  // REQUIRES: mu_. Fails `state` with `status` (unless already finished or
  // being completed) and wakes its waiting members.
  static void FailLocked(State& state, const absl::Status& status);
  // Wakes every member waiting on `state`.
  static void WakeLocked(State& state);

  // Performs the collective once every member arrived; runs on the last
  // member's thread WITHOUT mu_ held (every member is parked, its buffers
  // pinned), touching only the state's buffers. An error fails the
  // collective for every member.
  using Completion = std::function<absl::Status(State&)>;
  // Performs part `part` of `parts` of a completion that cannot fail; the
  // parts touch disjoint bytes of the state's buffers.
  using PartedCompletion = std::function<void(State&, int part, int parts)>;

  // Contributes (`in`, `out`) as member `rank` and blocks until the whole
  // group has, the last arrival running `complete`.
  // `in_bytes`/`out_bytes` size every member's operand and result.
  // `across` performs it when the members span processes and they meet in
  // a library (CollectivePeers::process_collectives); nullptr: this kind
  // never does. `parted`, when given, does what `complete` does in parts,
  // used for large operands (kPartedFromBytes).
  absl::Status Meet(const CollectiveKey& key, DeviceId self, int rank,
                    const std::vector<DeviceId>& members, ir::OpKind op, const void* in,
                    int64_t in_bytes, void* out, int64_t out_bytes, const CollectiveWhat& what,
                    const Completion& complete, const Completion* across = nullptr,
                    const PartedCompletion* parted = nullptr, bool on_device = false)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // REQUIRES: mu_. The collective `state` (at `key`) succeeded: takes it off
  // the hub's books for every member and wakes them.
  void SucceedLocked(const CollectiveKey& key, const std::shared_ptr<State>& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REQUIRES: mu_. Records that host `from` is ready in `state`.
  void AbsorbReadyLocked(State& state, HostId from, int64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Across processes: gathers every process's operands (its members', in
  // rank order) and points `state.inputs` of the other processes' ranks at
  // them; their `buffers` stay null.
  absl::Status GatherAcross(const CollectiveKey& key, State& state) const;
  void AcceptContribution(const CollectiveKey& key, int rank, std::string bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  void AcceptReady(const CollectiveKey& key, HostId from, int64_t generation)
      ABSL_LOCKS_EXCLUDED(mu_);
  // REQUIRES: mu_. Records a remote member's contribution in `state`.
  void AbsorbRemoteLocked(State& state, int rank, std::string bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the gang's collectives and remembers it, so late members fail too.
  void AbortGangLocal(RunId run, int node, const absl::Status& status);

  // REQUIRES: mu_. Looks for a cycle through `self` in the wait-for graph;
  // if found aborts the collectives on it and returns true.
  bool DetectDeadlockLocked(DeviceId self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // REQUIRES: mu_. Called as a member leaves `key`: forgets the state once
  // every member has left, or — for an aborted gang, whose missing members
  // will fail on arrival without it — once every member that came has left.
  void DepartLocked(const CollectiveKey& key, State& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reduces elements [begin, end) of every member's buffer in rank order
  // into all of them (touches only `state`).
  static void Reduce(State& state, const ir::Shape& shape, ir::ReduceKind kind, int64_t begin,
                     int64_t end);

  // Messages to other processes decided under mu_ and sent once it is
  // released (a peer may deliver on the sending thread, into its own
  // hub's lock): readiness, and the answer to a peer that disagrees on
  // how collectives travel. Any thread that releases mu_ may send them.
  void Post(std::function<void()> send) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushOutbox() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration timeout_;
  CollectivePeers* const peers_;
  mutable Mutex mu_;
  std::vector<std::function<void()>> outbox_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> outbox_pending_{false};
  // Contributions from other processes that came before any local member,
  // with when the first came; their bytes and count in all.
  struct EarlyRemote {
    std::vector<std::pair<int, std::string>> contributions;
    std::vector<std::pair<HostId, int64_t>> ready;  // with their generations
    absl::Time arrived;
  };
  absl::flat_hash_map<CollectiveKey, EarlyRemote> early_remote_ ABSL_GUARDED_BY(mu_);
  int64_t early_remote_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t early_remote_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Removes early_remote_[it], keeping the totals; returns it.
  EarlyRemote EraseEarlyLocked(
      absl::flat_hash_map<CollectiveKey, EarlyRemote>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the gang of (run, node) as aborted with `status` (members that
  // arrive later fail at once) and fails its collectives in progress.
  void AbortGangLocked(RunId run, int node, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<HostId, absl::Status> lost_hosts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CollectiveKey, std::shared_ptr<State>> states_ ABSL_GUARDED_BY(mu_);
  // The collective each blocked device waits in.
  absl::flat_hash_map<DeviceId, CollectiveKey> blocked_ ABSL_GUARDED_BY(mu_);
  // Gangs aborted by AbortGang. Entries are small and kept so that members
  // arriving late fail too; the oldest are dropped past kMaxAbortedGangs.
  static constexpr size_t kMaxAbortedGangs = 4096;
  absl::flat_hash_map<std::pair<RunId, int>, absl::Status> aborted_gangs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<RunId, int>> aborted_order_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  mutable Mutex devices_mu_;
  absl::flat_hash_map<DeviceId, backend::Device*> devices_ ABSL_GUARDED_BY(devices_mu_);
  int64_t deadlocks_ ABSL_GUARDED_BY(mu_) = 0;
};

// The CollectiveOps of one launch: one device's view of the hub.
class HubCollectives final : public backend::CollectiveOps {
 public:
  // `mesh` and `function_name` must outlive this object (they live in the
  // program plan, which the launch keeps alive).
  HubCollectives(CollectiveHub* hub, RunId run, int node, const Mesh* mesh, int position,
                 absl::string_view function_name)
      : hub_(hub), run_(run), node_(node), mesh_(mesh), position_(position),
        function_name_(function_name) {}

  absl::Status AllReduce(int index, absl::Span<const std::string> axes, ir::ReduceKind kind,
                         const ir::Shape& shape, void* data) override;
  absl::Status AllGather(int index, absl::Span<const std::string> axes,
                         const ir::Shape& in_shape, const ir::Shape& out_shape,
                         int64_t dimension, const void* in, void* out) override;
  absl::Status ReduceScatter(int index, absl::Span<const std::string> axes,
                             ir::ReduceKind kind, const ir::Shape& in_shape,
                             const ir::Shape& out_shape, int64_t dimension, const void* in,
                             void* out) override;
  absl::Status AllToAll(int index, absl::Span<const std::string> axes,
                        const ir::Shape& in_shape, const ir::Shape& out_shape,
                        int64_t split_dimension, int64_t concat_dimension, const void* in,
                        void* out) override;
  absl::Status CollectivePermute(int index, absl::Span<const std::string> axes,
                                 const ir::Shape& shape,
                                 absl::Span<const std::pair<int64_t, int64_t>> pairs,
                                 const void* in, void* out) override;
  // The group's devices as the hub knows them (CollectiveHub::DeviceOf).
  absl::StatusOr<backend::CollectiveGroup> GroupOf(
      absl::Span<const std::string> axes) const override;
  absl::Status MeetOnDevices(int index, absl::Span<const std::string> axes, ir::OpKind op,
                             const void* operand, PerformOnDevices perform) override;
  // See CollectiveHub::AbortGang.
  void AbortGang(const absl::Status& status) { hub_->AbortGang(run_, node_, status); }
  int64_t micros_in_collectives() const override { return micros_; }

 private:
  CollectiveHub* const hub_;
  const RunId run_;
  const int node_;
  const Mesh* const mesh_;  // owned by the program plan, which outlives the launch
  const int position_;
  const absl::string_view function_name_;
  // Time inside the hub's calls; only the launch's device thread calls.
  int64_t micros_ = 0;

  // Adds the time from its construction to its end to `*micros`.
  class Timed {
   public:
    explicit Timed(int64_t* micros)
        : micros_(micros), start_(std::chrono::steady_clock::now()) {}
    ~Timed() {
      *micros_ += std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
    }

   private:
    int64_t* const micros_;
    const std::chrono::steady_clock::time_point start_;
  };

  // This device's group over `axes`, its rank in it, and the key of
  // collective `index`.
  struct Group {
    const std::vector<DeviceId>* members = nullptr;
    int rank = 0;
    CollectiveKey key;
  };
  // "all_reduce #0 over {x} in node 3 (f) of run 7", for error messages.
  std::string Describe(int index, absl::Span<const std::string> axes,
                       absl::string_view op) const;
  absl::StatusOr<Group> MakeGroup(int index, absl::Span<const std::string> axes) const;
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_COLLECTIVE_HUB_H_
