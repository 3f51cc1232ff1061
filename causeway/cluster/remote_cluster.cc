#include "causeway/cluster/remote_cluster.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/cluster_file.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway {

using grpc_transport::BatchWriter;

absl::StatusOr<std::string> ParseGrpcAddress(const std::string& url) {
  absl::string_view a = url;
  if (absl::StartsWith(a, "grpc://")) a.remove_prefix(7);
  const absl::StatusOr<std::pair<std::string, int>> split = grpc_transport::SplitHostPort(a);
  if (!split.ok() || split->first.empty()) {
    const bool v6 = !split.ok() && absl::StrContains(split.status().message(), "IPv6");
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not a cluster address (grpc://HOST:PORT",
                     v6 ? "; an IPv6 address goes in brackets: grpc://[::1]:PORT" : "", ")"));
  }
  return std::string(a);
}

class RemoteCluster::Impl {
 public:
  explicit Impl(const RemoteClusterOptions& options) : options_(options) {}
  ~Impl() { Close(); }

  absl::Status Connect();
  void Close();
  // Waits until `channel` is connected: fails at once when an attempt
  // fails, and says so once in the log when it takes long.
  absl::Status AwaitChannel(grpc::Channel& channel);

  // Queues `message`; its reply (or the connection's loss) settles the future.
  Future<cluster::Reply> Call(cluster::ClientMessage message) {
    Promise<cluster::Reply> promise;
    absl::Status broken = AwaitRoom();
    if (!broken.ok()) {
      promise.Set(broken);
      return promise.future();
    }
    {
      MutexLock lock(&mu_);
      broken = broken_;
      if (broken.ok()) {
        const uint64_t id = next_id_++;
        message.set_id(id);
        pending_[id] = promise;
        if (!writer_->Post(std::move(message))) {
          pending_.erase(id);
          // Given up for its backlog: end the stream, so every call waiting
          // on it fails now.
          if (writer_->overflowed()) context_.TryCancel();
          broken = writer_->overflowed()
                       ? absl::ResourceExhaustedError(absl::StrCat(
                             "more than ", kMaxOutboxBytes >> 20,
                             " MiB of this client's messages wait to be sent to the "
                             "coordinator; the connection is closed"))
                       : absl::UnavailableError("connection to the coordinator is closed");
        }
      }
    }
    if (!broken.ok()) promise.Set(broken);
    return promise.future();
  }
  absl::StatusOr<cluster::Reply> CallAndWait(cluster::ClientMessage message,
                                             absl::string_view what) {
    Future<cluster::Reply> f = Call(std::move(message));
    const absl::StatusOr<cluster::Reply>* r = f.AwaitWithTimeout(options_.timeout);
    if (r == nullptr) {
      return absl::DeadlineExceededError(absl::StrCat("the coordinator at ", address_,
                                                      " did not answer ", what, " within ",
                                                      absl::FormatDuration(options_.timeout)));
    }
    return *r;
  }
  void Send(cluster::ClientMessage message) {
    if (AwaitRoom().ok()) writer_->Post(std::move(message));
  }
  // Messages queued to the coordinator past which a call waits for room
  // (back-pressure on the caller), and past which the connection is given
  // up (a post that cannot wait).
  static constexpr size_t kOutboxBytes = size_t{256} << 20;
  static constexpr size_t kMaxOutboxBytes = size_t{1} << 30;
  // Waits, holding no lock, while the outbox is over kOutboxBytes: up to
  // the connection's timeout.
  absl::Status AwaitRoom() {
    if (writer_->AwaitBelow(kOutboxBytes, options_.timeout)) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(
        "the coordinator at ", address_, " took none of this client's last ",
        kOutboxBytes >> 20, " MiB of messages within ", absl::FormatDuration(options_.timeout)));
  }

  // Who to tell when the coordinator reports `run` forwarded (or dropped).
  // Registered before the run is sent: the report may overtake the reply.
  void ExpectForwarded(RunId run, std::function<void(const absl::Status&)> told) {
    MutexLock lock(&mu_);
    forwarded_[run] = std::move(told);
  }
  // The run was refused: no report will come.
  void ForgetForwarded(RunId run) {
    MutexLock lock(&mu_);
    forwarded_.erase(run);
  }

  Topology topology() const {
    MutexLock lock(&mu_);
    return topology_;
  }
  absl::Status status() const {
    MutexLock lock(&mu_);
    return broken_;
  }
  absl::Status WaitForTopology(const std::function<bool(const Topology&)>& done,
                               absl::Duration timeout) {
    MutexLock lock(&mu_);
    const bool met = mu_.AwaitWithTimeout(
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !broken_.ok() || done(topology_); },
        timeout);
    if (!broken_.ok()) return broken_;
    if (!met) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the cluster at ", address_, " did not reach the expected topology within ",
          absl::FormatDuration(timeout), " (it has ", topology_.num_devices(), " devices)"));
    }
    return absl::OkStatus();
  }

  ResourceService* resources();
  SchedulerService* scheduler(IslandId island);
  HostService* host(HostId host);

 private:
  class Resources;
  class Scheduler;
  class Host;

  void ReadLoop();

  const RemoteClusterOptions options_;
  std::string address_;
  std::unique_ptr<cluster::Coordinator::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<cluster::ClientBatch, cluster::ToClient>> stream_;
  std::unique_ptr<BatchWriter<cluster::ClientBatch, cluster::ClientMessage>> writer_;
  std::thread reader_;
  Notification reader_done_;
  std::unique_ptr<Resources> resources_;

  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Promise<cluster::Reply>> pending_ ABSL_GUARDED_BY(mu_);
  // Accepted runs not yet reported forwarded (bounded by the coordinator's
  // per-client queues); failed with the connection.
  absl::flat_hash_map<RunId, std::function<void(const absl::Status&)>> forwarded_
      ABSL_GUARDED_BY(mu_);
  Topology topology_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<IslandId, std::unique_ptr<Scheduler>> schedulers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<HostId, std::unique_ptr<Host>> hosts_ ABSL_GUARDED_BY(mu_);
};

