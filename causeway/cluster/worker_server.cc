#include "causeway/cluster/worker_server.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/backend/builtin_kinds.h"
#include "causeway/backend/device.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/data_plane.h"
#if CAUSEWAY_HAVE_GLOO
#include "causeway/cluster/gloo_collectives.h"
#endif
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/wire_codec.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"
#include "causeway/base/trace.h"

namespace causeway {

bool HaveGloo() { return CAUSEWAY_HAVE_GLOO != 0; }

namespace {

// Whether collectives between processes go through Gloo
// (WorkerServerOptions::collectives).
absl::StatusOr<bool> UseGloo(const WorkerServerOptions& options) {
  const grpc_transport::TlsFiles files = grpc_transport::TlsFromEnvironment(options.tls);
  const bool tls = !files.cert.empty() || !files.ca.empty();
  if (options.collectives.empty()) return HaveGloo() && !tls;
  if (options.collectives == "grpc") return false;
  if (options.collectives != "gloo") {
    return absl::InvalidArgumentError(absl::StrCat("--collectives: unknown path \"",
                                                   options.collectives,
                                                   "\" (gloo or grpc)"));
  }
  if (!HaveGloo()) {
    return absl::InvalidArgumentError(
        "--collectives gloo: this build has no Gloo (install libgloo-dev and reconfigure)");
  }
  if (tls) {
    return absl::InvalidArgumentError(
        "--collectives gloo: Gloo's TCP transport has no TLS; use grpc with --tls-*");
  }
  return true;
}

}  // namespace

using grpc_transport::BatchWriter;

class WorkerServer::Impl {
 public:
  explicit Impl(const WorkerServerOptions& options)
      : options_(options), heartbeat_interval_(options.heartbeat_interval) {}
  ~Impl() { Shutdown(); }

  absl::Status Start();
  HostId host() const { return host_; }
  int data_port() const { return data_port_; }
  ReassemblyStats reassembly_stats() const { return data_->reassembly_stats(); }

  absl::Status Wait() {
    stopped_.WaitForNotification();
    MutexLock lock(&mu_);
    return exit_status_;
  }

  void Shutdown() {
    {
      MutexLock lock(&mu_);
      if (shut_down_) return;
      shut_down_ = true;
      if (exit_status_.ok()) exit_status_ = absl::CancelledError("worker shut down");
    }
    stop_heartbeat_.Notify();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (stream_ != nullptr) context_.TryCancel();
    if (reader_.joinable()) reader_.join();
    if (writer_ != nullptr) writer_->Close();
    if (data_ != nullptr) data_->Shutdown();
    server_.Shutdown(std::chrono::system_clock::now());
    if (hub_ != nullptr) hub_->Shutdown();
    if (executor_ != nullptr) {
      executor_->store().Shutdown();
      executor_->Shutdown();
    }
    if (!stopped_.HasBeenNotified()) stopped_.Notify();
  }

 private:
  void ReadLoop();
  void Handle(cluster::ToWorker& message);
  void HandleCall(uint64_t id, cluster::HostCall& call);
  void Reply(uint64_t id, const absl::Status& status,
             const std::function<void(cluster::Reply&)>& fill = nullptr);
  // An OK reply carrying `value`, in chunks when it is large.
  void ReplyLiteral(uint64_t id, const ir::Literal& value);
  // OK if `folder` lies under options_.checkpoint_root, symbolic links
  // resolved; else PERMISSION_DENIED (FAILED_PRECONDITION with no root).
  absl::Status CheckCheckpointFolder(const std::string& folder) const;
  void Stop(const absl::Status& why) {
    {
      MutexLock lock(&mu_);
      if (exit_status_.ok()) exit_status_ = why;
    }
    if (!stopped_.HasBeenNotified()) stopped_.Notify();
  }

  const WorkerServerOptions options_;
  std::string token_;
  std::vector<std::string> descriptions_;  // of each local device
  HostId host_;
  int data_port_ = 0;
  std::shared_ptr<grpc::ChannelCredentials> channel_creds_;
  std::unique_ptr<DataPlane> data_;
  grpc_transport::StartedServer server_;
  std::unique_ptr<TraceRecorder> trace_;
  std::unique_ptr<ProcessCollectives> gloo_;  // before the hub: it calls into it
  std::unique_ptr<CollectiveHub> hub_;
  std::unique_ptr<HostExecutor> executor_;

