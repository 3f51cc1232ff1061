// RemoteHost: a worker as the coordinator sees it — a HostService whose
// calls travel on the worker's Join stream, with the worker's pending
// replies and liveness. Internal to the coordinator (coordinator_server.cc);
// the island schedulers call it like any host.
#ifndef CAUSEWAY_CLUSTER_REMOTE_HOST_H_
#define CAUSEWAY_CLUSTER_REMOTE_HOST_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "causeway/base/check.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "causeway/transport/grpc/wire_codec.h"
#include "causeway/transport/services.h"

namespace causeway {

using RemoteReplyFn = std::function<void(const cluster::Reply&)>;

inline cluster::Reply ErrorReply(const absl::Status& status) {
  cluster::Reply r;
  wire::EncodeStatus(status, r.mutable_status());
  return r;
}

// A worker as the coordinator sees it: a HostService whose calls travel on
// the worker's Join stream. Kept after the worker is lost (calls then fail
// at once with the loss), so a host id never dangles. Thread-safe.
class RemoteHost final : public HostService {
 public:
  RemoteHost(HostId id, IslandId island, std::string address, std::vector<DeviceId> devices,
             grpc::ServerContext* context,
             grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream)
      : id_(id), island_(island), address_(std::move(address)), devices_(std::move(devices)),
        context_(context),
        writer_([stream](const cluster::ToWorkerBatch& b) { return stream->Write(b); },
                grpc_transport::WriterLimit{kMaxBacklogBytes, absl::ZeroDuration()}) {
    MutexLock lock(&mu_);
    last_seen_ = absl::Now();
  }

  HostId id() const override { return id_; }
  IslandId island() const { return island_; }
  const std::string& address() const { return address_; }
  const std::vector<DeviceId>& devices() const { return devices_; }
  std::string Name() const { return absl::StrCat(id_.ToString(), " (", address_, ")"); }

  void Send(cluster::ToWorker message) { writer_.Post(std::move(message)); }
  // Bytes queued for the worker past which it is deemed not to read.
  static constexpr size_t kMaxBacklogBytes = size_t{1} << 30;
  // More than kMaxBacklogBytes queued for the worker: its writer gave up,
  // and the coordinator's monitor drops the host.
  bool overflowed() const { return writer_.overflowed(); }
  // What the coordinator sent the worker, and holds for it.
  grpc_transport::WriterStats sent() const { return writer_.stats(); }
  // What it read from the worker (Touch counts each batch).
  std::pair<int64_t, int64_t> received() const {
    MutexLock lock(&mu_);
    return {received_bytes_, received_messages_};
  }
  // Waits up to `timeout` for at most `bytes` to be queued for the worker.
  bool AwaitBacklogBelow(size_t bytes, absl::Duration timeout) {
    return writer_.AwaitBelow(bytes, timeout);
  }

  // Sends `call`. `on_reply`, if set, runs once: with the worker's reply (on
  // the thread reading the worker's stream), or with UNAVAILABLE when the
  // host is lost (on the thread that notices).
  void Forward(cluster::HostCall call, RemoteReplyFn on_reply) {
    cluster::ToWorker m;
    absl::Status lost;
    {
      MutexLock lock(&mu_);
      if (lost_.ok()) {
        if (on_reply) {
          const uint64_t id = next_id_++;
          pending_[id] = std::move(on_reply);
          m.set_id(id);
        }
        call.set_host(id_.value());
        *m.mutable_call() = std::move(call);
        writer_.Post(std::move(m));
        return;
      }
      lost = lost_;
    }
    if (on_reply) on_reply(ErrorReply(lost));
  }

  // A reply from the worker; the parts of a chunked one are joined first.
  void OnReply(cluster::Reply reply) {
    RemoteReplyFn fn;
    {
      MutexLock lock(&mu_);
      auto it = pending_.find(reply.id());
      if (it == pending_.end()) return;
      auto part = partial_.find(reply.id());
      if (reply.partial() || part != partial_.end()) {
        if (part == partial_.end()) {
          partial_.emplace(reply.id(), std::move(reply));
          return;
        }
        part->second.mutable_literal()->mutable_data()->append(reply.literal().data());
        if (reply.partial()) return;
        reply = std::move(part->second);
        reply.set_partial(false);
        partial_.erase(part);
      }
      fn = std::move(it->second);
      pending_.erase(it);
    }
    fn(reply);
  }

