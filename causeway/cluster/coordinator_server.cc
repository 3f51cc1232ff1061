#include "causeway/cluster/coordinator_server.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/trace.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/metrics_http.h"
#include "causeway/cluster/remote_host.h"
#include "causeway/resource/resource_manager.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway {
namespace {

using grpc_transport::BatchWriter;
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

// One client connection (which may carry several clients). `clients` and
// `programs` belong to the connection's handler thread; the writer is
// thread-safe.
struct ClientSession {
  // Replies past `max_unread_bytes` unread end the connection (posts to a
  // client never wait: they come from threads that serve every client).
  ClientSession(grpc::ServerContext* context,
                grpc::ServerReaderWriter<cluster::ToClient, cluster::ClientBatch>* stream,
                size_t max_unread_bytes)
      : context(context),
        writer([stream](const cluster::ToClient& b) { return stream->Write(b); },
               grpc_transport::WriterLimit{max_unread_bytes, absl::ZeroDuration()}) {}
  // Valid while the session is in the coordinator's table.
  grpc::ServerContext* const context;
  BatchWriter<cluster::ToClient, cluster::ClientEvent> writer;
  std::set<ClientId> clients;
  // Programs registered through this connection, to unregister if it ends.
  std::set<std::pair<IslandId, ProgramId>> scheduler_programs;
  std::set<std::pair<HostId, ProgramId>> host_programs;
  // Authenticated with the workers' token: may change any client's share.
  bool operator_ = false;
  // Ended for not reading its replies (the monitor's; under the
  // coordinator's lock).
  bool cancelled = false;
  // Tracing its runs (TraceRequest START; the session's reader thread's).
  bool tracing = false;
};

}  // namespace

class CoordinatorServer::Impl final : public cluster::Coordinator::Service {
 public:
  explicit Impl(const CoordinatorOptions& options)
      : options_(options), resources_(Topology()) {}