  std::unique_ptr<cluster::Coordinator::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<cluster::WorkerBatch, cluster::ToWorkerBatch>> stream_;
  std::unique_ptr<BatchWriter<cluster::WorkerBatch, cluster::FromWorker>> writer_;
  std::thread reader_;
  std::thread heartbeat_;
  // Set before the heartbeat thread starts; read only by it after.
  absl::Duration heartbeat_interval_;
  Notification stop_heartbeat_;
  Notification stopped_;

  Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status exit_status_ ABSL_GUARDED_BY(mu_);
};

absl::Status WorkerServer::Impl::Start() {
  grpc_transport::ConfigureAbseilForGrpc();
  if (options_.devices < 1 || options_.devices > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("a worker needs 1 to 4096 devices; given ", options_.devices));
  }
  if (options_.memory_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("device memory must be positive; given ", options_.memory_bytes));
  }
  if (options_.island < 0 || options_.island > limits::kMaxIsland) {
    return absl::InvalidArgumentError(absl::StrCat("island must be 0 to ", limits::kMaxIsland,
                                                   "; given ", options_.island));
  }
  if (options_.memory_bytes > limits::kMaxDeviceMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("device memory must be at most ",
                                                   limits::kMaxDeviceMemoryBytes, " bytes; given ",
                                                   options_.memory_bytes));
  }
  if (options_.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "no coordinator address (--coordinator or CAUSEWAY_COORDINATOR)");
  }
  backend::RegisterBuiltinKinds();  // the built-in kinds, registered
  CW_RETURN_IF_ERROR(CheckDeviceKindName(options_.device_kind));
  CW_ASSIGN_OR_RETURN(const backend::DeviceKind* kind,
                      backend::FindDeviceKind(options_.device_kind));
  // What each device is, said in the hello (before the devices have ids).
  for (int i = 0; i < options_.devices; ++i) {
    backend::DeviceSpec spec;
    spec.local_index = i;
    spec.memory_bytes = options_.memory_bytes;
    absl::StatusOr<backend::DeviceDescription> d = kind->Describe(spec);
    if (!d.ok()) return Annotate(d.status(), absl::StrCat("describing local device ", i));
    descriptions_.push_back(backend::FormatDescription(*d).substr(0, kMaxDeviceDescription));
  }
  CW_ASSIGN_OR_RETURN(token_, grpc_transport::WorkerTokenFromEnvironment(options_.token));
  const grpc_transport::TlsFiles tls = grpc_transport::TlsFromEnvironment(options_.tls);
  CW_ASSIGN_OR_RETURN(channel_creds_, grpc_transport::MakeChannelCredentials(tls));
  CW_ASSIGN_OR_RETURN(auto server_creds, grpc_transport::MakeServerCredentials(tls));

  // The data server first: its port goes into the hello. It refuses pushes
  // until the data plane is attached, which happens before the coordinator
  // tells anyone about this host.
  data_ = std::make_unique<DataPlane>(
      token_, channel_creds_, ReassemblyLimits::ForHost(options_.devices, options_.memory_bytes));
  grpc::ServerBuilder builder;
  grpc_transport::ConfigureServer(builder);
  builder.RegisterService(data_->service());
  absl::StatusOr<grpc_transport::StartedServer> started =
      grpc_transport::StartServer(builder, options_.listen, server_creds, tls.cert.empty());
  if (!started.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve the data plane on ",
                                               options_.listen, ": ", started.status().message()));
  }
  server_ = std::move(*started);
  data_port_ = server_.port;

  auto channel = grpc_transport::MakeChannel(options_.coordinator, channel_creds_);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoNanoseconds(options_.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot reach the coordinator at ",
                                               options_.coordinator, " within ",
                                               absl::FormatDuration(options_.connect_timeout)));
  }
  stub_ = cluster::Coordinator::NewStub(channel);
  grpc_transport::AddCallMetadata(context_, token_);
  stream_ = stub_->Join(&context_);
  cluster::WorkerBatch hello;
  cluster::WorkerHello& h = *hello.add_messages()->mutable_hello();
  h.set_island(options_.island);
  h.set_devices(options_.devices);
  h.set_device_kind(options_.device_kind);
  for (const std::string& d : descriptions_) h.add_device_descriptions(d);
  h.set_memory_bytes(options_.memory_bytes);
  h.set_data_address(absl::StrCat(options_.advertise, ":", data_port_));
  cluster::ToWorkerBatch first;
  const bool read = stream_->Write(hello) && stream_->Read(&first);
  if (!read || first.messages_size() == 0 || !first.messages(0).has_welcome()) {
    // A refused stream has ended already: Finish() gives the reason.
    if (read) context_.TryCancel();
    const absl::Status status = grpc_transport::FromGrpc(stream_->Finish());
    stream_.reset();
    return Annotate(status.ok() ? absl::UnavailableError("no welcome") : status,
                    absl::StrCat("joining the coordinator at ", options_.coordinator));
  }
  const cluster::Welcome& welcome = first.messages(0).welcome();
  host_ = HostId(welcome.host());
  if (welcome.devices_size() != options_.devices) {
    return absl::InternalError("the coordinator's welcome names the wrong number of devices");
  }

  HostExecutorOptions ho;
  ho.host.id = host_;
  ho.host.island = IslandId(options_.island);
  for (int i = 0; i < options_.devices; ++i) {
    DeviceInfo d;
    d.id = DeviceId(welcome.devices(i));
    d.host = host_;
    d.island = IslandId(options_.island);
    d.local_index = i;
    d.memory_bytes = options_.memory_bytes;
    d.kind = options_.device_kind;
    d.description = descriptions_[i];
    ho.host.devices.push_back(d.id);
    ho.devices.push_back(d);
  }
  ho.device_memory_bytes = options_.memory_bytes;
  ho.memory_stall_timeout = options_.memory_stall_timeout;
  ho.input_timeout = options_.input_timeout;
  // Off until the coordinator starts a trace; bounded (about 100 bytes an
  // event) and emptied as clients collect their runs' events.
  trace_ = std::make_unique<TraceRecorder>(false, size_t{1} << 19);
  CW_ASSIGN_OR_RETURN(const bool gloo, UseGloo(options_));
