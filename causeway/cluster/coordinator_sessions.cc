#include "causeway/cluster/coordinator_impl.h"

namespace causeway {
namespace {

using ReplyFn = RemoteReplyFn;

// Bytes queued for one worker past which a client's puts wait (their
// reader pushes back on the client) and how long. (Past
// RemoteHost::kMaxBacklogBytes the worker is deemed not to read and is
// dropped.)
constexpr size_t kHostBacklogBytes = size_t{256} << 20;
constexpr absl::Duration kHostBacklogWait = absl::Seconds(30);

// RESOURCE_EXHAUSTED once a connection has `max` programs registered.
absl::Status CheckProgramRoom(size_t registered, size_t max, absl::string_view where) {
  if (registered < max) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "this connection has ", registered, " programs registered ", where, " (at most ", max,
      "); unregister some, or reconnect"));
}

}  // namespace

void CoordinatorServer::Impl::Reclaim(ClientSession& session) {
  for (const auto& [island, program] : session.scheduler_programs) {
    if (IslandScheduler* s = Scheduler(island)) s->UnregisterProgram(program);
  }
  for (const auto& [h, program] : session.host_programs) {
    if (RemoteHost* host = Host(h)) host->UnregisterProgram(program);
  }
  // Held runs never reach a host (and the shares go); then everything the
  // clients own goes.
  for (ClientId c : session.clients) control_.DropClient(c);
  const std::vector<std::shared_ptr<RemoteHost>> live = LiveHosts();
  for (ClientId c : session.clients) {
    for (const auto& h : live) h->ReleaseOwner(c);
    control_.resources().UnregisterClient(c);
  }
  {
    MutexLock lock(&cancelled_mu_);
    for (ClientId c : session.clients) cancelled_.erase(c);
  }
  session.clients.clear();
}

absl::Status CoordinatorServer::Impl::SetShare(ClientId client, const cluster::ClientShare& wire) {
  return control_.SetShare(client,
                           ClientShare{wire.weight(), wire.priority(), wire.memory_quota_bytes()});
}

void CoordinatorServer::Impl::RunsDone(RemoteHost& host, const cluster::RunsDone& done) {
  IslandScheduler* scheduler = Scheduler(host.island());
  if (scheduler == nullptr) return;
  // Parallel lists; a malformed report is ignored (it only delays that
  // client's next runs until the host is lost).
  if (done.device_us_size() != done.runs_size() || done.launches_size() != done.runs_size()) {
    CW_LOG(kWarning) << host.Name() << " sent a malformed report of finished runs";
    return;
  }
  for (int i = 0; i < done.runs_size(); ++i) {
    scheduler->RunFinished(host.id(), RunId(done.runs(i)), done.device_us(i), done.launches(i));
  }
}

std::function<void(const absl::Status&)> CoordinatorServer::Impl::TellForwarded(
    const std::shared_ptr<ClientSession>& session, RunId run) {
  std::weak_ptr<ClientSession> weak = session;
  return [weak, run](const absl::Status& status) {
    std::shared_ptr<ClientSession> s = weak.lock();
    if (s == nullptr) return;
    cluster::ClientEvent event;
    event.mutable_forwarded()->add_runs(run.value());
    wire::EncodeStatus(status, event.mutable_forwarded()->add_statuses());
    s->writer.Post(std::move(event));
  };
}

void CoordinatorServer::Impl::ReplyTo(ClientSession& session, uint64_t id,
                                      const absl::Status& status,
                                      const std::function<void(cluster::Reply&)>& fill) {
  if (id == 0) return;
  cluster::ClientEvent event;
  cluster::Reply& r = *event.mutable_reply();
  r.set_id(id);
  wire::EncodeStatus(status, r.mutable_status());
  if (status.ok() && fill) fill(r);
  session.writer.Post(std::move(event));
}

absl::Status CoordinatorServer::Impl::CheckOwned(const ClientSession& session, int64_t id,
                                                 absl::string_view what) {
  const ClientId owner = OwnerOfId(id);
  if (session.clients.contains(owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " ", id, " belongs to ", owner.ToString(), ", not to a client of this connection"));
}

