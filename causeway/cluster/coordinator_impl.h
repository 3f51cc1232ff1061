// The coordinator's implementation (CoordinatorServer::Impl), shared by the
// files that implement it, one per job: coordinator_server.cc (start, stop,
// the workers' and clients' streams), coordinator_liveness.cc (heartbeats,
// lost hosts, what every peer is told), coordinator_sessions.cc (a client
// connection's calls to schedulers and hosts, its reclaim), coordinator_traces.cc
// (tracing) and coordinator_metrics.cc (GET /metrics). Private to
// causeway/cluster: nothing outside it includes this header.
#ifndef CAUSEWAY_CLUSTER_COORDINATOR_IMPL_H_
#define CAUSEWAY_CLUSTER_COORDINATOR_IMPL_H_

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
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "causeway/base/check.h"
#include "causeway/base/clock.h"
#include "causeway/base/trace.h"
#include "causeway/base/limits.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"
#include "causeway/cluster/metrics_http.h"
#include "causeway/cluster/remote_host.h"
#include "causeway/control/control_plane.h"
#include "causeway/scheduler/island_scheduler.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/cluster_codec.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway {
namespace coordinator_internal {

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
  grpc_transport::BatchWriter<cluster::ToClient, cluster::ClientEvent> writer;
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

}  // namespace coordinator_internal

class CoordinatorServer::Impl final : public cluster::Coordinator::Service {
 public:
  explicit Impl(const CoordinatorOptions& options)
      : options_(options), control_(Topology(), ControlOptions()) {}

  absl::Status Start();
  void Shutdown();
  void Wait() { stopped_.WaitForNotification(); }
  std::string address() const { return address_; }
  std::string metrics_address() const { return metrics_address_; }
  Topology topology() const { return control_.resources().GetTopology(); }

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<cluster::ToClient, cluster::ClientBatch>* stream) override;
  grpc::Status Join(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<cluster::ToWorkerBatch, cluster::WorkerBatch>* stream) override;

 private:
  using ClientSession = coordinator_internal::ClientSession;
  class PeerStream;
  RemoteHost* Host(HostId h) {
    MutexLock lock(&mu_);
    auto it = hosts_.find(h);
    return it == hosts_.end() ? nullptr : it->second.get();
  }
  IslandScheduler* Scheduler(IslandId island) { return control_.scheduler(island); }
  // The island schedulers' options, how they reach hosts and quotas.
  ControlPlaneOptions ControlOptions();
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
  absl::Status CheckRun(const ClientSession& session, const RunRequest& run);

  const CoordinatorOptions options_;
  std::string token_;
  std::string worker_token_;
  std::string address_;
  grpc_transport::StartedServer server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  std::string metrics_address_;
  std::thread monitor_;
  Notification stop_;
  Notification stopped_;

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
  absl::flat_hash_map<ClientSession*, std::shared_ptr<ClientSession>> sessions_
      ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ServerContext*> contexts_ ABSL_GUARDED_BY(mu_);
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
  // Clients whose work an operator cancelled (`causeway cluster cancel`):
  // their later runs are refused. An entry goes with its client's session.
  Mutex cancelled_mu_;
  absl::flat_hash_set<ClientId> cancelled_ ABSL_GUARDED_BY(cancelled_mu_);
  // Resources, island schedulers (one per island with a host), shares.
  // Last: its schedulers reach hosts_ (under mu_), trace_ and share_log_.
  ControlPlane control_;
};


}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_COORDINATOR_IMPL_H_
