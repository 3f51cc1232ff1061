// HostExecutor: one per host. Receives the host's part of every run and
// prepares all of it at once — output buffers allocated (or queued for
// memory), input readiness wired to local buffers or to posted receive
// slots, launches queued on the device streams in the scheduler's order —
// before any predecessor has run. Owns the host's object store and device
// streams and is the endpoint of reshard transfers.
#ifndef CAUSEWAY_WORKER_HOST_EXECUTOR_H_
#define CAUSEWAY_WORKER_HOST_EXECUTOR_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/clock.h"
#include "causeway/base/mutex.h"
#include "causeway/store/object_store.h"
#include "causeway/topology/topology.h"
#include "causeway/transport/services.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/cancellations.h"
#include "causeway/worker/device_stream.h"
#include "causeway/base/trace.h"

namespace causeway {

class CheckpointIo;

struct HostExecutorOptions {
  HostInfo host;
  // In local order. Each is made by the kind it names (DeviceInfo::kind,
  // registered in this process: backend::FindDeviceKind).
  std::vector<DeviceInfo> devices;
  int64_t device_memory_bytes = int64_t{1} << 30;
  Clock* clock = Clock::Real();
  TraceRecorder* trace = nullptr;      // required
  CollectiveHub* collectives = nullptr;  // required
  DataTransport* transport = nullptr;  // required
  FaultInjector fault_injector;
  // Allocations waiting on a device with nothing freed for this long fail
  // with RESOURCE_EXHAUSTED (DeviceMemory::FailStalledWaiters).
  absl::Duration memory_stall_timeout = absl::Seconds(60);
  // Pieces that arrive before their run: kept at most this long, and at
  // most this many bytes and pieces in all; beyond, they are dropped and
  // the run's receive fails naming why when it is posted.
  absl::Duration early_piece_ttl = absl::Seconds(60);
  // A launch waits at most this long at the head of its device's queue for
  // its inputs (DeviceStream): bounds what a run that one host never got,
  // or a piece that never comes, costs the device's other work.
  absl::Duration input_timeout = absl::Minutes(5);
  int64_t early_piece_budget_bytes = int64_t{256} << 20;
  int64_t early_piece_budget_count = 65536;
  // How often the housekeeping thread runs Housekeep(); zero: never (tests
  // call Housekeep() themselves).
  absl::Duration housekeeping_period = absl::Seconds(1);
  // Told once per run enqueued here when this host's part of it is done
  // (every launch ran or failed; at once if it has none here, or the run
  // was refused or dropped), with the device time its launches took and
  // their number: how the island scheduler learns what runs cost. Runs on a
  // device thread or inside EnqueueRun(s), under no lock of the executor;
  // must not block. May be empty.
  std::function<void(HostId host, RunId run, int64_t device_us, int launches)> on_run_done;
  // 0: every host of a run tells on_run_done of its own part. k >= 1
  // (at most limits::kMaxReportFanout): a program's hosts of an island report its
  // runs up a k-ary tree of them (ReportTreeOf): each host waits for its own
  // part and for each child's report of its subtree, then sends its
  // subtree's report to its parent (report_to_parent); only the root tells
  // on_run_done, with the whole island's device time and launches. The
  // island's scheduler must be told the same fanout
  // (IslandSchedulerOptions::report_fanout). The cluster delivers each
  // report to the parent's ChildReported.
  int report_fanout = 0;
  std::function<void(HostId parent, const SubtreeReport& report)> report_to_parent;
  // Makes each device's launch queue; empty: a DeviceStream (a thread per
  // device, running kernels). A simulator passes queues on its virtual clock.
  std::function<std::unique_ptr<LaunchQueue>(const DeviceInfo& device)> make_queue;
  // With no make_queue: null, a thread per device; else each device's
  // stream is a fiber of this pool (DeviceStream), which outlives the host.
  FiberPool* device_pool = nullptr;
};

// Thread-safe.
class HostExecutor final : public HostService {
 public:
  // Makes the host's devices (a kind not registered here, or one that
  // cannot make a device, is an error naming the device) and starts their
  // streams.
  static absl::StatusOr<std::unique_ptr<HostExecutor>> Create(HostExecutorOptions options);
  ~HostExecutor() override;