absl::Status CoordinatorServer::Impl::CheckRun(const ClientSession& session,
                                               const RunRequest& run) {
  if (!session.clients.contains(run.client)) {
    return absl::PermissionDeniedError(
        absl::StrCat(run.client.ToString(), " is not a client of this connection"));
  }
  {
    MutexLock lock(&cancelled_mu_);
    if (cancelled_.contains(run.client)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "an operator cancelled the work of ", run.client.ToString(),
          " (causeway cluster cancel): its arrays are gone; connect a new client"));
    }
  }
  CW_RETURN_IF_ERROR(CheckOwned(session, run.run.value(), "run"));
  CW_RETURN_IF_ERROR(CheckOwned(session, run.program.value(), "program"));
  for (ArrayId a : run.arguments) CW_RETURN_IF_ERROR(CheckOwned(session, a.value(), "array"));
  for (ArrayId a : run.outputs) CW_RETURN_IF_ERROR(CheckOwned(session, a.value(), "array"));
  return absl::OkStatus();
}

void CoordinatorServer::Impl::HandleClient(ClientSession& session,
                                           const std::shared_ptr<ClientSession>& shared,
                                           cluster::ClientMessage& message) {
  const uint64_t id = message.id();
  switch (message.body_case()) {
    case cluster::ClientMessage::kRegisterClient: {
      absl::StatusOr<ClientId> client = control_.resources().RegisterClient();
      if (client.ok()) session.clients.insert(*client);
      if (client.ok() && session.tracing) TraceClient(*client, true);
      ReplyTo(session, id, client.status(),
              [&](cluster::Reply& r) { r.set_client(client->value()); });
      return;
    }
    case cluster::ClientMessage::kUnregisterClient: {
      const ClientId client(message.unregister_client());
      if (session.tracing && session.clients.contains(client)) TraceClient(client, false);
      if (session.clients.erase(client) > 0) {
        // Its share, queues and quotas go with it (else a connection that
        // makes and ends many clients would grow those tables without
        // bound); a client ending cleanly has released them already.
        control_.DropClient(client);
        for (const auto& h : LiveHosts()) h->ReleaseOwner(client);
        control_.resources().UnregisterClient(client);
      }
      return;
    }
    case cluster::ClientMessage::kAllocateMesh: {
      const ClientId client(message.client());
      if (!session.clients.contains(client)) {
        ReplyTo(session, id, absl::PermissionDeniedError(absl::StrCat(
                                 client.ToString(), " is not a client of this connection")));
        return;
      }
      absl::StatusOr<MeshRequest> request = wire::DecodeMeshRequest(message.allocate_mesh());
      absl::StatusOr<Mesh> mesh =
          request.ok() ? control_.resources().AllocateMesh(client, *request) : request.status();
      ReplyTo(session, id, mesh.status(),
              [&](cluster::Reply& r) { wire::EncodeMesh(*mesh, r.mutable_mesh()); });
      return;
    }
    case cluster::ClientMessage::kScheduler:
      HandleScheduler(session, shared, id, *message.mutable_scheduler());
      return;
    case cluster::ClientMessage::kSubmitRun: {
      absl::StatusOr<RunRequest> run = wire::DecodeRun(message.submit_run().run());
      absl::Status status = run.ok() ? CheckRun(session, *run) : run.status();
      if (status.ok()) {
        std::vector<IslandId> islands;
        for (int64_t i : message.submit_run().islands()) islands.push_back(IslandId(i));
        status = control_.SubmitRun(*run, islands, TellForwarded(shared, run->run));
      }
      ReplyTo(session, id, status);
      return;
    }
    case cluster::ClientMessage::kDropClient: {
      const ClientId client(message.drop_client());
      if (!session.clients.contains(client)) return;
      control_.DropClient(client);
      return;
    }
    case cluster::ClientMessage::kSetShare: {
      const ClientId client(message.client());
      absl::Status status;
      if (!session.clients.contains(client)) {
        status = absl::PermissionDeniedError(
            absl::StrCat(client.ToString(), " is not a client of this connection"));
      }
      if (status.ok()) status = SetShare(client, message.set_share());
      ReplyTo(session, id, status);
      return;
    }
    case cluster::ClientMessage::kShareLogSinceNs: {
      if (!session.operator_) {
        ReplyTo(session, id, absl::PermissionDeniedError(
                                 "reading the share log needs the operators' credential, the "
                                 "workers' token"));
        return;
      }
      const int64_t since = message.share_log_since_ns();
      ReplyTo(session, id, absl::OkStatus(), [&](cluster::Reply& r) {
        cluster::ShareLog& log = *r.mutable_share_log();
        MutexLock lock(&log_mu_);
        auto it = std::upper_bound(
            share_log_.begin(), share_log_.end(), since,
            [](int64_t t, const Accounted& a) { return t < a.time_ns; });
        int n = 0;
        for (; it != share_log_.end() && n < kShareLogReply; ++it, ++n) {
          log.add_time_ns(it->time_ns);
          log.add_clients(it->client.value());
          log.add_device_us(it->device_us);
          log.add_launches(it->launches);
        }
        log.set_more(it != share_log_.end());
      });
      return;
    }
    case cluster::ClientMessage::kAdminSetShare: {
      const ClientId client(message.client());
      absl::Status status;
      if (!session.operator_) {
        status = absl::PermissionDeniedError(
            "setting another client's share needs the operators' credential, the workers' token");
      } else if (!control_.resources().HasClient(client)) {
        status = absl::NotFoundError(absl::StrCat(client.ToString(), " is not connected"));
      }
      if (status.ok()) status = SetShare(client, message.admin_set_share());
      if (status.ok()) {
        CW_LOG(kInfo) << "operator set the share of " << client << ": weight "
                      << message.admin_set_share().weight() << ", priority "
                      << message.admin_set_share().priority() << ", memory quota "
                      << message.admin_set_share().memory_quota_bytes() << " bytes per device";
      }
      ReplyTo(session, id, status);
      return;
    }
    case cluster::ClientMessage::kAdminCancelClient: {
      const ClientId client(message.client());
      absl::Status status;
      if (!session.operator_) {
        status = absl::PermissionDeniedError(
            "cancelling a client's work needs the operators' credential, the workers' token");
      } else if (!control_.resources().HasClient(client)) {
        status = absl::NotFoundError(absl::StrCat(client.ToString(), " is not connected"));
      }
      if (status.ok()) {
        {
          MutexLock lock(&cancelled_mu_);
          cancelled_.insert(client);
        }
        // As when the client leaves: held runs dropped first, then every
        // host cancels what it has of the client and releases its memory.
        control_.DropClient(client);
        for (const auto& h : LiveHosts()) h->ReleaseOwner(client);
        CW_LOG(kInfo) << "operator cancelled the work of " << client;
      }
      ReplyTo(session, id, status);
      return;
    }
    case cluster::ClientMessage::kHost:
      HandleHostCall(session, shared, id, *message.mutable_host());
      return;
    case cluster::ClientMessage::kTrace:
      HandleTrace(session, id, message.trace());
      return;
    case cluster::ClientMessage::BODY_NOT_SET:
      ReplyTo(session, id, absl::InvalidArgumentError("empty client message"));
      return;
  }
}