namespace {

absl::Status ReplyStatus(const absl::StatusOr<cluster::Reply>& r) {
  return r.ok() ? absl::OkStatus() : r.status();
}

void EncodeShare(const ClientShare& share, cluster::ClientShare* out) {
  out->set_weight(share.weight);
  out->set_priority(share.priority);
  out->set_memory_quota_bytes(share.memory_quota_bytes);
}

}  // namespace

class RemoteCluster::Impl::Resources final : public ResourceService {
 public:
  explicit Resources(Impl* impl) : impl_(impl) {}
  absl::StatusOr<ClientId> RegisterClient() override {
    cluster::ClientMessage m;
    m.set_register_client(true);
    CW_ASSIGN_OR_RETURN(cluster::Reply r, impl_->CallAndWait(std::move(m), "RegisterClient"));
    return ClientId(r.client());
  }
  void UnregisterClient(ClientId client) override {
    cluster::ClientMessage m;
    m.set_unregister_client(client.value());
    impl_->Send(std::move(m));
  }
  absl::StatusOr<Mesh> AllocateMesh(ClientId client, const MeshRequest& request) override {
    cluster::ClientMessage m;
    m.set_client(client.value());
    wire::EncodeMeshRequest(request, m.mutable_allocate_mesh());
    CW_ASSIGN_OR_RETURN(cluster::Reply r, impl_->CallAndWait(std::move(m), "AllocateMesh"));
    return wire::DecodeMesh(r.mesh());
  }
  Topology GetTopology() const override { return impl_->topology(); }

 private:
  Impl* const impl_;
};

