#include "causeway/cluster/coordinator_impl.h"

namespace causeway {

absl::Status CoordinatorServer::Impl::Start() {
  grpc_transport::ConfigureAbseilForGrpc();
  CW_ASSIGN_OR_RETURN(token_, grpc_transport::TokenFromEnvironment(options_.token));
  if (token_.empty()) {
    return absl::InvalidArgumentError(
        "the coordinator needs a cluster token (--token or CAUSEWAY_TOKEN)");
  }
  CW_RETURN_IF_ERROR(CheckReportFanout(options_.report_fanout));
  if (!options_.worker_token.empty()) {
    CW_ASSIGN_OR_RETURN(worker_token_,
                        grpc_transport::CheckToken(options_.worker_token, "--worker-token"));
  } else {
    const absl::StatusOr<std::string> env = SettingValue("CAUSEWAY_WORKER_TOKEN");
    if (!env.ok()) return env.status();
    CW_ASSIGN_OR_RETURN(worker_token_, grpc_transport::CheckToken(*env, "CAUSEWAY_WORKER_TOKEN"));
  }
  if (worker_token_.empty()) {
    worker_token_ = token_;
    CW_LOG(kWarning) << "no worker token (--worker-token or CAUSEWAY_WORKER_TOKEN): workers and "
                        "clients share one token, so any client could join as a worker";
  } else if (worker_token_ == token_) {
    return absl::InvalidArgumentError(
        "the worker token must differ from the client token (or be left unset)");
  }
  const grpc_transport::TlsFiles tls = grpc_transport::TlsFromEnvironment(options_.tls);
  CW_ASSIGN_OR_RETURN(auto creds, grpc_transport::MakeServerCredentials(tls));
  grpc::ServerBuilder builder;
  grpc_transport::ConfigureServer(builder, options_.limits);
  builder.RegisterService(this);
  CW_ASSIGN_OR_RETURN(server_, grpc_transport::StartServer(builder, options_.listen, creds,
                                                           tls.cert.empty(), options_.limits));
  const std::string& l = options_.listen;
  address_ = absl::StrCat(l.substr(0, l.rfind(':')), ":", server_.port);
  monitor_ = std::thread([this] { MonitorLoop(); });
  return StartMetrics();
}

ControlPlaneOptions CoordinatorServer::Impl::ControlOptions() {
  ControlPlaneOptions o;
  o.scheduler.policy = SchedulingPolicy::kProportionalShare;
  o.scheduler.report_fanout = options_.report_fanout;
  o.scheduler.trace = &trace_;
  o.scheduler.on_run_accounted = [this](ClientId client, int64_t device_us, int launches) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    MutexLock lock(&log_mu_);
    share_log_.push_back(Accounted{int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, client,
                                   device_us, launches});
    if (share_log_.size() > kShareLogSize) share_log_.pop_front();
  };
  // Only this island's live hosts: a plan that places island work on a host
  // of another island is refused at registration, and a run that needs a
  // lost host is refused rather than half-run on the survivors.
  o.host_lookup = [this](IslandId island, HostId h) -> HostService* {
    RemoteHost* host = Host(h);
    return host != nullptr && host->island() == island && !host->lost() ? host : nullptr;
  };
  o.for_each_host = [this](const std::function<void(HostService&)>& apply) {
    for (const auto& h : LiveHosts()) apply(*h);
  };
  return o;
}

void CoordinatorServer::Impl::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (grpc::ServerContext* c : contexts_) c->TryCancel();
  }
  stop_.Notify();
  if (monitor_.joinable()) monitor_.join();
  metrics_.reset();
  server_.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  stopped_.Notify();
}