  // Marks the host lost; its pending calls fail with `status`.
  void Lose(const absl::Status& status) {
    absl::flat_hash_map<uint64_t, RemoteReplyFn> pending;
    {
      MutexLock lock(&mu_);
      if (!lost_.ok()) return;
      lost_ = status;
      pending.swap(pending_);
      partial_.clear();
    }
    const cluster::Reply reply = ErrorReply(status);
    for (auto& [id, fn] : pending) fn(reply);
  }
  bool lost() const {
    MutexLock lock(&mu_);
    return !lost_.ok();
  }
  absl::Status lost_status() const {
    MutexLock lock(&mu_);
    return lost_;
  }

  // A batch of `bytes` and `messages` came from the worker: it is alive,
  // and the transport totals count it.
  void Touch(int64_t bytes = 0, int64_t messages = 0) {
    MutexLock lock(&mu_);
    last_seen_ = absl::Now();
    received_bytes_ += bytes;
    received_messages_ += messages;
  }
  absl::Time last_seen() const {
    MutexLock lock(&mu_);
    return last_seen_;
  }
  // Ends the worker's stream (its handler then reports the loss with `why`).
  void Cancel(const std::string& why) {
    {
      MutexLock lock(&mu_);
      if (cancel_reason_.empty()) cancel_reason_ = why;
    }
    context_->TryCancel();
  }
  std::string cancel_reason() const {
    MutexLock lock(&mu_);
    return cancel_reason_;
  }
  // Called by the Join handler before it returns (the stream dies with it).
  void CloseWriter() { writer_.Close(); }