class RemoteCluster::Impl::Scheduler final : public SchedulerService {
 public:
  Scheduler(Impl* impl, IslandId island) : impl_(impl), island_(island) {}
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    cluster::ClientMessage m;
    m.mutable_scheduler()->set_island(island_.value());
    wire::EncodePlan(*plan, m.mutable_scheduler()->mutable_register_program());
    return ReplyStatus(impl_->CallAndWait(std::move(m), "RegisterProgram"));
  }
  void UnregisterProgram(ProgramId program) override {
    cluster::ClientMessage m;
    m.mutable_scheduler()->set_island(island_.value());
    m.mutable_scheduler()->set_unregister_program(program.value());
    impl_->Send(std::move(m));
  }
  absl::Status SubmitRun(RunRequest run) override {
    std::vector<RunRequest> runs;
    runs.push_back(std::move(run));
    return SubmitRuns(std::move(runs), nullptr)[0];
  }
  // The coordinator reports each accepted run once it forwarded it.
  std::vector<absl::Status> SubmitRuns(std::vector<RunRequest> runs,
                                       RunsForwarded forwarded) override {
    cluster::ClientMessage m;
    m.mutable_scheduler()->set_island(island_.value());
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunRequest& r = runs[i];
      wire::EncodeRun(r, m.mutable_scheduler()->mutable_submit_runs()->add_runs());
      if (forwarded) {
        impl_->ExpectForwarded(r.run, [forwarded, i](const absl::Status& s) { forwarded(i, s); });
      }
    }
    absl::StatusOr<cluster::Reply> r = impl_->CallAndWait(std::move(m), "SubmitRuns");
    std::vector<absl::Status> out(runs.size(), r.status());
    if (r.ok()) {
      for (size_t i = 0; i < runs.size(); ++i) {
        out[i] = static_cast<int>(i) < r->statuses().statuses_size()
                     ? wire::DecodeStatus(r->statuses().statuses(static_cast<int>(i)))
                     : absl::InternalError("the coordinator answered too few statuses");
      }
    }
    if (forwarded) {
      for (size_t i = 0; i < out.size(); ++i) {
        if (!out[i].ok()) impl_->ForgetForwarded(runs[i].run);
      }
    }
    return out;
  }

 private:
  Impl* const impl_;
  const IslandId island_;
};