// Counts a stream against its peer's bound for as long as it is open.
class CoordinatorServer::Impl::PeerStream {
 public:
  PeerStream(Impl* impl, const grpc::ServerContext& context)
      : impl_(impl), peer_(grpc_transport::PeerHost(context.peer())) {
    MutexLock lock(&impl_->mu_);
    int& n = impl_->streams_by_peer_[peer_];
    admitted_ = n < limits::kMaxStreamsPerPeer;
    if (admitted_) ++n;
  }
  ~PeerStream() {
    if (!admitted_) return;
    MutexLock lock(&impl_->mu_);
    auto it = impl_->streams_by_peer_.find(peer_);
    if (--it->second == 0) impl_->streams_by_peer_.erase(it);
  }
  // RESOURCE_EXHAUSTED if the peer already has its bound of streams open.
  grpc::Status status() const {
    if (admitted_) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(peer_, " already has ", limits::kMaxStreamsPerPeer,
                                     " streams open to the coordinator"));
  }

 private:
  Impl* const impl_;
  const std::string peer_;
  bool admitted_ = false;
};

grpc::Status CoordinatorServer::Impl::Join(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream) {
  grpc::Status auth = grpc_transport::CheckCallMetadata(*context, worker_token_);
  if (!auth.ok()) return auth;
  const PeerStream counted(this, *context);
  if (!counted.status().ok()) return counted.status();
  cluster::WorkerBatch first;
  if (!stream->Read(&first) || first.messages_size() == 0 || !first.messages(0).has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a worker must say hello first");
  }
  const cluster::WorkerHello& hello = first.messages(0).hello();
  if (hello.devices() < 1 || hello.devices() > limits::kMaxDevicesPerHost ||
      hello.memory_bytes() < 1 || hello.memory_bytes() > limits::kMaxDeviceMemoryBytes ||
      hello.island() < 0 || hello.island() > limits::kMaxIsland) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("bad worker hello: ", hello.devices(), " devices (1 to ",
                     limits::kMaxDevicesPerHost, "), ", hello.memory_bytes(),
                     " bytes per device (1 to ", limits::kMaxDeviceMemoryBytes, "), island ",
                     hello.island(), " (0 to ", limits::kMaxIsland, ")"));
  }
  const std::string device_kind =
      hello.device_kind().empty() ? std::string(kDefaultDeviceKind) : hello.device_kind();
  if (absl::Status s = CheckDeviceKindName(device_kind); !s.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("bad worker hello: ", s.message()));
  }
  if (hello.device_descriptions_size() > hello.devices()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("bad worker hello: ", hello.device_descriptions_size(),
                                     " device descriptions for ", hello.devices(), " devices"));
  }
  for (const std::string& d : hello.device_descriptions()) {
    if (d.size() > kMaxDeviceDescription) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("bad worker hello: a device description of ", d.size(),
                                       " bytes (at most ", kMaxDeviceDescription, ")"));
    }
  }
  absl::StatusOr<std::pair<std::string, int>> data_address =
      grpc_transport::SplitHostPort(hello.data_address());
  if (!data_address.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("bad worker hello: data address: ",
                                     data_address.status().message()));
  }
  auto [host_part, data_port] = *data_address;
  if (host_part.empty() || host_part == "0.0.0.0" || host_part == "[::]") {
    host_part = grpc_transport::PeerHost(context->peer());
  }
  const std::string address = absl::StrCat(host_part, ":", data_port);
  const IslandId island(hello.island());
  std::shared_ptr<RemoteHost> host;
  std::vector<DeviceId> devices;
  {
    MutexLock lock(&mu_);
    if (shut_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
    const HostId id(next_host_++);
    for (int i = 0; i < hello.devices(); ++i) devices.push_back(DeviceId(next_device_++));
    host = std::make_shared<RemoteHost>(id, island, address, devices, context, stream);
    cluster::ToWorker welcome;
    welcome.mutable_welcome()->set_host(id.value());
    welcome.mutable_welcome()->set_report_fanout(options_.report_fanout);
    welcome.mutable_welcome()->set_heartbeat_interval_ms(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.heartbeat_timeout / 5)));
    for (DeviceId d : devices) welcome.mutable_welcome()->add_devices(d.value());
    host->Send(std::move(welcome));
    hosts_[id] = host;
    contexts_.push_back(context);
    // A trace in progress records the new host too.
    if (!traced_clients_.empty()) {
      cluster::TraceCall start;
      start.set_enable(true);
      for (ClientId c : traced_clients_) start.add_record_clients(c.value());
      host->Trace(start);
    }
  }
  // Its island's scheduler (made if it is the island's first host), its
  // devices in the topology, the quotas of clients already connected. Not
  // under mu_: the schedulers reach hosts through it.
  control_.AddHost(host->id(), island, devices, hello.memory_bytes(), device_kind,
                   {hello.device_descriptions().begin(), hello.device_descriptions().end()},
                   host.get());
  CW_LOG(kInfo) << host->Name() << " joined " << island.ToString() << " with " << hello.devices()
               << " devices";
  BroadcastPeers();
  BroadcastTopology();

  cluster::WorkerBatch batch;
  while (stream->Read(&batch)) {
    host->Touch(static_cast<int64_t>(batch.ByteSizeLong()), batch.messages_size());
    for (cluster::FromWorker& m : *batch.mutable_messages()) {
      if (m.has_reply()) {
        host->OnReply(std::move(*m.mutable_reply()));
      } else if (m.has_runs_done()) {
        RunsDone(*host, m.runs_done());
      }
    }
  }
  std::string reason = host->cancel_reason();
  if (reason.empty()) reason = context->IsCancelled() ? "connection broken" : "connection closed";
  HostLost(host, reason);
  host->CloseWriter();
  MutexLock lock(&mu_);
  contexts_.erase(std::find(contexts_.begin(), contexts_.end(), context));
  return grpc::Status::OK;
}