  absl::Status Start();
  void Shutdown();
  void Wait() { stopped_.WaitForNotification(); }
  std::string address() const { return address_; }
  std::string metrics_address() const { return metrics_address_; }
  Topology topology() const { return resources_.GetTopology(); }

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<cluster::ToClient, cluster::ClientBatch>* stream) override;
  grpc::Status Join(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream) override;

 private:
  class PeerStream;
  RemoteHost* Host(HostId h) {
    MutexLock lock(&mu_);
    auto it = hosts_.find(h);
    return it == hosts_.end() ? nullptr : it->second.get();
  }
  IslandScheduler* Scheduler(IslandId island) {
    MutexLock lock(&mu_);
    auto it = schedulers_.find(island);
    return it == schedulers_.end() ? nullptr : it->second.get();
  }
  std::vector<std::shared_ptr<RemoteHost>> LiveHosts() {
    std::vector<std::shared_ptr<RemoteHost>> out;
    MutexLock lock(&mu_);
    for (auto& [id, h] : hosts_) {
      if (!h->lost()) out.push_back(h);
    }
    return out;
  }

  // The Prometheus text of GET /metrics; serves it if options_.metrics_listen.
  std::string Metrics();
  absl::Status StartMetrics();

  void BroadcastPeers();
  void BroadcastTopology();
  void HostLost(const std::shared_ptr<RemoteHost>& host, const std::string& reason);
  void MonitorLoop();

  void HandleClient(ClientSession& session, const std::shared_ptr<ClientSession>& shared,
                    cluster::ClientMessage& message);
  void HandleScheduler(ClientSession& session, const std::shared_ptr<ClientSession>& shared,
                       uint64_t id, cluster::SchedulerCall& call);
  void HandleHostCall(ClientSession& session, const std::shared_ptr<ClientSession>& shared,
                      uint64_t id, cluster::HostCall& call);
  void Reclaim(ClientSession& session);
  // Tracing (cluster::TraceRequest): a connection's runs' events from every
  // host and scheduler; hosts record while any connection traces.
  void HandleTrace(ClientSession& session, uint64_t id, const cluster::TraceRequest& request);
  // Starts or ends `session`'s part in tracing (no-op if already so).
  void SetTracing(ClientSession& session, bool on);
  // A client of a tracing connection came or went: record it, or not.
  void TraceClient(ClientId client, bool on);
  // REQUIRES: trace_switch_mu_. Tells the schedulers' recorder and every
  // host whose runs to record (none: stop), waiting for the hosts.
  void SwitchRecorders(const std::set<ClientId>& clients);
  // Records `client`'s share and applies it to every scheduler and host.
  absl::Status SetShare(ClientId client, const cluster::ClientShare& share);
  // A worker's reports of runs it finished, for its island's scheduler.
  void RunsDone(RemoteHost& host, const cluster::RunsDone& done);
  // Tells the client of `session`, if still connected, that `run` was
  // forwarded to its hosts (or why not).
  static std::function<void(const absl::Status&)> TellForwarded(
      const std::shared_ptr<ClientSession>& session, RunId run);
  static void ReplyTo(ClientSession& session, uint64_t id, const absl::Status& status,
                      const std::function<void(cluster::Reply&)>& fill = nullptr);
  static absl::Status CheckOwned(const ClientSession& session, int64_t id, absl::string_view what);
  static absl::Status CheckRun(const ClientSession& session, const RunRequest& run);

  const CoordinatorOptions options_;
  std::string token_;
  std::string worker_token_;
  std::string address_;
  grpc_transport::StartedServer server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::string metrics_address_;
  ResourceManager resources_;
  std::thread monitor_;
  Notification stop_;
  Notification stopped_;
  // Serialises submissions of runs that span islands.
  Mutex multi_island_mu_;

  // The island schedulers' tracks; recording while any session traces.
  TraceRecorder trace_{false, size_t{1} << 19};
  // Held across a session's start or stop of tracing, the count's change and
  // the switch of every recorder it implies (which waits for the hosts), so
  // that a start and a stop from two connections cannot interleave and leave
  // a tracing connection with nothing recording, and a START returns only
  // once the hosts record. Taken before mu_, never inside it.
  Mutex trace_switch_mu_;
  Mutex mu_;
  absl::flat_hash_map<HostId, std::shared_ptr<RemoteHost>> hosts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<IslandId, std::unique_ptr<IslandScheduler>> schedulers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ClientSession*, std::shared_ptr<ClientSession>> sessions_
      ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ServerContext*> contexts_ ABSL_GUARDED_BY(mu_);
  // Shares of connected clients that set one, for schedulers made later.
  absl::flat_hash_map<ClientId, ClientShare> shares_ ABSL_GUARDED_BY(mu_);
  // The latest runs accounted by the island schedulers, for operators
  // (`causeway bench tenancy --cluster` measures shares from them).
  struct Accounted {
    int64_t time_ns;
    ClientId client;
    int64_t device_us;
    int launches;
  };
  static constexpr size_t kShareLogSize = size_t{1} << 18;
  static constexpr int kShareLogReply = 1 << 16;
  Mutex log_mu_;
  std::deque<Accounted> share_log_ ABSL_GUARDED_BY(log_mu_);
  // Transport totals for clients: read from them, and sent to connections
  // that have ended (live ones are read from their writers).
  std::atomic<int64_t> client_bytes_in_{0};
  std::atomic<int64_t> client_messages_in_{0};
  grpc_transport::WriterStats ended_sessions_sent_ ABSL_GUARDED_BY(mu_);
  int64_t next_host_ ABSL_GUARDED_BY(mu_) = 0;
  // Lost hosts, oldest first: kept (so that workers and clients learn of the
  // loss and runs naming them fail clearly) up to kMaxLostHosts.
  static constexpr size_t kMaxLostHosts = 1024;
  std::deque<HostId> lost_order_ ABSL_GUARDED_BY(mu_);
  // Open Connect and Join streams per peer address.
  absl::flat_hash_map<std::string, int> streams_by_peer_ ABSL_GUARDED_BY(mu_);
  int64_t next_device_ ABSL_GUARDED_BY(mu_) = 0;
  // The clients of the connections tracing: only their runs are recorded.
  // Changed with trace_switch_mu_ held too.
  std::set<ClientId> traced_clients_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status CoordinatorServer::Impl::Start() {
  grpc_transport::ConfigureAbseilForGrpc();
  token_ = grpc_transport::TokenFromEnvironment(options_.token);
  if (token_.empty()) {
    return absl::InvalidArgumentError(
        "the coordinator needs a cluster token (--token or CAUSEWAY_TOKEN)");
  }
  CW_RETURN_IF_ERROR(CheckReportFanout(options_.report_fanout));
  worker_token_ = options_.worker_token;
  if (const char* env = std::getenv("CAUSEWAY_WORKER_TOKEN"); worker_token_.empty() && env) {
    worker_token_ = env;
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

namespace {

// One Prometheus metric family: HELP, TYPE, then its samples.
class Family {
 public:
  Family(std::string name, const char* type, const char* help)
      : name_(std::move(name)) {
    absl::StrAppend(&text_, "# HELP ", name_, " ", help, "\n# TYPE ", name_, " ", type, "\n");
  }
  void Add(const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    absl::StrAppend(&text_, name_);
    if (!labels.empty()) {
      absl::StrAppend(&text_, "{");
      for (size_t i = 0; i < labels.size(); ++i) {
        absl::StrAppend(&text_, i > 0 ? "," : "", labels[i].first, "=\"", labels[i].second, "\"");
      }
      absl::StrAppend(&text_, "}");
    }
    // Counts and byte sizes exactly; fractions with 9 significant digits.
    if (std::floor(value) == value && std::fabs(value) < 9e15) {
      absl::StrAppend(&text_, " ", static_cast<int64_t>(value), "\n");
    } else {
      absl::StrAppend(&text_, " ", absl::StrFormat("%.9g", value), "\n");
    }
    ++samples_;
  }
  void AppendTo(std::string* out) const {
    if (samples_ > 0) absl::StrAppend(out, text_);
  }

 private:
  std::string name_;
  std::string text_;
  int samples_ = 0;
};

}  // namespace

std::string CoordinatorServer::Impl::Metrics() {
  const Topology topology = resources_.GetTopology();
  const std::vector<std::shared_ptr<RemoteHost>> hosts = LiveHosts();
  std::vector<std::pair<IslandId, IslandScheduler*>> schedulers;
  int64_t sessions = 0;
  grpc_transport::WriterStats to_clients;
  {
    MutexLock lock(&mu_);
    for (const auto& [island, s] : schedulers_) schedulers.emplace_back(island, s.get());
    sessions = static_cast<int64_t>(sessions_.size());
    to_clients = ended_sessions_sent_;
    for (const auto& [p, s] : sessions_) {
      const grpc_transport::WriterStats w = s->writer.stats();
      to_clients.bytes += w.bytes;
      to_clients.messages += w.messages;
      to_clients.queued_bytes += w.queued_bytes;
    }
  }
  Family islands("causeway_islands", "gauge", "Islands with at least one host.");
  islands.Add({}, static_cast<double>(topology.islands().size()));
  Family host_count("causeway_hosts", "gauge", "Hosts (worker processes) in the cluster.");
  host_count.Add({}, static_cast<double>(hosts.size()));
  Family devices("causeway_devices", "gauge", "Devices in the cluster.");
  devices.Add({}, topology.num_devices());
  Family connections("causeway_client_connections", "gauge", "Client connections open.");
  connections.Add({}, static_cast<double>(sessions));
  // The listener's account of TCP connections (plaintext servers; a TLS
  // server's connections are gRPC's own and not counted here).
  Family tcp_open("causeway_tcp_connections", "gauge", "TCP connections open.");
  Family tcp_accepted("causeway_tcp_connections_accepted_total", "counter",
                      "TCP connections admitted (handed to the server once they send).");
  Family tcp_silent("causeway_tcp_connections_closed_silent_total", "counter",
                    "Admitted TCP connections closed for sending nothing within the handshake "
                    "timeout.");
  Family tcp_refused("causeway_tcp_connections_refused_total", "counter",
                     "TCP connections closed on arrival, by reason.");
  Family bytes_total("causeway_transport_bytes_total", "counter",
                     "Message bytes the coordinator sent to and read from clients and each worker.");
  Family messages_total("causeway_transport_messages_total", "counter",
                        "Messages the coordinator sent to and read from clients and each worker.");
  Family unread("causeway_client_unread_bytes", "gauge",
                "Replies queued for clients and not yet written to them.");
  bytes_total.Add({{"peer", "clients"}, {"direction", "sent"}},
                  static_cast<double>(to_clients.bytes));
  bytes_total.Add({{"peer", "clients"}, {"direction", "received"}},
                  static_cast<double>(client_bytes_in_.load()));
  messages_total.Add({{"peer", "clients"}, {"direction", "sent"}},
                     static_cast<double>(to_clients.messages));
  messages_total.Add({{"peer", "clients"}, {"direction", "received"}},
                     static_cast<double>(client_messages_in_.load()));
  unread.Add({}, static_cast<double>(to_clients.queued_bytes));
  if (server_.listener != nullptr) {
    const grpc_transport::ListenerStats l = server_.listener->stats();
    tcp_open.Add({}, static_cast<double>(l.open));
    tcp_accepted.Add({}, static_cast<double>(l.accepted));
    tcp_refused.Add({{"reason", "peer_limit"}}, static_cast<double>(l.refused_peer));
    tcp_refused.Add({{"reason", "server_limit"}}, static_cast<double>(l.refused_total));
    tcp_refused.Add({{"reason", "no_file_descriptors"}}, static_cast<double>(l.shed_no_files));
    tcp_silent.Add({}, static_cast<double>(l.closed_silent));
  }

  // Every host's device counters, asked at once, each answer awaited until
  // one shared deadline: a host that does not answer is reported down.
  std::vector<Future<std::vector<DeviceCounters>>> asked;
  for (const auto& h : hosts) asked.push_back(h->GetCounters(/*reset=*/false));
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  Family up("causeway_host_up", "gauge", "1 if the host answered this scrape in time.");
  Family send_queue("causeway_host_send_queue_bytes", "gauge",
                    "Messages queued for the host and not yet written to its stream.");
  // Launch and busy counters restart from zero when a client measuring its
  // own run resets them (`causeway demo`, `train lm`): gauges, not counters.
  Family launches("causeway_device_launches", "gauge",
                  "Launches the device finished since its counters were last reset.");
  Family failed("causeway_device_failed_launches", "gauge",
                "Launches that failed since the device's counters were last reset.");
  Family busy("causeway_device_busy_seconds", "gauge",
              "Time the device spent in launches since its counters were last reset, collective "
              "waits included: an upper bound on compute time, not a measure of useful work.");
  Family collective("causeway_device_collective_seconds", "gauge",
                    "Of the busy time, the time inside collectives: waiting for peers and "
                    "exchanging data.");
  Family compute("causeway_device_compute_seconds", "gauge",
                 "Busy time outside collectives: the device's own computation since its "
                 "counters were last reset.");
  Family queued_launches("causeway_device_queued_launches", "gauge",
                         "Launches waiting in the device's queue.");
  Family in_use("causeway_device_memory_in_use_bytes", "gauge", "Device memory in use.");
  Family peak("causeway_device_memory_peak_bytes", "gauge", "Most device memory ever in use.");
  Family capacity("causeway_device_memory_capacity_bytes", "gauge", "Device memory in all.");
  Family client_memory("causeway_client_memory_bytes", "gauge",
                       "Device memory granted to the client's arrays and running launches.");
  Family client_waiting("causeway_client_memory_waiting_bytes", "gauge",
                        "Device memory the client asked for and has not been granted yet "
                        "(over its quota, or the device full).");
  Family client_arrays("causeway_client_arrays", "gauge",
                       "The client's arrays with a shard on the device.");
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string island = absl::StrCat(hosts[i]->island().value());
    const std::string host = absl::StrCat(hosts[i]->id().value());
    const absl::StatusOr<std::vector<DeviceCounters>>* c =
        asked[i].AwaitWithTimeout(std::max(absl::ZeroDuration(), deadline - absl::Now()));
    const bool answered = c != nullptr && c->ok();
    up.Add({{"island", island}, {"host", host}}, answered ? 1 : 0);
    const grpc_transport::WriterStats sent = hosts[i]->sent();
    const auto [received_bytes, received_messages] = hosts[i]->received();
    send_queue.Add({{"island", island}, {"host", host}}, static_cast<double>(sent.queued_bytes));
    const std::string peer = absl::StrCat("host ", host);
    bytes_total.Add({{"peer", peer}, {"direction", "sent"}}, static_cast<double>(sent.bytes));
    bytes_total.Add({{"peer", peer}, {"direction", "received"}},
                    static_cast<double>(received_bytes));
    messages_total.Add({{"peer", peer}, {"direction", "sent"}},
                       static_cast<double>(sent.messages));
    messages_total.Add({{"peer", peer}, {"direction", "received"}},
                       static_cast<double>(received_messages));
    if (!answered) continue;
    for (const DeviceCounters& d : **c) {
      const std::vector<std::pair<const char*, std::string>> labels = {
          {"island", island}, {"host", host}, {"device", absl::StrCat(d.device.value())}};
      launches.Add(labels, static_cast<double>(d.launches));
      failed.Add(labels, static_cast<double>(d.failed));
      busy.Add(labels, static_cast<double>(d.busy_us) / 1e6);
      collective.Add(labels, static_cast<double>(d.busy_us - d.compute_us()) / 1e6);
      compute.Add(labels, static_cast<double>(d.compute_us()) / 1e6);
      queued_launches.Add(labels, static_cast<double>(d.queued));
      in_use.Add(labels, static_cast<double>(d.memory_in_use));
      peak.Add(labels, static_cast<double>(d.memory_peak));
      if (absl::StatusOr<DeviceInfo> info = topology.device(d.device); info.ok()) {
        capacity.Add(labels, static_cast<double>(info->memory_bytes));
      }
      for (const ClientUsage& u : d.clients) {
        std::vector<std::pair<const char*, std::string>> by_client = labels;
        by_client.emplace_back("client", absl::StrCat(u.client.value()));
        client_memory.Add(by_client, static_cast<double>(u.memory_bytes));
        client_waiting.Add(by_client, static_cast<double>(u.waiting_bytes));
        client_arrays.Add(by_client, static_cast<double>(u.arrays));
      }
    }
  }

  Family forwarded("causeway_client_runs_forwarded_total", "counter",
                   "Runs of the client the island's scheduler forwarded to its hosts.");
  Family finished("causeway_client_runs_finished_total", "counter",
                  "Runs of the client every host of the island reported done.");
  Family device_s("causeway_client_device_seconds_total", "counter",
                  "Device time of the client's finished runs, as the hosts measured it.");
  Family charged_s("causeway_client_charged_device_seconds_total", "counter",
                   "Device time the scheduler charged the client's share (outliers clipped).");
  Family queued("causeway_client_queued", "gauge", "Runs and releases the scheduler holds.");
  Family weight("causeway_client_weight", "gauge", "The client's weight on the island.");
  for (const auto& [island, s] : schedulers) {
    for (const auto& [client, st] : s->all_client_stats()) {
      const std::vector<std::pair<const char*, std::string>> labels = {
          {"island", absl::StrCat(island.value())}, {"client", absl::StrCat(client.value())}};
      forwarded.Add(labels, static_cast<double>(st.forwarded));
      finished.Add(labels, static_cast<double>(st.finished));
      device_s.Add(labels, static_cast<double>(st.device_us) / 1e6);
      charged_s.Add(labels, static_cast<double>(st.charged_us) / 1e6);
      queued.Add(labels, static_cast<double>(st.queued));
      weight.Add(labels, st.share.weight);
    }
  }
  std::string out;
  for (const Family* f : {&islands, &host_count, &devices, &connections, &tcp_open, &tcp_accepted,
                          &tcp_refused, &tcp_silent, &bytes_total, &messages_total, &unread, &up,
                          &send_queue, &launches, &failed,
                          &busy, &collective, &compute, &queued_launches, &in_use, &peak, &capacity, &client_memory,
                          &client_waiting, &client_arrays, &forwarded, &finished, &device_s,
                          &charged_s, &queued, &weight}) {
    f->AppendTo(&out);
  }
  return out;
}

absl::Status CoordinatorServer::Impl::StartMetrics() {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  const std::string& l = options_.metrics_listen;
  const size_t colon = l.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(l.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("the metrics address ", l, " is not HOST:PORT (port 0..65535)"));
  }
  const std::string host = l.substr(0, colon);
  CW_ASSIGN_OR_RETURN(metrics_,
                      MetricsHttpServer::Start(host, port, [this] { return Metrics(); }));
  metrics_address_ = absl::StrCat(host, ":", metrics_->port());
  return absl::OkStatus();
}