class RemoteCluster::Impl::Host final : public HostService {
 public:
  Host(Impl* impl, HostId id) : impl_(impl), id_(id) {}
  HostId id() const override { return id_; }

  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan> plan) override {
    cluster::ClientMessage m = Message();
    wire::EncodePlan(*plan, m.mutable_host()->mutable_register_program());
    return ReplyStatus(impl_->CallAndWait(std::move(m), "RegisterProgram"));
  }
  void UnregisterProgram(ProgramId program) override {
    cluster::ClientMessage m = Message();
    m.mutable_host()->set_unregister_program(program.value());
    impl_->Send(std::move(m));
  }
  void EnqueueRun(const RunRequest& run) override { EnqueueRuns({run}); }
  void EnqueueRuns(const std::vector<RunRequest>& runs) override {
    cluster::ClientMessage m = Message();
    for (const RunRequest& r : runs) {
      wire::EncodeRun(r, m.mutable_host()->mutable_enqueue_runs()->add_runs());
    }
    impl_->Send(std::move(m));
  }
  absl::Status PutShard(ArrayId array, int shard, int local_device, ClientId owner,
                        ir::Literal value) override {
    cluster::ClientMessage m = Message();
    cluster::PutShard& p = *m.mutable_host()->mutable_put_shard();
    p.set_array(array.value());
    p.set_shard(shard);
    p.set_local_device(local_device);
    p.set_owner(owner.value());
    wire::EncodeLiteral(value, p.mutable_value());
    return ReplyStatus(impl_->CallAndWait(std::move(m), "PutShard"));
  }
  Future<ir::Literal> FetchShard(ArrayId array, int shard) override {
    cluster::ClientMessage m = Message();
    m.mutable_host()->mutable_fetch_shard()->set_array(array.value());
    m.mutable_host()->mutable_fetch_shard()->set_shard(shard);
    return impl_->Call(std::move(m))
        .Then([](const absl::StatusOr<cluster::Reply>& r) -> absl::StatusOr<ir::Literal> {
          if (!r.ok()) return r.status();
          return wire::DecodeLiteral(r->literal());
        });
  }
  Future<std::vector<SavedPiece>> SaveShards(const std::string& folder,
                                             std::vector<SavePieceRequest> pieces) override {
    cluster::ClientMessage m = Message();
    grpc_transport::EncodeSaveShards(folder, pieces, m.mutable_host()->mutable_save_shards());
    return impl_->Call(std::move(m))
        .Then([n = pieces.size()](const absl::StatusOr<cluster::Reply>& r) {
          return grpc_transport::ReplyToSavedPieces(r, n);
        });
  }
  absl::Status RestoreShards(const std::string& folder, ClientId owner,
                             std::vector<RestoreShardRequest> shards) override {
    cluster::ClientMessage m = Message();
    grpc_transport::EncodeRestoreShards(folder, owner, shards,
                                        m.mutable_host()->mutable_restore_shards());
    return ReplyStatus(impl_->CallAndWait(std::move(m), "RestoreShards"));
  }
  Future<Unit> AwaitShard(ArrayId array, int shard) override {
    cluster::ClientMessage m = Message();
    m.mutable_host()->mutable_await_shard()->set_array(array.value());
    m.mutable_host()->mutable_await_shard()->set_shard(shard);
    return impl_->Call(std::move(m)).Then(grpc_transport::ReplyToUnit);
  }
  Future<Unit> AwaitShards(ArrayId array, const std::vector<int>& shards) override {
    cluster::ClientMessage m = Message();
    cluster::ShardList* list = m.mutable_host()->mutable_await_shards();
    list->set_array(array.value());
    for (int s : shards) list->add_shards(s);
    return impl_->Call(std::move(m)).Then(grpc_transport::ReplyToUnit);
  }
  void ReleaseArrays(absl::Span<const ArrayId> arrays) override {
    cluster::ClientMessage m = Message();
    for (ArrayId a : arrays) m.mutable_host()->mutable_release_arrays()->add_arrays(a.value());
    impl_->Send(std::move(m));
  }
  void ReleaseOwner(ClientId owner) override {
    cluster::ClientMessage m = Message();
    m.mutable_host()->set_release_owner(owner.value());
    impl_->Send(std::move(m));
  }
  // Quotas are the coordinator's to set (RemoteCluster::SetClientShare).
  void SetMemoryQuota(ClientId, int64_t) override {}
  void DeliverPiece(ShardPieceMessage) override {
    CW_CHECK(false) << "pieces move between workers, never through a client";
  }
  Future<std::vector<DeviceCounters>> GetCounters(bool reset) override {
    cluster::ClientMessage m = Message();
    m.mutable_host()->set_get_counters(reset);
    return impl_->Call(std::move(m))
        .Then([](const absl::StatusOr<cluster::Reply>& r)
                  -> absl::StatusOr<std::vector<DeviceCounters>> {
          if (!r.ok()) return r.status();
          return grpc_transport::DecodeCounters(r->counters());
        });
  }

 private:
  cluster::ClientMessage Message() const {
    cluster::ClientMessage m;
    m.mutable_host()->set_host(id_.value());
    return m;
  }
  Impl* const impl_;
  const HostId id_;
};

// How long a connection may take before the client says it is waiting.
constexpr absl::Duration kSayWaitingAfter = absl::Seconds(2);