grpc::Status CoordinatorServer::Impl::Connect(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<cluster::ToClient, cluster::ClientBatch>* stream) {
  // Clients hold the clients' token; operators (administration calls) the
  // workers' token, which no client has.
  grpc::Status auth = grpc_transport::CheckCallMetadata(*context, token_);
  bool is_operator = false;
  if (auth.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
      grpc_transport::CheckCallMetadata(*context, worker_token_).ok()) {
    auth = grpc::Status::OK;
    is_operator = true;
  }
  if (!auth.ok()) return auth;
  const PeerStream counted(this, *context);
  if (!counted.status().ok()) return counted.status();
  auto session =
      std::make_shared<ClientSession>(context, stream, options_.max_unread_client_bytes);
  session->operator_ = is_operator;
  {
    MutexLock lock(&mu_);
    if (shut_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
    sessions_[session.get()] = session;
    contexts_.push_back(context);
  }
  cluster::ClientEvent hello;
  wire::EncodeTopology(control_.resources().GetTopology(), hello.mutable_topology());
  session->writer.Post(std::move(hello));
  cluster::ClientBatch batch;
  while (stream->Read(&batch)) {
    client_bytes_in_.fetch_add(static_cast<int64_t>(batch.ByteSizeLong()));
    client_messages_in_.fetch_add(batch.messages_size());
    for (cluster::ClientMessage& m : *batch.mutable_messages()) HandleClient(*session, session, m);
  }
  {
    MutexLock lock(&mu_);
    sessions_.erase(session.get());
    contexts_.erase(std::find(contexts_.begin(), contexts_.end(), context));
    // What it was sent stays in the totals.
    const grpc_transport::WriterStats sent = session->writer.stats();
    ended_sessions_sent_.bytes += sent.bytes;
    ended_sessions_sent_.messages += sent.messages;
  }
  SetTracing(*session, false);
  Reclaim(*session);
  session->writer.Close();
  return grpc::Status::OK;
}


absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  // A start that failed part way (the metrics listener after the gRPC
  // server) stops what it had started: its threads are joined, not left
  // to std::terminate.
  if (absl::Status started = impl->Start(); !started.ok()) {
    impl->Shutdown();
    return started;
  }
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorServer::~CoordinatorServer() { Shutdown(); }
std::string CoordinatorServer::address() const { return impl_->address(); }
std::string CoordinatorServer::metrics_address() const { return impl_->metrics_address(); }
Topology CoordinatorServer::topology() const { return impl_->topology(); }
void CoordinatorServer::Shutdown() { impl_->Shutdown(); }
void CoordinatorServer::Wait() { impl_->Wait(); }

}  // namespace causeway