#if CAUSEWAY_HAVE_GLOO
  if (gloo) {
    GlooCollectives::Plane plane;
    plane.self = [this] { return host_; };
    plane.hostname = [this] { return data_->HostnameOf(host_); };
    plane.send = [this](HostId to, const std::string& key, const std::string& value) {
      data_->SendRendezvous(to, key, value);
    };
    gloo_ = std::make_unique<GlooCollectives>(std::move(plane), options_.gloo_from_bytes);
  }
#else
  CW_CHECK(!gloo);
#endif
  hub_ = std::make_unique<CollectiveHub>(options_.collective_timeout, data_.get());
  ho.trace = trace_.get();
  ho.collectives = hub_.get();
  ho.transport = data_.get();
  // The coordinator's scheduler learns what runs cost and when the island
  // has room from these reports.
  ho.on_run_done = [this](HostId, RunId run, int64_t device_us, int launches) {
    cluster::FromWorker m;
    cluster::RunsDone& done = *m.mutable_runs_done();
    done.add_runs(run.value());
    done.add_device_us(device_us);
    done.add_launches(launches);
    writer_->Post(std::move(m));
  };
  CW_RETURN_IF_ERROR(
      Annotate(CheckReportFanout(welcome.report_fanout()), "the coordinator's welcome"));
  ho.report_fanout = welcome.report_fanout();
  // The coordinator's beat, where it asks for a faster one than ours (a
  // peer's number: only within [1 ms, our own interval]).
  if (welcome.heartbeat_interval_ms() > 0) {
    heartbeat_interval_ = std::min(options_.heartbeat_interval,
                                   absl::Milliseconds(welcome.heartbeat_interval_ms()));
  }
  ho.report_to_parent = [this](HostId parent, const SubtreeReport& report) {
    data_->SendReport(parent, report);
  };
  CW_ASSIGN_OR_RETURN(executor_, HostExecutor::Create(std::move(ho)));
  data_->Attach(host_, executor_.get(), hub_.get(), gloo_.get());

  // Replies to fetches are the large messages: a whole shard at once, so
  // the bound is well above a device's memory. A coordinator this far
  // behind is not reading.
  writer_ = std::make_unique<BatchWriter<cluster::WorkerBatch, cluster::FromWorker>>(
      [this](const cluster::WorkerBatch& batch) { return stream_->Write(batch); },
      grpc_transport::WriterLimit{size_t{4} << 30, absl::ZeroDuration()});
  // The rest of the first batch (the peer table follows the welcome).
  for (int i = 1; i < first.messages_size(); ++i) Handle(*first.mutable_messages(i));
  reader_ = std::thread([this] { ReadLoop(); });
  heartbeat_ = std::thread([this] {
    while (!stop_heartbeat_.WaitForNotificationWithTimeout(heartbeat_interval_)) {
      if (writer_->overflowed()) {
        Stop(absl::UnavailableError(absl::StrCat(
            "the coordinator at ", options_.coordinator,
            " fell more than 4 GiB behind reading this worker's stream")));
        return;
      }
      cluster::FromWorker beat;
      beat.set_heartbeat(true);
      writer_->PostUrgent(std::move(beat));
    }
  });
  return absl::OkStatus();
}