// Whether every address `address` ("HOST:PORT") resolves to refuses a TCP
// connection (or is unreachable): nothing serves there, and retrying will
// not change that soon. A server that accepts and then drops connections
// (out of descriptors, shedding) is not refused: it may serve in a moment.
bool RefusedEverywhere(const std::string& address) {
  absl::StatusOr<std::pair<std::string, int>> hp = grpc_transport::SplitHostPort(address);
  if (!hp.ok()) return false;
  std::string host = hp->first;
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(hp->second).c_str(), &hints, &found) != 0) {
    return false;  // gRPC's own resolver says why
  }
  bool refused = found != nullptr;
  for (addrinfo* a = found; a != nullptr && refused; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          a->ai_protocol);
    if (fd < 0) {
      refused = false;
      break;
    }
    int error = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        error = ETIMEDOUT;
        if (poll(&p, 1, 1000) == 1) {
          socklen_t len = sizeof(error);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        }
      }
    }
    close(fd);
    refused = error == ECONNREFUSED || error == ENETUNREACH || error == EHOSTUNREACH;
  }
  freeaddrinfo(found);
  return refused;
}

absl::Status RemoteCluster::Impl::AwaitChannel(grpc::Channel& channel) {
  const bool tls = !grpc_transport::TlsFromEnvironment(options_.tls).ca.empty();
  const char* const hint =
      tls ? " over TLS (is it serving TLS with a certificate that CA signed?)"
          : " in plaintext (if the cluster serves TLS, set CAUSEWAY_TLS_CA to the CA that "
            "signed its certificate)";
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.timeout;
  bool said_waiting = false;
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    // A refused connection ends the wait at once: nothing serves there,
    // and retrying for the whole timeout only delays the error. Any other
    // failed attempt (a server shedding connections, a handshake cut short)
    // is retried by gRPC until the deadline.
    if (state == GRPC_CHANNEL_SHUTDOWN ||
        (state == GRPC_CHANNEL_TRANSIENT_FAILURE && RefusedEverywhere(address_))) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to the coordinator at ", address_,
                       ": the connection was refused (nothing serves there), trying", hint));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat("cannot reach the coordinator at ", address_,
                                                 " within ", absl::FormatDuration(options_.timeout),
                                                 hint));
    }
    // A coordinator slow to answer (packets dropped, a loaded machine):
    // say once that this is a wait, not a hang.
    if (!said_waiting && now - start >= kSayWaitingAfter) {
      said_waiting = true;
      CW_LOG(kWarning) << "waiting for the coordinator at " << address_ << " to answer (up to "
                       << absl::FormatDuration(options_.timeout) << " in all)";
    }
    const absl::Time wake = said_waiting ? deadline : std::min(deadline, start + kSayWaitingAfter);
    channel.WaitForStateChange(state, absl::ToChronoTime(wake));
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

absl::Status RemoteCluster::Impl::Connect() {
  grpc_transport::ConfigureAbseilForGrpc();
  CW_ASSIGN_OR_RETURN(address_, ParseGrpcAddress(options_.address));
  CW_ASSIGN_OR_RETURN(auto creds, grpc_transport::MakeChannelCredentials(
                                      grpc_transport::TlsFromEnvironment(options_.tls)));
  // The token first, checked before any connection is tried. None given:
  // the record `cluster up` keeps for a cluster on this machine
  // (cluster_file.h), if it is private to this user.
  CW_ASSIGN_OR_RETURN(std::string token, grpc_transport::TokenFromEnvironment(options_.token));
  if (token.empty()) {
    absl::StatusOr<std::string> recorded = ReadClusterToken(address_);
    if (recorded.ok()) {
      token = *std::move(recorded);
    } else if (!absl::IsNotFound(recorded.status())) {
      return recorded.status();
    }
  }
  auto channel = grpc_transport::MakeChannel(address_, creds);
  CW_RETURN_IF_ERROR(AwaitChannel(*channel));
  stub_ = cluster::Coordinator::NewStub(channel);
  grpc_transport::AddCallMetadata(context_, token);
  stream_ = stub_->Connect(&context_);
  cluster::ToClient first;
  const bool read = stream_->Read(&first);
  if (!read || first.messages_size() == 0 || !first.messages(0).has_topology()) {
    // A refused stream has ended already: Finish() gives the reason.
    if (read) context_.TryCancel();
    const absl::Status status = grpc_transport::FromGrpc(stream_->Finish());
    stream_.reset();
    return Annotate(status.ok() ? absl::UnavailableError("no topology") : status,
                    absl::StrCat("connecting to the coordinator at ", address_));
  }
  CW_ASSIGN_OR_RETURN(Topology topology, wire::DecodeTopology(first.messages(0).topology()));
  {
    MutexLock lock(&mu_);
    topology_ = std::move(topology);
  }
  resources_ = std::make_unique<Resources>(this);
  writer_ = std::make_unique<BatchWriter<cluster::ClientBatch, cluster::ClientMessage>>(
      [this](const cluster::ClientBatch& b) { return stream_->Write(b); },
      grpc_transport::WriterLimit{kMaxOutboxBytes, absl::ZeroDuration()});
  reader_ = std::thread([this] { ReadLoop(); });
  return absl::OkStatus();
}

