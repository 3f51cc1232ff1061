#include "causeway/cluster/coordinator_impl.h"

namespace causeway {

namespace {
// Waits for every answer until one shared deadline; the unanswered are
// DEADLINE_EXCEEDED.
template <typename T>
std::vector<absl::StatusOr<T>> AwaitAll(const std::vector<std::shared_ptr<RemoteHost>>& hosts,
                                        const std::vector<Future<T>>& asked,
                                        absl::Time deadline) {
  std::vector<absl::StatusOr<T>> out;
  for (size_t i = 0; i < asked.size(); ++i) {
    const absl::StatusOr<T>* r =
        asked[i].AwaitWithTimeout(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (r == nullptr) {
      out.push_back(absl::DeadlineExceededError(
          absl::StrCat(hosts[i]->Name(), " did not answer the trace request in time")));
    } else {
      out.push_back(*r);
    }
  }
  return out;
}
}  // namespace

void CoordinatorServer::Impl::SwitchRecorders(const std::set<ClientId>& clients) {
  const std::vector<ClientId> list(clients.begin(), clients.end());
  trace_.SetClients(list);
  trace_.SetEnabled(!list.empty());
  if (list.empty()) trace_.Clear();
  cluster::TraceCall call;
  call.set_enable(!list.empty());
  for (ClientId c : list) call.add_record_clients(c.value());
  const std::vector<std::shared_ptr<RemoteHost>> hosts = LiveHosts();
  std::vector<Future<cluster::Reply>> asked;
  for (const auto& h : hosts) asked.push_back(h->Trace(call));
  // Switched once every host answered (or 10 s passed): what the clients
  // run next is recorded everywhere.
  AwaitAll(hosts, asked, absl::Now() + absl::Seconds(10));
}

void CoordinatorServer::Impl::SetTracing(ClientSession& session, bool on) {
  MutexLock switching(&trace_switch_mu_);
  if (session.tracing == on) return;
  session.tracing = on;
  std::set<ClientId> now;
  {
    MutexLock lock(&mu_);
    for (ClientId c : session.clients) {
      if (on) {
        traced_clients_.insert(c);
      } else {
        traced_clients_.erase(c);
      }
    }
    now = traced_clients_;
  }
  SwitchRecorders(now);
}

void CoordinatorServer::Impl::TraceClient(ClientId client, bool on) {
  MutexLock switching(&trace_switch_mu_);
  std::set<ClientId> now;
  {
    MutexLock lock(&mu_);
    if (on ? !traced_clients_.insert(client).second : traced_clients_.erase(client) == 0) return;
    now = traced_clients_;
  }
  SwitchRecorders(now);
}

void CoordinatorServer::Impl::HandleTrace(ClientSession& session, uint64_t id,
                                          const cluster::TraceRequest& request) {
  switch (request.op()) {
    case cluster::TraceRequest::START:
      SetTracing(session, true);
      ReplyTo(session, id, absl::OkStatus());
      return;
    case cluster::TraceRequest::STOP:
      SetTracing(session, false);
      ReplyTo(session, id, absl::OkStatus());
      return;
    case cluster::TraceRequest::COLLECT:
      break;
    default:
      ReplyTo(session, id, absl::InvalidArgumentError(
                               absl::StrCat("unknown trace request ", request.op())));
      return;
  }
  if (!session.tracing) {
    ReplyTo(session, id, absl::FailedPreconditionError("no trace was started on this connection"));
    return;
  }
  // This connection's runs' events from every host, each moved onto this
  // clock, and the schedulers' own: a round asks each host for at most
  // kPerHost, and all of them for about kPerRound (names are at most
  // kMaxTraceName bytes: a reply stays within tens of MiB).
  const std::vector<std::shared_ptr<RemoteHost>> hosts = LiveHosts();
  constexpr int kPerRound = 1 << 16;
  const int kPerHost =
      std::clamp(kPerRound / std::max<int>(1, static_cast<int>(hosts.size())), 256, 1 << 14);
  const std::vector<ClientId> clients(session.clients.begin(), session.clients.end());
  cluster::TraceCall call;
  call.set_collect(true);
  call.set_max_events(kPerHost);
  for (ClientId c : clients) call.add_clients(c.value());
  // Each answer with the time it arrived.
  using Timed = std::pair<cluster::Reply, int64_t>;
  std::vector<Future<Timed>> asked;
  std::vector<int64_t> asked_us;
  for (const auto& h : hosts) {
    asked_us.push_back(Clock::Real()->NowMicros());
    asked.push_back(h->Trace(call).Then(
        [](const absl::StatusOr<cluster::Reply>& r) -> absl::StatusOr<Timed> {
          if (!r.ok()) return r.status();
          return Timed{*r, Clock::Real()->NowMicros()};
        }));
  }
  const std::vector<absl::StatusOr<Timed>> answers =
      AwaitAll(hosts, asked, absl::Now() + absl::Seconds(10));
  cluster::TraceEvents out;
  bool more = false;
  int64_t dropped = trace_.dropped();
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (!answers[i].ok()) {
      CW_LOG(kWarning) << "trace collection: " << answers[i].status();
      continue;
    }
    const cluster::TraceEvents& got = answers[i]->first.trace();
    absl::StatusOr<std::vector<TraceEvent>> events = grpc_transport::DecodeTraceEvents(
        got, grpc_transport::ClockShift(asked_us[i], answers[i]->second, got.now_us()), &dropped);
    if (!events.ok()) {
      CW_LOG(kWarning) << hosts[i]->Name() << " sent a malformed trace: " << events.status();
      continue;
    }
    int taken = 0;
    for (TraceEvent& e : *events) {
      // A host speaks for itself only, of this connection's runs only, and
      // of no more events than asked.
      if (e.host != hosts[i]->id() || IsSchedulerEvent(e.kind) || IsClientEvent(e.kind) ||
          !session.clients.contains(OwnerOfId(e.run.value())) || taken == kPerHost) {
        ++dropped;
        continue;
      }
      ++taken;
      grpc_transport::EncodeTraceEvent(e, out.add_events());
    }
    more = more || got.more();
    dropped += std::clamp<int64_t>(got.dropped(), 0, int64_t{1} << 40);
  }
  bool scheduler_more = false;
  for (const TraceEvent& e : trace_.Take(clients, kPerHost, &scheduler_more)) {
    grpc_transport::EncodeTraceEvent(e, out.add_events());
  }
  out.set_more(more || scheduler_more);
  out.set_dropped(dropped);
  out.set_now_us(Clock::Real()->NowMicros());
  ReplyTo(session, id, absl::OkStatus(), [&](cluster::Reply& r) { *r.mutable_trace() = std::move(out); });
}

}  // namespace causeway