void WorkerServer::Impl::ReadLoop() {
  cluster::ToWorkerBatch batch;
  while (stream_->Read(&batch)) {
    for (cluster::ToWorker& m : *batch.mutable_messages()) Handle(m);
  }
  const absl::Status status = grpc_transport::FromGrpc(stream_->Finish());
  Stop(absl::UnavailableError(absl::StrCat("the coordinator at ", options_.coordinator,
                                           " ended the connection: ",
                                           status.ok() ? "closed" : status.ToString())));
}

void WorkerServer::Impl::Reply(uint64_t id, const absl::Status& status,
                               const std::function<void(cluster::Reply&)>& fill) {
  if (id == 0) return;
  cluster::FromWorker m;
  cluster::Reply& r = *m.mutable_reply();
  r.set_id(id);
  wire::EncodeStatus(status, r.mutable_status());
  if (status.ok() && fill) fill(r);
  writer_->Post(std::move(m));
}

void WorkerServer::Impl::ReplyLiteral(uint64_t id, const ir::Literal& value) {
  // In chunks, so that heartbeats (queued ahead of them) are never held
  // back by more than one batch of a large reply.
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t total = static_cast<size_t>(value.byte_size());
  const char* data = reinterpret_cast<const char*>(value.data());
  std::vector<cluster::FromWorker> messages;
  size_t offset = 0;
  do {
    cluster::FromWorker& m = messages.emplace_back();
    cluster::Reply& r = *m.mutable_reply();
    r.set_id(id);
    const size_t n = std::min(kChunk, total - offset);
    if (offset == 0) {
      wire::EncodeStatus(absl::OkStatus(), r.mutable_status());
      wire::EncodeShape(value.shape(), r.mutable_literal()->mutable_shape());
    }
    r.mutable_literal()->set_data(data + offset, n);
    offset += n;
    r.set_partial(offset < total);
  } while (offset < total);
  writer_->PostAll(std::move(messages));
}

absl::Status WorkerServer::Impl::CheckCheckpointFolder(const std::string& folder) const {
  namespace fs = std::filesystem;
  if (options_.checkpoint_root.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        host_.ToString(), " was started without --checkpoint-root: it writes and reads no "
        "checkpoints"));
  }
  std::error_code error;
  const fs::path root = fs::weakly_canonical(options_.checkpoint_root, error);
  const fs::path path = error ? fs::path() : fs::weakly_canonical(folder, error);
  if (error || !fs::path(folder).is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint folder '", folder, "' is not an absolute path ",
                     host_.ToString(), " can resolve"));
  }
  // Under the root: every component of the root is a prefix of the path's.
  auto r = root.begin();
  auto p = path.begin();
  for (; r != root.end() && p != path.end() && *r == *p; ++r, ++p) {
  }
  const bool inside = r == root.end() || (r->empty() && std::next(r) == root.end());
  if (!inside || p == path.end()) {
    return absl::PermissionDeniedError(absl::StrCat("checkpoint folder '", folder,
                                                    "' is not under ", host_.ToString(),
                                                    "'s --checkpoint-root ", root.string()));
  }
  return absl::OkStatus();
}

void WorkerServer::Impl::Handle(cluster::ToWorker& message) {
  switch (message.body_case()) {
    case cluster::ToWorker::kPeers:
      data_->UpdatePeers(message.peers());
      break;
    case cluster::ToWorker::kCall:
      HandleCall(message.id(), *message.mutable_call());
      break;
    case cluster::ToWorker::kWelcome:
    case cluster::ToWorker::BODY_NOT_SET:
      Reply(message.id(), absl::InvalidArgumentError("unexpected message from the coordinator"));
      break;
  }
}