void RemoteCluster::Impl::ReadLoop() {
  cluster::ToClient batch;
  while (stream_->Read(&batch)) {
    for (cluster::ClientEvent& e : *batch.mutable_messages()) {
      if (e.has_topology()) {
        absl::StatusOr<Topology> t = wire::DecodeTopology(e.topology());
        if (!t.ok()) {
          CW_LOG(kError) << "bad topology from the coordinator: " << t.status();
          continue;
        }
        MutexLock lock(&mu_);
        topology_ = *std::move(t);
        continue;
      }
      if (e.has_forwarded()) {
        const cluster::RunsForwarded& f = e.forwarded();
        for (int i = 0; i < f.runs_size() && i < f.statuses_size(); ++i) {
          std::function<void(const absl::Status&)> told;
          {
            MutexLock lock(&mu_);
            auto it = forwarded_.find(RunId(f.runs(i)));
            if (it == forwarded_.end()) continue;
            told = std::move(it->second);
            forwarded_.erase(it);
          }
          told(wire::DecodeStatus(f.statuses(i)));
        }
        continue;
      }
      if (!e.has_reply()) continue;
      Promise<cluster::Reply> promise;
      {
        MutexLock lock(&mu_);
        auto it = pending_.find(e.reply().id());
        if (it == pending_.end()) continue;
        promise = std::move(it->second);
        pending_.erase(it);
      }
      const absl::Status status = wire::DecodeStatus(e.reply().status());
      if (status.ok()) {
        promise.Set(std::move(*e.mutable_reply()));
      } else {
        promise.Set(status);
      }
    }
  }
  const absl::Status finish = grpc_transport::FromGrpc(stream_->Finish());
  absl::flat_hash_map<uint64_t, Promise<cluster::Reply>> pending;
  absl::flat_hash_map<RunId, std::function<void(const absl::Status&)>> forwarded;
  absl::Status broken;
  {
    MutexLock lock(&mu_);
    broken_ = absl::UnavailableError(
        absl::StrCat("connection to the coordinator at ", address_, " lost",
                     finish.ok() ? std::string() : absl::StrCat(": ", finish.ToString())));
    broken = broken_;
    pending.swap(pending_);
    forwarded.swap(forwarded_);
  }
  for (auto& [id, p] : pending) p.Set(broken);
  for (auto& [run, told] : forwarded) told(broken);
  reader_done_.Notify();
}

void RemoteCluster::Impl::Close() {
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  if (stream_ == nullptr) return;
  writer_->Close();
  stream_->WritesDone();
  // The coordinator ends the stream once it has reclaimed this connection's
  // clients; do not wait for a coordinator that stopped answering.
  if (!reader_done_.WaitForNotificationWithTimeout(absl::Seconds(5))) context_.TryCancel();
  reader_.join();
}

ResourceService* RemoteCluster::Impl::resources() { return resources_.get(); }