void CoordinatorServer::Impl::HandleScheduler(ClientSession& session,
                                              const std::shared_ptr<ClientSession>& shared,
                                              uint64_t id, cluster::SchedulerCall& call) {
  const IslandId island(call.island());
  IslandScheduler* scheduler = Scheduler(island);
  if (scheduler == nullptr) {
    ReplyTo(session, id, absl::NotFoundError(absl::StrCat("no scheduler for ", island.ToString())));
    return;
  }
  switch (call.call_case()) {
    case cluster::SchedulerCall::kRegisterProgram: {
      absl::StatusOr<std::shared_ptr<const ProgramPlan>> plan =
          wire::DecodePlan(call.register_program(), wire::FunctionMode::kSkip);
      absl::Status status = plan.status();
      if (status.ok() && !session.clients.contains((*plan)->client)) {
        status = absl::PermissionDeniedError(
            absl::StrCat((*plan)->client.ToString(), " is not a client of this connection"));
      }
      if (status.ok()) status = CheckOwned(session, (*plan)->id.value(), "program");
      if (status.ok()) {
        status = CheckProgramRoom(session.scheduler_programs.size(),
                                  options_.max_programs_per_connection, "with schedulers");
      }
      if (status.ok()) {
        for (HostId h : (*plan)->hosts) {
          if (Host(h) == nullptr) {
            status = absl::NotFoundError(absl::StrCat("plan names unknown ", h.ToString()));
            break;
          }
        }
      }
      if (status.ok()) status = scheduler->RegisterProgram(*plan);
      if (status.ok()) session.scheduler_programs.insert({island, (*plan)->id});
      ReplyTo(session, id, status);
      return;
    }
    case cluster::SchedulerCall::kUnregisterProgram: {
      const ProgramId program(call.unregister_program());
      if (session.scheduler_programs.erase({island, program}) > 0) {
        scheduler->UnregisterProgram(program);
      }
      return;
    }
    case cluster::SchedulerCall::kSubmitRuns: {
      std::vector<RunRequest> runs;
      std::vector<absl::Status> statuses(call.submit_runs().runs_size());
      std::vector<int> index;
      for (int i = 0; i < call.submit_runs().runs_size(); ++i) {
        absl::StatusOr<RunRequest> run = wire::DecodeRun(call.submit_runs().runs(i));
        statuses[i] = run.ok() ? CheckRun(session, *run) : run.status();
        if (statuses[i].ok()) {
          runs.push_back(*std::move(run));
          index.push_back(i);
        }
      }
      // Each accepted run's client hears when it was forwarded (its reads
      // and releases wait for that).
      std::vector<RunId> ids;
      for (const RunRequest& r : runs) ids.push_back(r.run);
      std::weak_ptr<ClientSession> weak = shared;
      const std::vector<absl::Status> submitted = scheduler->SubmitRuns(
          std::move(runs), [weak, ids](size_t k, const absl::Status& status) {
            std::shared_ptr<ClientSession> s = weak.lock();
            if (s == nullptr) return;
            cluster::ClientEvent event;
            event.mutable_forwarded()->add_runs(ids[k].value());
            wire::EncodeStatus(status, event.mutable_forwarded()->add_statuses());
            s->writer.Post(std::move(event));
          });
      for (size_t k = 0; k < index.size(); ++k) statuses[index[k]] = submitted[k];
      ReplyTo(session, id, absl::OkStatus(), [&](cluster::Reply& r) {
        for (const absl::Status& s : statuses) wire::EncodeStatus(s, r.mutable_statuses()->add_statuses());
      });
      return;
    }
    case cluster::SchedulerCall::kReleaseArrays: {
      const cluster::ReleaseThrough& r = call.release_arrays();
      const ClientId client(r.client());
      absl::Status status;
      if (!session.clients.contains(client)) {
        status = absl::PermissionDeniedError(
            absl::StrCat(client.ToString(), " is not a client of this connection"));
      }
      if (r.hosts_size() > limits::kMaxHostsPerRelease || r.arrays_size() > limits::kMaxReleaseBatch) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "a release names ", r.hosts_size(), " hosts and ", r.arrays_size(), " arrays (at most ",
            limits::kMaxHostsPerRelease, " and ", limits::kMaxReleaseBatch, ")"));
      }
      std::vector<ArrayId> arrays;
      for (int64_t a : r.arrays()) {
        if (status.ok()) status = CheckOwned(session, a, "array");
        arrays.push_back(ArrayId(a));
      }
      std::vector<HostId> hosts;
      for (int64_t h : r.hosts()) {
        RemoteHost* host = Host(HostId(h));
        if (host != nullptr && host->island() == island) hosts.push_back(HostId(h));
      }
      if (status.ok()) scheduler->ReleaseArrays(client, hosts, std::move(arrays));
      ReplyTo(session, id, status);
      return;
    }
    case cluster::SchedulerCall::CALL_NOT_SET:
      ReplyTo(session, id, absl::InvalidArgumentError("empty scheduler call"));
      return;
  }
}