  HostId id() const override { return options_.host.id; }

  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override;
  void UnregisterProgram(ProgramId program) override;
  void EnqueueRun(const RunRequest& run) override;
  // Prepares every run, then hands each device all its launches at once.
  void EnqueueRuns(const std::vector<RunRequest>& runs) override;
  absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                        ir::Literal value) override;
  Future<ir::Literal> FetchShard(ArrayId array, int shard) override;
  Future<Unit> AwaitShard(ArrayId array, int shard) override;
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override;
  void ReleaseOwner(ClientId owner) override;
  void SetMemoryQuota(ClientId owner, int64_t bytes) override;
  void DeliverPiece(ShardPieceMessage piece) override;
  // The file work runs on the host's checkpoint thread (CheckpointIo), never
  // on a device's or the caller's.
  Future<std::vector<SavedPiece>> SaveShards(const std::string& folder,
                                             std::vector<SavePieceRequest> pieces) override;
  absl::Status RestoreShards(const std::string& folder, ClientId owner,
                             std::vector<RestoreShardRequest> shards) override;
  // Counters only: the per-client view below walks every shard of the
  // store under its lock, so it is computed only when asked for.
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override;
  // Per local device, every client's memory and arrays on it (for the
  // coordinator's metrics, DeviceCounters::clients).
  std::vector<std::vector<ClientUsage>> ClientUsageByDevice();

  // A child's report of its subtree's part of a run (report_fanout > 0).
  // Ignored unless `report.child` is a child of this host in the run's
  // program's tree (the program registered here) and has not reported the
  // run yet, and unless limits::kMaxPendingReports runs already wait here for the
  // rest of their reports. A program's unregistration drops its runs'.
  void ChildReported(const SubtreeReport& report);
  // Runs whose report waits here for the rest of its subtree.
  size_t pending_reports() const;

  // Host `host` (another process) is gone: every posted receive still
  // waiting for a piece from it fails with `status`, and so does every
  // later one (distributed cluster). A run waiting here for the report of
  // `host`'s subtree counts it as in.
  void PeerLost(HostId host, const absl::Status& status);

  ObjectStore& store() { return store_; }
  LaunchQueue& stream(int local) { return *streams_[local]; }
  int num_devices() const { return static_cast<int>(streams_.size()); }

  // Fails waiting allocations, then drains and stops the device streams.
  void Shutdown();

  // Reclaims what nothing else will: fails memory waits that stalled,
  // drops early pieces past their time to live.
  // `now` is real time (absl::Now() in production).
  void Housekeep(absl::Time now);
  int64_t early_piece_bytes() const;

 private:
  HostExecutor(HostExecutorOptions options,
               std::vector<std::unique_ptr<backend::Device>> devices);

  struct SlotKey {
    RunId run;
    int node;
    int shard;
    friend bool operator==(const SlotKey&, const SlotKey&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const SlotKey& k) {
      return H::combine(std::move(h), k.run, k.node, k.shard);
    }
  };
  // A posted receive: a destination shard waiting for its pieces.
  struct Slot {
    BufferRef buffer;
    std::shared_ptr<const ProgramPlan> plan;
    int remaining = 0;
    absl::Status status;
    std::vector<bool> done;  // per piece: arrived or failed
  };

  // Where a piece's bytes come from: a box of a source shard on a device
  // (`buffer`), or of host memory (`data`, owned by `keep_alive`: the
  // compact box a message carried, or a shard of another host of this
  // process whose memory is the host's).
  struct PieceSource {
    BufferRef buffer;
    std::shared_ptr<const void> keep_alive;
    const std::byte* data = nullptr;
    std::vector<int64_t> dims;
    std::vector<int64_t> offset;
  };

  // Copies a piece into its slot once the slot's memory is granted.
  void FillSlot(const SlotKey& key, int piece_index, const BufferRef& dst,
                const ReshardPiece& piece,
                PieceSource source, absl::Status status);
  // Counts piece `piece_index` of the slot once (later reports of the same
  // piece are ignored). With `buffer`, only if the slot's buffer is it.
  void PieceDone(const SlotKey& key, int piece_index, const absl::Status& status,
                 const DeviceBuffer* buffer = nullptr);
  struct Registered;
  // Checks each call node with work here is for this host's kind of device,
  // compiles it into reg.executables, and refuses one that could never fit a
  // device's memory.
  absl::Status CompileNodes(const ProgramPlan& plan, Registered& reg);
  // Prepares `run`, appending its launches to launches[local device].
  // Returns its program, or null if the run was dropped (unregistered, or
  // after shutdown).
  std::shared_ptr<const Registered> PrepareRun(const RunRequest& run,
                                               std::vector<std::vector<Launch>>& launches);
  // Prepares `run` and arranges for on_run_done to hear when its launches
  // (those PrepareRun appended) are done.
  void PrepareAndTrack(const RunRequest& run, std::vector<std::vector<Launch>>& launches);
  void Dispatch(std::vector<std::vector<Launch>>& launches);
  using RunValues = std::vector<std::vector<BufferRef>>;
  void EnqueueReshard(const RunRequest& run, const Registered& reg, int node_index,
                      RunValues& values);
  // Prepares the node's launch on each local device of its mesh and appends
  // it to launches[local device]; the caller hands each device its batch.
  void EnqueueCall(const RunRequest& run, const std::shared_ptr<const Registered>& reg,
                   int node_index, RunValues& values, std::vector<std::vector<Launch>>& launches,
                   const std::shared_ptr<const std::atomic<bool>>& cancel);