void CoordinatorServer::Impl::MonitorLoop() {
  const absl::Duration period =
      std::max(absl::Milliseconds(50), options_.heartbeat_timeout / 4);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const absl::Time now = absl::Now();
    for (const auto& h : LiveHosts()) {
      const absl::Duration silent = now - h->last_seen();
      if (silent > options_.heartbeat_timeout) {
        h->Cancel(absl::StrCat("no heartbeat for ", absl::FormatDuration(silent)));
      } else if (h->overflowed()) {
        h->Cancel(absl::StrCat("it fell more than ", RemoteHost::kMaxBacklogBytes >> 20,
                               " MiB behind reading its stream"));
      }
    }
    // A client with more replies unread than its bound: its writer gave up,
    // and its connection ends here (not on the thread that posted, which
    // may hold locks that serve every client).
    MutexLock lock(&mu_);
    for (auto& [p, s] : sessions_) {
      if (s->writer.overflowed() && !s->cancelled) {
        s->cancelled = true;
        CW_LOG(kWarning) << "ending a client connection: more than "
                         << (options_.max_unread_client_bytes >> 20)
                         << " MiB of its replies unread";
        s->context->TryCancel();
      }
    }
  }
}

void CoordinatorServer::Impl::BroadcastPeers() {
  cluster::ToWorker m;
  std::vector<std::shared_ptr<RemoteHost>> live;
  {
    MutexLock lock(&mu_);
    cluster::PeerTable& table = *m.mutable_peers();
    for (auto& [id, h] : hosts_) {
      cluster::Peer& p = *table.add_peers();
      p.set_host(id.value());
      p.set_island(h->island().value());
      p.set_data_address(h->address());
      for (DeviceId d : h->devices()) p.add_devices(d.value());
      const absl::Status lost = h->lost_status();
      p.set_lost(!lost.ok());
      p.set_lost_reason(std::string(lost.message()));
      if (lost.ok()) live.push_back(h);
    }
  }
  for (auto& h : live) h->Send(m);
}