void WorkerServer::Impl::HandleCall(uint64_t id, cluster::HostCall& call) {
  switch (call.call_case()) {
    case cluster::HostCall::kRegisterProgram: {
      // The executor compiles the nodes it runs, for its devices' kind, and
      // refuses a node for another kind.
      absl::StatusOr<std::shared_ptr<const ProgramPlan>> plan =
          wire::DecodePlan(call.register_program(), wire::FunctionMode::kParse);
      Reply(id, plan.ok() ? executor_->RegisterProgram(*std::move(plan)) : plan.status());
      break;
    }
    case cluster::HostCall::kUnregisterProgram:
      executor_->UnregisterProgram(ProgramId(call.unregister_program()));
      break;
    case cluster::HostCall::kEnqueueRuns: {
      std::vector<RunRequest> runs;
      runs.reserve(call.enqueue_runs().runs_size());
      for (const wire::Run& r : call.enqueue_runs().runs()) {
        absl::StatusOr<RunRequest> run = wire::DecodeRun(r);
        if (!run.ok()) {
          CW_LOG(kError) << host_.ToString() << ": dropped a malformed run: " << run.status();
          continue;
        }
        runs.push_back(*std::move(run));
      }
      executor_->EnqueueRuns(runs);
      break;
    }
    case cluster::HostCall::kPutShard: {
      cluster::PutShard& p = *call.mutable_put_shard();
      absl::StatusOr<ir::Literal> value = wire::DecodeLiteral(p.value());
      Reply(id, value.ok() ? executor_->PutShard(ArrayId(p.array()), p.shard(), p.local_device(),
                                                 ClientId(p.owner()), *std::move(value))
                           : value.status());
      break;
    }
    case cluster::HostCall::kFetchShard:
      executor_->FetchShard(ArrayId(call.fetch_shard().array()), call.fetch_shard().shard())
          .OnReady([this, id](const absl::StatusOr<ir::Literal>& value) {
            if (!value.ok()) {
              Reply(id, value.status());
            } else {
              ReplyLiteral(id, *value);
            }
          });
      break;
    case cluster::HostCall::kAwaitShard:
      executor_->AwaitShard(ArrayId(call.await_shard().array()), call.await_shard().shard())
          .OnReady([this, id](const absl::StatusOr<Unit>& ready) { Reply(id, ready.status()); });
      break;
    case cluster::HostCall::kAwaitShards: {
      if (absl::Status valid = grpc_transport::CheckShardList(call.await_shards());
          !valid.ok()) {
        Reply(id, valid);
        break;
      }
      const std::vector<int> shards(call.await_shards().shards().begin(),
                                    call.await_shards().shards().end());
      executor_->AwaitShards(ArrayId(call.await_shards().array()), shards)
          .OnReady([this, id](const absl::StatusOr<Unit>& ready) { Reply(id, ready.status()); });
      break;
    }
    case cluster::HostCall::kSaveShards: {
      absl::StatusOr<std::vector<SavePieceRequest>> pieces =
          grpc_transport::DecodeSaveShards(call.save_shards());
      absl::Status allowed =
          pieces.ok() ? CheckCheckpointFolder(call.save_shards().folder()) : pieces.status();
      if (!allowed.ok()) {
        Reply(id, allowed);
        break;
      }
      executor_->SaveShards(call.save_shards().folder(), *std::move(pieces))
          .OnReady([this, id](const absl::StatusOr<std::vector<SavedPiece>>& saved) {
            if (!saved.ok()) {
              Reply(id, saved.status());
              return;
            }
            Reply(id, absl::OkStatus(), [&](cluster::Reply& r) {
              grpc_transport::EncodeSavedPieces(*saved, r.mutable_saved());
            });
          });
      break;
    }
    case cluster::HostCall::kRestoreShards: {
      absl::StatusOr<std::vector<RestoreShardRequest>> shards =
          grpc_transport::DecodeRestoreShards(call.restore_shards());
      absl::Status allowed =
          shards.ok() ? CheckCheckpointFolder(call.restore_shards().folder()) : shards.status();
      Reply(id, allowed.ok() ? executor_->RestoreShards(call.restore_shards().folder(),
                                                        ClientId(call.restore_shards().owner()),
                                                        *std::move(shards))
                             : allowed);
      break;
    }
    case cluster::HostCall::kReleaseArrays: {
      std::vector<ArrayId> ids;
      for (int64_t a : call.release_arrays().arrays()) ids.push_back(ArrayId(a));
      executor_->ReleaseArrays(ids);
      break;
    }
    case cluster::HostCall::kReleaseOwner:
      executor_->ReleaseOwner(ClientId(call.release_owner()));
      break;
    case cluster::HostCall::kSetQuota: {
      const int64_t bytes = call.set_quota().bytes();
      if (bytes < 0 || bytes > limits::kMaxDeviceMemoryBytes) {
        Reply(id, absl::InvalidArgumentError(absl::StrCat("a memory quota of ", bytes, " bytes")));
        break;
      }
      executor_->SetMemoryQuota(ClientId(call.set_quota().owner()), bytes);
      Reply(id, absl::OkStatus());
      break;
    }
    case cluster::HostCall::kGetCounters:
      executor_->GetCounters(call.get_counters())
          .OnReady([this, id, by_client = call.by_client()](
                       absl::StatusOr<std::vector<DeviceCounters>> counters) {
            if (counters.ok() && by_client) {
              std::vector<std::vector<ClientUsage>> usage = executor_->ClientUsageByDevice();
              for (size_t i = 0; i < counters->size() && i < usage.size(); ++i) {
                (*counters)[i].clients = std::move(usage[i]);
              }
            }
            Reply(id, counters.status(), [&](cluster::Reply& r) {
              grpc_transport::EncodeCounters(*counters, by_client, r.mutable_counters());
            });
          });
      break;
    case cluster::HostCall::kTrace: {
      const cluster::TraceCall& t = call.trace();
      // The clients a trace call names, at most kMaxClients of them.
      auto named = [](const google::protobuf::RepeatedField<int64_t>& ids,
                      absl::string_view what) -> absl::StatusOr<std::vector<ClientId>> {
        constexpr int kMaxClients = 1 << 16;
        if (ids.size() > kMaxClients) {
          return absl::InvalidArgumentError(absl::StrCat("a trace call names ", ids.size(), " ",
                                                         what, " (at most ", kMaxClients, ")"));
        }
        return std::vector<ClientId>(ids.begin(), ids.end());
      };
      if (!t.collect()) {
        absl::StatusOr<std::vector<ClientId>> record =
            named(t.record_clients(), "clients to record");
        if (!record.ok()) {
          Reply(id, record.status());
          break;
        }
        trace_->SetClients(*std::move(record));
        trace_->SetEnabled(t.enable());
        if (!t.enable()) trace_->Clear();
        Reply(id, absl::OkStatus());
        break;
      }
      constexpr int kMaxEvents = 1 << 16;
      absl::StatusOr<std::vector<ClientId>> clients = named(t.clients(), "clients to collect");
      if (!clients.ok()) {
        Reply(id, clients.status());
        break;
      }
      bool more = false;
      const std::vector<TraceEvent> events = trace_->Take(
          *clients, static_cast<size_t>(std::clamp(t.max_events(), 1, kMaxEvents)), &more);
      Reply(id, absl::OkStatus(), [&](cluster::Reply& r) {
        cluster::TraceEvents& out = *r.mutable_trace();
        for (const TraceEvent& e : events) grpc_transport::EncodeTraceEvent(e, out.add_events());
        out.set_more(more);
        out.set_dropped(trace_->dropped());
        out.set_now_us(Clock::Real()->NowMicros());
      });
      break;
    }
    case cluster::HostCall::CALL_NOT_SET:
      Reply(id, absl::InvalidArgumentError("empty host call"));
      break;
  }
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options) {
  CW_RETURN_IF_ERROR(UseGloo(options).status());  // bad --collectives: before connecting
  auto impl = std::make_unique<Impl>(options);
  CW_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl)));
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), host_(impl_->host()) {}

WorkerServer::~WorkerServer() { Shutdown(); }

absl::Status WorkerServer::Wait() { return impl_->Wait(); }

int WorkerServer::data_port() const { return impl_->data_port(); }

ReassemblyStats WorkerServer::reassembly_stats() const { return impl_->reassembly_stats(); }

void WorkerServer::Shutdown() { impl_->Shutdown(); }

}  // namespace causeway