void CoordinatorServer::Impl::HandleHostCall(ClientSession& session,
                                             const std::shared_ptr<ClientSession>& shared,
                                             uint64_t id, cluster::HostCall& call) {
  const HostId h(call.host());
  RemoteHost* host = Host(h);
  if (host == nullptr) {
    ReplyTo(session, id, absl::NotFoundError(absl::StrCat("unknown ", h.ToString())));
    return;
  }
  // A client names only its own ids.
  absl::Status status;
  switch (call.call_case()) {
    case cluster::HostCall::kRegisterProgram:
      status = CheckOwned(session, call.register_program().id(), "program");
      if (status.ok() && !session.clients.contains(ClientId(call.register_program().client()))) {
        status = absl::PermissionDeniedError("plan of another client");
      }
      if (status.ok()) {
        status = CheckProgramRoom(session.host_programs.size(),
                                  options_.max_programs_per_connection, "with hosts");
      }
      if (status.ok()) session.host_programs.insert({h, ProgramId(call.register_program().id())});
      break;
    case cluster::HostCall::kUnregisterProgram:
      status = CheckOwned(session, call.unregister_program(), "program");
      session.host_programs.erase({h, ProgramId(call.unregister_program())});
      break;
    case cluster::HostCall::kEnqueueRuns:
      for (const wire::Run& r : call.enqueue_runs().runs()) {
        absl::StatusOr<RunRequest> run = wire::DecodeRun(r);
        status = run.ok() ? CheckRun(session, *run) : run.status();
        if (!status.ok()) break;
      }
      break;
    case cluster::HostCall::kPutShard:
      status = CheckOwned(session, call.put_shard().array(), "array");
      if (status.ok() && !session.clients.contains(ClientId(call.put_shard().owner()))) {
        status = absl::PermissionDeniedError("put on behalf of another client");
      }
      break;
    case cluster::HostCall::kFetchShard:
      status = CheckOwned(session, call.fetch_shard().array(), "array");
      break;
    case cluster::HostCall::kAwaitShard:
      status = CheckOwned(session, call.await_shard().array(), "array");
      break;
    case cluster::HostCall::kAwaitShards:
      status = CheckOwned(session, call.await_shards().array(), "array");
      if (status.ok()) status = grpc_transport::CheckShardList(call.await_shards());
      break;
    case cluster::HostCall::kSaveShards:
      status = grpc_transport::CheckCheckpointCall(call.save_shards().folder(),
                                                   call.save_shards().pieces_size());
      for (const cluster::SavePiece& p : call.save_shards().pieces()) {
        if (!status.ok()) break;
        status = CheckOwned(session, p.array(), "array");
      }
      break;
    case cluster::HostCall::kRestoreShards:
      status = grpc_transport::CheckCheckpointCall(call.restore_shards().folder(),
                                                   call.restore_shards().shards_size());
      if (status.ok() && !session.clients.contains(ClientId(call.restore_shards().owner()))) {
        status = absl::PermissionDeniedError("restore on behalf of another client");
      }
      for (const cluster::RestoreShard& r : call.restore_shards().shards()) {
        if (!status.ok()) break;
        status = CheckOwned(session, r.array(), "array");
      }
      break;
    case cluster::HostCall::kReleaseArrays:
      for (int64_t a : call.release_arrays().arrays()) {
        status = CheckOwned(session, a, "array");
        if (!status.ok()) break;
      }
      break;
    case cluster::HostCall::kReleaseOwner:
      if (!session.clients.contains(ClientId(call.release_owner()))) {
        status = absl::PermissionDeniedError("release of another client's arrays");
      }
      break;
    case cluster::HostCall::kGetCounters:
      // Counters name no client's data; the per-client view does.
      if (call.by_client()) {
        status = absl::PermissionDeniedError(
            "per-client usage is read through the coordinator's metrics, not by clients");
      }
      break;
    case cluster::HostCall::kSetQuota:
      status = absl::PermissionDeniedError(
          "memory quotas are set by the coordinator (a client's share), not by clients");
      break;
    case cluster::HostCall::kTrace:
      status = absl::PermissionDeniedError(
          "hosts' traces are started and collected through the coordinator (a trace request), "
          "which hands a connection its own runs' events only");
      break;
    case cluster::HostCall::CALL_NOT_SET:
      status = absl::InvalidArgumentError("empty host call");
      break;
  }
  if (!status.ok()) {
    if (id != 0) {
      ReplyTo(session, id, status);
    } else {
      CW_LOG(kWarning) << "refused a client call: " << status;
    }
    return;
  }
  ReplyFn on_reply;
  if (id != 0) {
    on_reply = [shared, id](const cluster::Reply& reply) {
      cluster::ClientEvent event;
      *event.mutable_reply() = reply;
      event.mutable_reply()->set_id(id);
      shared->writer.Post(std::move(event));
    };
  }
  // A put is the one large message a client sends a worker: while the
  // worker's queue is long the client's reader waits, pushing back on the
  // client, rather than queueing without bound.
  if (call.call_case() == cluster::HostCall::kPutShard &&
      !host->AwaitBacklogBelow(kHostBacklogBytes, kHostBacklogWait)) {
    const absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
        "put refused: ", host->Name(), " has had more than ", kHostBacklogBytes >> 20,
        " MiB queued to it for ", absl::FormatDuration(kHostBacklogWait)));
    if (on_reply) on_reply(ErrorReply(full));
    return;
  }
  host->Forward(std::move(call), std::move(on_reply));
}

}  // namespace causeway
