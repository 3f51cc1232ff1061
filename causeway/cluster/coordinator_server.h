// CoordinatorServer: the coordinator of the distributed cluster, as run by
// `causeway coordinator`. Holds the resource manager and one island
// scheduler per island. Workers join over a long-lived bidirectional stream
// (Coordinator.Join) and are hosts from then on; clients connect over
// another (Coordinator.Connect) and reach schedulers and hosts through it.
// Calls from one client reach a host in the order the client made them:
// its runs (forwarded by the scheduler) and its host calls share the
// client's stream and the host's stream.
//
// Liveness: a worker that misses heartbeats for `heartbeat_timeout`, or
// whose connection breaks, is lost at once: its pending calls fail with
// UNAVAILABLE naming it, it leaves the topology, every other worker is told
// (their transfers and collectives waiting on it fail), and every client
// gets the new topology. A restarted worker joins as a new host. A client
// whose connection ends has its arrays and programs reclaimed everywhere.
#ifndef CAUSEWAY_CLUSTER_COORDINATOR_SERVER_H_
#define CAUSEWAY_CLUSTER_COORDINATOR_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/topology/topology.h"
#include "causeway/transport/grpc/grpc_common.h"

namespace causeway {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";  // port 0 picks a free one
  // Required: every client must present it. Empty: CAUSEWAY_TOKEN.
  std::string token;
  // What workers must present to join (and present to each other's data
  // planes), so that a client's token cannot join as a worker. Empty:
  // CAUSEWAY_WORKER_TOKEN; if that is empty too, workers use the client
  // token (one credential for both roles, with a warning).
  std::string worker_token;
  grpc_transport::TlsFiles tls;  // cert/key
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  // Handshake and idle timeouts, streams per connection, threads.
  grpc_transport::ServerLimits limits;
  // "HOST:PORT" (port 0: any free one) to serve Prometheus metrics on, in
  // the text format at GET /metrics (docs/DEPLOYMENT.md, "Metrics"); empty:
  // none. Plain HTTP, no token: bind it to an address only operators reach.
  std::string metrics_listen;
  // Replies a client connection may leave unread; beyond, the client is
  // deemed not to read and its connection is ended.
  size_t max_unread_client_bytes = size_t{1} << 30;
  // Programs one client connection may have registered at once, with
  // schedulers and with hosts (each); they are reclaimed when it ends.
  size_t max_programs_per_connection = 65536;
  // Workers report runs up a tree of this fanout, its root to the
  // coordinator (docs/SCHEDULING.md, "A tree of reporting hosts"); 0: every
  // worker to the coordinator.
  int report_fanout = 0;
};

// Thread-safe.
class CoordinatorServer {
 public:
  // INVALID_ARGUMENT without a token or with bad TLS files; UNAVAILABLE if
  // the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorOptions& options);
  ~CoordinatorServer();

  // host:port as bound.
  std::string address() const;
  // host:port of the metrics endpoint as bound; empty if none.
  std::string metrics_address() const;
  Topology topology() const;
  // Ends every stream and stops serving. Idempotent.
  void Shutdown();
  // Blocks until Shutdown().
  void Wait();

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_COORDINATOR_SERVER_H_
