// The coordination layer's contracts: what hosts, island schedulers and the
// resource manager offer each other and clients. What they exchange lives
// beside: the program plan (causeway/plan/plan.h), configuration
// (transport/config.h) and statistics (transport/stats.h). Every component talks to
// the others only through these, so the in-process transport (direct calls)
// and a network transport (stubs behind the same interfaces) are
// interchangeable.
//
// Ordering contract every transport must keep: calls from one sender to one
// receiver are delivered in the order they were made (a release after a run
// that uses the array is processed after the run was enqueued).
#ifndef CAUSEWAY_TRANSPORT_SERVICES_H_
#define CAUSEWAY_TRANSPORT_SERVICES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "causeway/async/future.h"
#include "causeway/base/ids.h"
#include "causeway/ir/literal.h"
#include "causeway/plan/plan.h"
#include "causeway/topology/mesh.h"
#include "causeway/topology/topology.h"
#include "causeway/transport/config.h"
#include "causeway/transport/stats.h"

namespace causeway {

class TraceRecorder;

// A piece that stays in its process: where its box lies in the source
// shard's memory, instead of a copy of it. The receiver copies the box
// straight into its destination (one copy, not two). Only a transport that
// says it carries them (DataTransport::CarriesReferences) is given one; it
// never crosses a process, so no peer can forge one.
struct PieceReference {
  // Owns `data` (the source shard's buffer, immutable once ready).
  std::shared_ptr<const void> keep_alive;
  const std::byte* data = nullptr;
  std::vector<int64_t> dims;    // the source shard's
  std::vector<int64_t> offset;  // the box's first element in it
  int64_t bytes = 0;            // the box's
};

// A piece of a reshard travelling between hosts.
struct ShardPieceMessage {
  RunId run;
  int node = 0;
  int dst_shard = 0;
  int piece = 0;
  absl::Status status;           // a failed source poisons the destination
  // The box, row-major. A string so that a network transport can move its
  // payload in and out of protocol buffers without copying.
  std::string bytes;
  // Instead of `bytes`, within a process (empty `bytes`).
  std::shared_ptr<const PieceReference> reference;

  // The box's size, however it travels.
  int64_t payload_bytes() const {
    return reference != nullptr ? reference->bytes : static_cast<int64_t>(bytes.size());
  }
};

// Checkpoints (docs/CHECKPOINT.md): each host writes the pieces it holds
// and reads the pieces its new shards need itself, straight from and into
// its devices, in a folder of a filesystem it shares with the client.

// A shard held here, to be written as one piece of a checkpoint.
struct SavePieceRequest {
  ArrayId array;
  int shard = 0;
  std::string file;                   // its name in the folder
  std::vector<int64_t> global_shape;  // the array's
  std::vector<int64_t> offset;        // the shard's first element in it
};
// What a host wrote for one piece.
struct SavedPiece {
  int64_t bytes = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the file
};
// A shard to make here from a committed checkpoint: the box
// [offset, offset + extent) of its array `name`.
struct RestoreShardRequest {
  std::string name;
  ArrayId array;
  int shard = 0;
  int local_device = 0;
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> offset;
  std::vector<int64_t> extent;
};

// A host: its executor and object store. Thread-safe.
class HostService {
 public:
  virtual ~HostService() = default;
  virtual HostId id() const = 0;

  virtual absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) = 0;
  virtual void UnregisterProgram(ProgramId program) = 0;
  // Prepares every launch of this host's part of `run` at once. Never waits
  // on data or memory. Runs from one scheduler arrive in its order.
  virtual void EnqueueRun(const RunRequest& run) = 0;
  // The same for several runs, in order, as one message.
  virtual void EnqueueRuns(const std::vector<RunRequest>& runs) {
    for (const RunRequest& r : runs) EnqueueRun(r);
  }

  // Stores `value` as shard `shard` (on local device `local_device`) of
  // `array`, owned by `owner`. Returns at once; the shard is ready once
  // memory is granted and the bytes copied.
  virtual absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                                ir::Literal value) = 0;
  // The shard's bytes once ready, or its error.
  virtual Future<ir::Literal> FetchShard(ArrayId array, int shard) = 0;
  // Ready (or failed) when the shard is.
  virtual Future<Unit> AwaitShard(ArrayId array, int shard) = 0;
  // Ready when every one of `shards` (of `array`, all held here) is, or
  // failed with the first error. Remote hosts answer it as one message;
  // this default awaits each shard.
  virtual Future<Unit> AwaitShards(ArrayId array, const std::vector<int>& shards) {
    std::vector<Future<Unit>> each;
    each.reserve(shards.size());
    for (int s : shards) each.push_back(AwaitShard(array, s));
    return WhenAll(each);
  }

  virtual void ReleaseArrays(absl::Span<const ArrayId> arrays) = 0;
  // Drops every array of `owner` here, and its memory quota.
  virtual void ReleaseOwner(ClientId owner) = 0;
  // Limits `owner` to `bytes` on each of this host's devices (0: none).
  virtual void SetMemoryQuota(ClientId owner, int64_t bytes) = 0;

  // Writes each piece, once its shard is ready, as a new file of `folder`
  // (the partial folder of a save, checkpoint::BeginSave) and flushes it;
  // the shards are held until written, whatever is released meanwhile.
  // Ready with each piece's record, in order, once every one is written,
  // or failed with the first error (naming the array, shard or file).
  // UNIMPLEMENTED where the host cannot write checkpoints.
  virtual Future<std::vector<SavedPiece>> SaveShards(const std::string& folder,
                                                     std::vector<SavePieceRequest> pieces) {
    (void)folder;
    (void)pieces;
    return Future<std::vector<SavedPiece>>::Ready(
        absl::UnimplementedError("this host does not write checkpoints"));
  }
  // Makes each shard, owned by `owner`, from the committed checkpoint in
  // `folder`, as PutShard makes one from a value: returns at once, refusing
  // only what PutShard refuses; each shard is ready once its box is read
  // and copied in, or failed with why (a missing, corrupt or truncated
  // file, named; an array the checkpoint lacks or of another dtype).
  virtual absl::Status RestoreShards(const std::string& folder, ClientId owner,
                                     std::vector<RestoreShardRequest> shards) {
    (void)folder;
    (void)owner;
    (void)shards;
    return absl::UnimplementedError("this host does not read checkpoints");
  }

  // Data plane: a piece of a reshard from another host.
  virtual void DeliverPiece(ShardPieceMessage piece) = 0;

  // Every device's counters, in local order; then, if `reset`, zeroes the
  // launch and busy-time counters (memory is never reset).
  virtual Future<std::vector<DeviceCounters>> GetCounters(bool reset) = 0;
};