  // HostService, for the island schedulers (EnqueueRun[s]) and for any
  // other in-process caller.
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    cluster::HostCall call;
    wire::EncodePlan(*plan, call.mutable_register_program());
    return Wait(Call(std::move(call))).status();
  }
  void UnregisterProgram(ProgramId program) override {
    cluster::HostCall call;
    call.set_unregister_program(program.value());
    Forward(std::move(call), nullptr);
  }
  void EnqueueRun(const RunRequest& run) override { EnqueueRuns({run}); }
  void EnqueueRuns(const std::vector<RunRequest>& runs) override {
    cluster::HostCall call;
    for (const RunRequest& r : runs) wire::EncodeRun(r, call.mutable_enqueue_runs()->add_runs());
    Forward(std::move(call), nullptr);
  }
  absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                        ir::Literal value) override {
    cluster::HostCall call;
    cluster::PutShard& p = *call.mutable_put_shard();
    p.set_array(array.value());
    p.set_shard(shard);
    p.set_local_device(local_device);
    p.set_owner(owner.value());
    wire::EncodeLiteral(value, p.mutable_value());
    return Wait(Call(std::move(call))).status();
  }
  Future<ir::Literal> FetchShard(ArrayId array, int shard) override {
    cluster::HostCall call;
    call.mutable_fetch_shard()->set_array(array.value());
    call.mutable_fetch_shard()->set_shard(shard);
    return Call(std::move(call)).Then(
        [](const absl::StatusOr<cluster::Reply>& r) -> absl::StatusOr<ir::Literal> {
          if (!r.ok()) return r.status();
          return wire::DecodeLiteral(r->literal());
        });
  }
  Future<std::vector<SavedPiece>> SaveShards(const std::string& folder,
                                             std::vector<SavePieceRequest> pieces) override {
    cluster::HostCall call;
    grpc_transport::EncodeSaveShards(folder, pieces, call.mutable_save_shards());
    return Call(std::move(call))
        .Then([n = pieces.size()](const absl::StatusOr<cluster::Reply>& r) {
          return grpc_transport::ReplyToSavedPieces(r, n);
        });
  }
  absl::Status RestoreShards(const std::string& folder, ClientId owner,
                             std::vector<RestoreShardRequest> shards) override {
    cluster::HostCall call;
    grpc_transport::EncodeRestoreShards(folder, owner, shards, call.mutable_restore_shards());
    return Wait(Call(std::move(call))).status();
  }
  Future<Unit> AwaitShard(ArrayId array, int shard) override {
    cluster::HostCall call;
    call.mutable_await_shard()->set_array(array.value());
    call.mutable_await_shard()->set_shard(shard);
    return Call(std::move(call)).Then(grpc_transport::ReplyToUnit);
  }
  Future<Unit> AwaitShards(ArrayId array, const std::vector<int>& shards) override {
    cluster::HostCall call;
    call.mutable_await_shards()->set_array(array.value());
    for (int s : shards) call.mutable_await_shards()->add_shards(s);
    return Call(std::move(call)).Then(grpc_transport::ReplyToUnit);
  }
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override {
    cluster::HostCall call;
    for (ArrayId a : arrays) call.mutable_release_arrays()->add_arrays(a.value());
    Forward(std::move(call), nullptr);
  }
  void ReleaseOwner(ClientId owner) override {
    cluster::HostCall call;
    call.set_release_owner(owner.value());
    Forward(std::move(call), nullptr);
  }
  void SetMemoryQuota(ClientId owner, int64_t bytes) override {
    cluster::HostCall call;
    call.mutable_set_quota()->set_owner(owner.value());
    call.mutable_set_quota()->set_bytes(bytes);
    Forward(std::move(call), nullptr);
  }
  void DeliverPiece(ShardPieceMessage) override {
    CW_CHECK(false) << "pieces move between workers, never through the coordinator";
  }
  // Starts, stops or collects the host's trace (cluster::TraceCall).
  Future<cluster::Reply> Trace(const cluster::TraceCall& trace) {
    cluster::HostCall call;
    *call.mutable_trace() = trace;
    return Call(std::move(call));
  }
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override {
    cluster::HostCall call;
    call.set_get_counters(reset);
    call.set_by_client(true);  // the coordinator's own view: every client's usage
    return Call(std::move(call)).Then(
        [](const absl::StatusOr<cluster::Reply>& r)
            -> absl::StatusOr<std::vector<DeviceCounters>> {
          if (!r.ok()) return r.status();
          return grpc_transport::DecodeCounters(r->counters());
        });
  }

 private:
  // The reply as a future: failed with the reply's status if not OK.
  Future<cluster::Reply> Call(cluster::HostCall call) {
    Promise<cluster::Reply> promise;
    Forward(std::move(call), [promise](const cluster::Reply& r) {
      const absl::Status status = wire::DecodeStatus(r.status());
      if (status.ok()) {
        promise.Set(r);
      } else {
        promise.Set(status);
      }
    });
    return promise.future();
  }
  absl::StatusOr<cluster::Reply> Wait(const Future<cluster::Reply>& f) {
    const absl::StatusOr<cluster::Reply>* r = f.AwaitWithTimeout(absl::Seconds(60));
    if (r == nullptr) {
      return absl::DeadlineExceededError(absl::StrCat(Name(), " did not answer within 60 s"));
    }
    return *r;
  }

  const HostId id_;
  const IslandId island_;
  const std::string address_;
  const std::vector<DeviceId> devices_;
  grpc::ServerContext* const context_;
  grpc_transport::BatchWriter<cluster::ToWorkerBatch, cluster::ToWorker> writer_;

  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, RemoteReplyFn> pending_ ABSL_GUARDED_BY(mu_);
  // Chunked replies still arriving.
  absl::flat_hash_map<uint64_t, cluster::Reply> partial_ ABSL_GUARDED_BY(mu_);
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  absl::Time last_seen_ ABSL_GUARDED_BY(mu_);
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  int64_t received_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t received_messages_ ABSL_GUARDED_BY(mu_) = 0;
};
}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_REMOTE_HOST_H_
