// HostExecutor: one per host. Receives the host's part of every run and
// prepares all of it at once — output buffers allocated (or queued for
// memory), input readiness wired to local buffers or to posted receive
// slots, launches queued on the device streams in the scheduler's order —
// before any predecessor has run. Owns the host's object store and device
// streams and is the endpoint of reshard transfers.
#ifndef CAUSEWAY_WORKER_HOST_EXECUTOR_H_
#define CAUSEWAY_WORKER_HOST_EXECUTOR_H_

#include <atomic>
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
#include "causeway/worker/device_stream.h"
#include "causeway/worker/trace.h"

namespace causeway {

struct HostExecutorOptions {
  HostInfo host;
  std::vector<DeviceInfo> devices;  // in local order
  int64_t device_memory_bytes = int64_t{1} << 30;
  Clock* clock = Clock::Real();
  TraceRecorder* trace = nullptr;      // required
  CollectiveHub* collectives = nullptr;  // required
  DataTransport* transport = nullptr;  // required
  FaultInjector fault_injector;
};

// Thread-safe.
class HostExecutor final : public HostService {
 public:
  explicit HostExecutor(HostExecutorOptions options);
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
  void DeliverPiece(ShardPieceMessage piece) override;
  Future<Unit> DriveSpmd(const SpmdLoop& loop) override;
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override;

  // Host `host` (another process) is gone: every posted receive still
  // waiting for a piece from it fails with `status`, and so does every
  // later one (distributed cluster).
  void PeerLost(HostId host, const absl::Status& status);

  ObjectStore& store() { return store_; }
  DeviceStream& stream(int local) { return *streams_[local]; }
  int num_devices() const { return static_cast<int>(streams_.size()); }

  // Fails waiting allocations, then drains and stops the device streams.
  void Shutdown();

 private:
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

  // Where a piece's bytes come from: a box of a local source shard, or the
  // compact box carried by a message. `keep_alive` owns `data`.
  struct PieceSource {
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
  // piece are ignored).
  void PieceDone(const SlotKey& key, int piece_index, const absl::Status& status);
  // Prepares `run`, appending its launches to launches[local device].
  void PrepareRun(const RunRequest& run, std::vector<std::vector<Launch>>& launches);
  void Dispatch(std::vector<std::vector<Launch>>& launches);
  void EnqueueReshard(const RunRequest& run, const std::shared_ptr<const ProgramPlan>& plan,
                      int node_index, std::vector<std::vector<BufferRef>>& values);
  // Prepares the node's launch on each local device of its mesh and appends
  // it to launches[local device]; the caller hands each device its batch.
  void EnqueueCall(const RunRequest& run, const std::shared_ptr<const ProgramPlan>& plan,
                   int node_index, std::vector<std::vector<BufferRef>>& values,
                   std::vector<std::vector<Launch>>& launches);

  const HostExecutorOptions options_;
  ObjectStore store_;
  std::vector<std::unique_ptr<DeviceStream>> streams_;

  Mutex mu_;
  absl::flat_hash_map<ProgramId, std::shared_ptr<const ProgramPlan>> programs_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SlotKey, Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Pieces that arrived before their run was enqueued here.
  absl::flat_hash_map<SlotKey, std::vector<ShardPieceMessage>> early_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Threads running SpmdLoops; joined by Shutdown(), which first tells
  // them to stop enqueuing.
  std::vector<std::thread> loops_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_loops_{false};
  absl::flat_hash_map<HostId, absl::Status> lost_peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_HOST_EXECUTOR_H_