  const HostExecutorOptions options_;
  ObjectStore store_;
  std::vector<std::unique_ptr<LaunchQueue>> streams_;
  // Each client's cancellation flag, set by ReleaseOwner.
  Cancellations cancellations_;

  mutable Mutex mu_;
  // A registered plan with, per value, which of its shards this host holds
  // (computed once, so that preparing a run costs this host's shards, not
  // the whole mesh's).
  struct Registered {
    std::shared_ptr<const ProgramPlan> plan;
    // By node index: the executables of the call nodes with work here,
    // compiled for this host's devices (null elsewhere). A launch keeps its
    // Registered alive, and with it its plan and executable.
    std::vector<std::shared_ptr<const backend::Executable>> executables;
    // A run's values[v][i] is the buffer of shard local[v][i] of value v.
    // local[v]: the positions of value v's shards on this host, ascending.
    std::vector<std::vector<int>> local;
    // The nodes with work here, ascending: calls with a shard on this host,
    // reshards with a destination or a piece's source here. A run walks
    // only these, so a host of a pipeline's stage does not walk every
    // other stage's nodes at every step.
    std::vector<int> nodes;
    // This host's place in the program's report tree (report_fanout > 0).
    ReportTreeNode tree;
    // It has a parent or children to gather with (the program has other
    // hosts on this island).
    bool in_tree() const { return tree.parent.valid() || !tree.children.empty(); }
  };
  // A run's report being gathered here: which of this host's own part
  // (bit 0) and its children (bit 1 + i) are in, and their sums.
  struct Gathering {
    std::shared_ptr<const Registered> program;
    uint64_t in = 0;
    int64_t device_us = 0;
    int launches = 0;
    bool complete() const {
      return in == (uint64_t{1} << (1 + program->tree.children.size())) - 1;
    }
  };
  // Counts `part` (0: this host's own, 1 + i: child i) of `run` in; once
  // every part is, reports the subtree up, outside the lock.
  void Gather(const std::shared_ptr<const Registered>& program, RunId run, int part,
              int64_t device_us, int launches);
  // Sends a finished subtree's report to the parent, or from the root to
  // on_run_done. Outside every lock.
  void ReportUp(const Registered& program, const SubtreeReport& report);
  // Taken before mu_ where both are held.
  mutable Mutex report_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::flat_hash_map<RunId, Gathering> gathering_ ABSL_GUARDED_BY(report_mu_);
  // Where shard `shard` of value v is in local[v]; -1 if not on this host.
  static int LocalIndex(const Registered& r, int v, int shard);
  absl::flat_hash_map<ProgramId, std::shared_ptr<const Registered>> programs_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SlotKey, Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Pieces that arrived before their run was enqueued here, with when the
  // first came; their bytes and count in all.
  struct Early {
    std::vector<ShardPieceMessage> pieces;
    absl::Time arrived;
  };
  absl::flat_hash_map<SlotKey, Early> early_ ABSL_GUARDED_BY(mu_);
  int64_t early_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t early_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Slots whose early pieces were dropped, and why: the receive fails at
  // once when posted. Oldest forgotten first beyond kMaxDropped.
  static constexpr size_t kMaxDropped = 4096;
  absl::flat_hash_map<SlotKey, absl::Status> dropped_ ABSL_GUARDED_BY(mu_);
  std::deque<SlotKey> dropped_order_ ABSL_GUARDED_BY(mu_);
  // Drops the early pieces of `key` (erasing the entry), remembering why.
  void DropEarlyLocked(const SlotKey& key, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::thread housekeeper_;
  Notification stop_housekeeping_;
  // Shared with the callbacks that post to it, which may run after
  // Shutdown (it then refuses their work).
  const std::shared_ptr<CheckpointIo> checkpoint_io_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<HostId, absl::Status> lost_peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_HOST_EXECUTOR_H_