void CoordinatorServer::Impl::BroadcastTopology() {
  cluster::ClientEvent event;
  wire::EncodeTopology(resources_.GetTopology(), event.mutable_topology());
  MutexLock lock(&mu_);
  for (auto& [p, s] : sessions_) s->writer.Post(event);
}

void CoordinatorServer::Impl::HostLost(const std::shared_ptr<RemoteHost>& host,
                                       const std::string& reason) {
  const absl::Status status =
      absl::UnavailableError(absl::StrCat(host->Name(), " lost: ", reason));
  host->Lose(status);
  resources_.RemoveHost(host->id(), std::string(status.message())).IgnoreError();
  if (IslandScheduler* s = Scheduler(host->island())) s->HostLost(host->id());
  {
    MutexLock lock(&mu_);
    lost_order_.push_back(host->id());
    while (lost_order_.size() > kMaxLostHosts) {
      hosts_.erase(lost_order_.front());
      lost_order_.pop_front();
    }
  }
  CW_LOG(kWarning) << status.message();
  BroadcastPeers();
  BroadcastTopology();
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
  {
    MutexLock lock(&mu_);
    if (shut_down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator stopping");
    const HostId id(next_host_++);
    std::vector<DeviceId> devices;
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
    resources_.AddHost(id, island, devices, hello.memory_bytes(), device_kind,
                       {hello.device_descriptions().begin(), hello.device_descriptions().end()});
    if (!schedulers_.contains(island)) {
      IslandSchedulerOptions so;
      so.island = island;
      so.policy = SchedulingPolicy::kProportionalShare;
      so.report_fanout = options_.report_fanout;
      so.trace = &trace_;
      so.on_run_accounted = [this](ClientId client, int64_t device_us, int launches) {
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        MutexLock lock(&log_mu_);
        share_log_.push_back(
            Accounted{int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec, client, device_us,
                      launches});
        if (share_log_.size() > kShareLogSize) share_log_.pop_front();
      };
      // Only this island's live hosts: a plan that places island work on a
      // host of another island is refused at registration, and a run that
      // needs a lost host is refused rather than half-run on the survivors.
      so.host_lookup = [this, island](HostId h) -> HostService* {
        RemoteHost* host = Host(h);
        return host != nullptr && host->island() == island && !host->lost() ? host : nullptr;
      };
      auto scheduler = std::make_unique<IslandScheduler>(std::move(so));
      for (const auto& [client, share] : shares_) scheduler->SetShare(client, share);
      schedulers_[island] = std::move(scheduler);
    }
    // Quotas of clients already connected hold on the new host too.
    for (const auto& [client, share] : shares_) {
      if (share.memory_quota_bytes > 0) host->SetMemoryQuota(client, share.memory_quota_bytes);
    }
    // So does a trace in progress.
    if (!traced_clients_.empty()) {
      cluster::TraceCall start;
      start.set_enable(true);
      for (ClientId c : traced_clients_) start.add_record_clients(c.value());
      host->Trace(start);
    }
  }
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
  wire::EncodeTopology(resources_.GetTopology(), hello.mutable_topology());
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

void CoordinatorServer::Impl::Reclaim(ClientSession& session) {
  for (const auto& [island, program] : session.scheduler_programs) {
    if (IslandScheduler* s = Scheduler(island)) s->UnregisterProgram(program);
  }
  for (const auto& [h, program] : session.host_programs) {
    if (RemoteHost* host = Host(h)) host->UnregisterProgram(program);
  }
  std::vector<IslandScheduler*> schedulers;
  {
    MutexLock lock(&mu_);
    for (auto& [island, s] : schedulers_) schedulers.push_back(s.get());
    for (ClientId c : session.clients) shares_.erase(c);
  }
  // Held runs never reach a host; then everything the clients own goes.
  for (ClientId c : session.clients) {
    for (IslandScheduler* s : schedulers) s->DropClient(c);
  }
  const std::vector<std::shared_ptr<RemoteHost>> live = LiveHosts();
  for (ClientId c : session.clients) {
    for (const auto& h : live) h->ReleaseOwner(c);
    resources_.UnregisterClient(c);
  }
  session.clients.clear();
}

absl::Status CoordinatorServer::Impl::SetShare(ClientId client, const cluster::ClientShare& wire) {
  const ClientShare share{wire.weight(), wire.priority(), wire.memory_quota_bytes()};
  CW_RETURN_IF_ERROR(CheckClientShare(share));
  std::vector<IslandScheduler*> schedulers;
  {
    MutexLock lock(&mu_);
    shares_[client] = share;
    for (auto& [island, s] : schedulers_) schedulers.push_back(s.get());
  }
  for (IslandScheduler* s : schedulers) s->SetShare(client, share);
  for (const auto& h : LiveHosts()) h->SetMemoryQuota(client, share.memory_quota_bytes);
  return absl::OkStatus();
}

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
      absl::StatusOr<ClientId> client = resources_.RegisterClient();
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
        resources_.UnregisterClient(client);
        // Its share goes with it (else a connection that makes and ends
        // many clients would grow this table without bound).
        MutexLock lock(&mu_);
        shares_.erase(client);
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
          request.ok() ? resources_.AllocateMesh(client, *request) : request.status();
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
        std::vector<IslandScheduler*> schedulers;
        for (int64_t i : message.submit_run().islands()) {
          islands.push_back(IslandId(i));
          schedulers.push_back(Scheduler(IslandId(i)));
        }
        MutexLock lock(&multi_island_mu_);
        status = SubmitToIslands(*run, islands, schedulers, TellForwarded(shared, run->run));
      }
      ReplyTo(session, id, status);
      return;
    }
    case cluster::ClientMessage::kDropClient: {
      const ClientId client(message.drop_client());
      if (!session.clients.contains(client)) return;
      std::vector<IslandScheduler*> schedulers;
      {
        MutexLock lock(&mu_);
        for (auto& [island, s] : schedulers_) schedulers.push_back(s.get());
      }
      for (IslandScheduler* s : schedulers) s->DropClient(client);
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
      } else if (!resources_.HasClient(client)) {
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
    case cluster::HostCall::kDriveSpmd: {
      const cluster::SpmdLoop& l = call.drive_spmd();
      status = CheckOwned(session, l.program(), "program");
      // Every id the loop will make (id_base + first .. id_base + first +
      // count - 1) must be this client's: the ids of one client are one
      // contiguous range, so checking both ends checks them all.
      if (status.ok()) status = CheckSpmdLoopRange(l.id_base(), l.first(), l.count());
      if (status.ok()) status = CheckOwned(session, l.id_base() + l.first(), "run");
      if (status.ok()) status = CheckOwned(session, l.id_base() + l.first() + l.count() - 1, "run");
      if (status.ok() && l.first() > 0) {
        status = CheckOwned(session, l.id_base() + l.first() - 1, "array");
      }
      if (status.ok()) status = CheckOwned(session, l.input(), "array");
      if (status.ok() && !session.clients.contains(ClientId(l.client()))) {
        status = absl::PermissionDeniedError("a loop on behalf of another client");
      }
      break;
    }
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