SchedulerService* RemoteCluster::Impl::scheduler(IslandId island) {
  MutexLock lock(&mu_);
  if (!topology_.island(island).ok() && !schedulers_.contains(island)) return nullptr;
  std::unique_ptr<Scheduler>& s = schedulers_[island];
  if (s == nullptr) s = std::make_unique<Scheduler>(this, island);
  return s.get();
}

HostService* RemoteCluster::Impl::host(HostId host) {
  MutexLock lock(&mu_);
  auto it = hosts_.find(host);
  if (it != hosts_.end()) return it->second.get();
  if (!topology_.host(host).ok()) return nullptr;
  return (hosts_[host] = std::make_unique<Host>(this, host)).get();
}

absl::StatusOr<std::unique_ptr<RemoteCluster>> RemoteCluster::Connect(
    const RemoteClusterOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  CW_RETURN_IF_ERROR(impl->Connect());
  return std::unique_ptr<RemoteCluster>(new RemoteCluster(std::move(impl)));
}

RemoteCluster::RemoteCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteCluster::~RemoteCluster() = default;
ResourceService* RemoteCluster::resources() { return impl_->resources(); }
SchedulerService* RemoteCluster::scheduler(IslandId island) { return impl_->scheduler(island); }
HostService* RemoteCluster::host(HostId host) { return impl_->host(host); }

absl::Status RemoteCluster::SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                                      std::function<void(const absl::Status&)> forwarded) {
  cluster::ClientMessage m;
  wire::EncodeRun(run, m.mutable_submit_run()->mutable_run());
  for (IslandId i : islands) m.mutable_submit_run()->add_islands(i.value());
  if (forwarded) impl_->ExpectForwarded(run.run, std::move(forwarded));
  const absl::Status status = ReplyStatus(impl_->CallAndWait(std::move(m), "SubmitRun"));
  if (!status.ok()) impl_->ForgetForwarded(run.run);
  return status;
}

void RemoteCluster::ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                                  std::vector<ArrayId> arrays) {
  // Through the scheduler of each island the hosts are on: a release waits
  // there behind held runs of the client that read the arrays.
  const Topology topology = impl_->topology();
  std::map<IslandId, std::vector<HostId>> by_island;
  for (HostId h : hosts) {
    absl::StatusOr<HostInfo> info = topology.host(h);
    if (info.ok()) by_island[info->island].push_back(h);
  }
  for (const auto& [island, mine] : by_island) {
    cluster::ClientMessage m;
    m.mutable_scheduler()->set_island(island.value());
    cluster::ReleaseThrough& r = *m.mutable_scheduler()->mutable_release_arrays();
    r.set_client(client.value());
    for (HostId h : mine) r.add_hosts(h.value());
    for (ArrayId a : arrays) r.add_arrays(a.value());
    impl_->Send(std::move(m));
  }
}

absl::Status RemoteCluster::SetClientShare(ClientId client, const ClientShare& share) {
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  cluster::ClientMessage m;
  m.set_client(client.value());
  EncodeShare(share, m.mutable_set_share());
  return ReplyStatus(impl_->CallAndWait(std::move(m), "SetShare"));
}

absl::Status RemoteCluster::AdminSetClientShare(ClientId client, const ClientShare& share) {
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  cluster::ClientMessage m;
  m.set_client(client.value());
  EncodeShare(share, m.mutable_admin_set_share());
  return ReplyStatus(impl_->CallAndWait(std::move(m), "AdminSetShare"));
}

absl::Status RemoteCluster::AdminCancelClient(ClientId client) {
  cluster::ClientMessage m;
  m.set_client(client.value());
  m.set_admin_cancel_client(true);
  return ReplyStatus(impl_->CallAndWait(std::move(m), "AdminCancelClient"));
}