// An island's gang scheduler. Thread-safe.
class SchedulerService {
 public:
  virtual ~SchedulerService() = default;
  virtual absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) = 0;
  virtual void UnregisterProgram(ProgramId program) = 0;
  // Appends every gang of the run's part on this island to the island's
  // order and forwards the run to each host of the island it touches, at
  // once or when the island's policy lets it go.
  virtual absl::Status SubmitRun(RunRequest run) = 0;
  // Told, for each accepted run (by its index in the batch), once it has
  // been forwarded to its hosts (OK) or dropped before it was (why). May be
  // called before SubmitRuns returns and from another thread; must not
  // block. Reads and releases of a run's outputs wait for it.
  using RunsForwarded = std::function<void(size_t index, const absl::Status& status)>;
  // The same for several runs, in order, forwarded as one message per host.
  // Runs that fail (unknown program) are skipped; their statuses are
  // returned in order.
  virtual std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs,
                                               RunsForwarded forwarded = nullptr) {
    std::vector<absl::Status> out;
    for (size_t i = 0; i < runs.size(); ++i) {
      out.push_back(SubmitRun(std::move(runs[i])));
      if (out.back().ok() && forwarded) forwarded(i, absl::OkStatus());
    }
    return out;
  }
};

struct MeshRequest {
  std::vector<MeshAxis> axes;
  // If valid, the island to allocate on; otherwise the first that fits.
  IslandId island;
  // If non-empty, exactly these devices (row-major over axes).
  std::vector<DeviceId> devices;
};

// The resource manager. Thread-safe.
class ResourceService {
 public:
  virtual ~ResourceService() = default;
  // UNAVAILABLE if the cluster cannot be reached.
  virtual absl::StatusOr<ClientId> RegisterClient() = 0;
  virtual void UnregisterClient(ClientId client) = 0;
  virtual absl::StatusOr<Mesh> AllocateMesh(ClientId client, const MeshRequest& request) = 0;
  virtual Topology GetTopology() const = 0;
};

// What a client connects to: an embedded LocalCluster, or (later) a remote
// coordinator.
class ClusterConnection {
 public:
  virtual ~ClusterConnection() = default;
  virtual ResourceService* resources() = 0;
  // nullptr if unknown.
  virtual SchedulerService* scheduler(IslandId island) = 0;
  virtual HostService* host(HostId host) = 0;

  // Submits `run` to the scheduler of each of `islands` (ascending ids).
  // Runs that span islands are submitted atomically with respect to each
  // other, so every island sees them in one global order: with that, runs
  // whose data flows between islands in opposite directions cannot wait on
  // each other in a cycle.
  // `forwarded` (may be empty) is told once, when every island forwarded the
  // run to its hosts, or why it was dropped before.
  virtual absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                 std::function<void(const absl::Status&)> forwarded) = 0;
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands) {
    return SubmitRun(run, islands, nullptr);
  }

  // Releases `arrays` of `client` on `hosts`, after every run the client
  // submitted before (one of them may read them).
  virtual void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                             std::vector<ArrayId> arrays) {
    for (HostId h : hosts) {
      if (HostService* s = host(h)) s->ReleaseArrays(arrays);
    }
  }
  // Sets the client's share of every island. UNIMPLEMENTED where the
  // cluster does not schedule by shares.
  virtual absl::Status SetClientShare(ClientId client, const ClientShare& share) {
    (void)client;
    if (share == ClientShare{}) return absl::OkStatus();
    return absl::UnimplementedError("this cluster does not schedule clients by weight");
  }
  // Forgets the client's runs not yet forwarded; afterwards none of them
  // reaches a host.
  virtual void DropClient(ClientId client) { (void)client; }
  // Where clients record their track (runs submitted) while the cluster is
  // being traced; nullptr when it is not.
  virtual TraceRecorder* client_trace() { return nullptr; }
};

// Moves reshard pieces between hosts. Thread-safe.
class DataTransport {
 public:
  virtual ~DataTransport() = default;
  virtual void SendPiece(HostId from, HostId to, ShardPieceMessage piece) = 0;
  // True if pieces may travel as a PieceReference rather than bytes: every
  // host it reaches is in this process.
  virtual bool CarriesReferences() const { return false; }
};

}  // namespace causeway

#endif  // CAUSEWAY_TRANSPORT_SERVICES_H_