absl::StatusOr<std::vector<RemoteCluster::AccountedRun>> RemoteCluster::AdminShareLog(
    int64_t since_ns, bool* more) {
  cluster::ClientMessage m;
  m.set_share_log_since_ns(since_ns);
  CW_ASSIGN_OR_RETURN(cluster::Reply r, impl_->CallAndWait(std::move(m), "ShareLog"));
  const cluster::ShareLog& log = r.share_log();
  const int n = log.time_ns_size();
  if (log.clients_size() != n || log.device_us_size() != n || log.launches_size() != n) {
    return absl::InternalError("the coordinator sent a malformed share log");
  }
  std::vector<AccountedRun> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    out[i] = AccountedRun{log.time_ns(i), ClientId(log.clients(i)), log.device_us(i),
                          log.launches(i)};
  }
  if (more != nullptr) *more = log.more();
  return out;
}

void RemoteCluster::DropClient(ClientId client) {
  cluster::ClientMessage m;
  m.set_drop_client(client.value());
  impl_->Send(std::move(m));
}

absl::Status RemoteCluster::WaitForDevices(int64_t devices, absl::Duration timeout) {
  return impl_->WaitForTopology(
      [devices](const Topology& t) { return t.num_devices() >= devices; }, timeout);
}

absl::Status RemoteCluster::WaitForTopology(const std::function<bool(const Topology&)>& done,
                                            absl::Duration timeout) {
  return impl_->WaitForTopology(done, timeout);
}

absl::Status RemoteCluster::status() const { return impl_->status(); }

namespace {
cluster::ClientMessage TraceMessage(cluster::TraceRequest::Op op) {
  cluster::ClientMessage m;
  m.mutable_trace()->set_op(op);
  return m;
}
}  // namespace

absl::Status RemoteCluster::StartTrace() {
  CW_RETURN_IF_ERROR(
      ReplyStatus(impl_->CallAndWait(TraceMessage(cluster::TraceRequest::START), "StartTrace")));
  trace_.SetEnabled(true);
  return absl::OkStatus();
}

absl::Status RemoteCluster::StopTrace() {
  trace_.SetEnabled(false);
  return ReplyStatus(impl_->CallAndWait(TraceMessage(cluster::TraceRequest::STOP), "StopTrace"));
}

absl::Status RemoteCluster::CollectTrace() {
  // Rounds of at most 16,384 events a host, until none are left; bounded,
  // in case a misbehaving coordinator always says there are more.
  constexpr int kMaxRounds = 4096;
  for (int round = 0; round < kMaxRounds; ++round) {
    const int64_t asked_us = Clock::Real()->NowMicros();
    CW_ASSIGN_OR_RETURN(cluster::Reply r, impl_->CallAndWait(
                                              TraceMessage(cluster::TraceRequest::COLLECT),
                                              "CollectTrace"));
    const int64_t answered_us = Clock::Real()->NowMicros();
    int64_t skipped = 0;
    CW_ASSIGN_OR_RETURN(std::vector<TraceEvent> events,
                        grpc_transport::DecodeTraceEvents(
                            r.trace(),
                            grpc_transport::ClockShift(asked_us, answered_us, r.trace().now_us()),
                            &skipped));
    if (skipped > 0) {
      CW_LOG(kWarning) << "the coordinator sent " << skipped
                       << " malformed trace events; they are left out";
    }
    trace_.Merge(std::move(events));
    if (!r.trace().more()) break;
  }
  const Topology topology = impl_->topology();
  for (IslandId island : topology.islands()) {
    absl::StatusOr<IslandInfo> info = topology.island(island);
    if (!info.ok()) continue;
    for (HostId h : info->hosts) {
      trace_.NameHost(h, absl::StrCat("island ", island.value(), " / host ", h.value()));
    }
    for (DeviceId d : info->devices) {
      if (absl::StatusOr<DeviceInfo> device = topology.device(d); device.ok()) {
        trace_.NameDevice(d, device->description.empty()
                                 ? device->kind
                                 : absl::StrCat(device->kind, ": ", device->description));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace causeway
