// WorkerServer: one host of the distributed cluster, as run by
// `causeway worker`. Joins the coordinator over one long-lived
// bidirectional stream (hello, heartbeats and replies up; the host's calls
// and the peer table down), runs the host executor, device streams and
// object store, and serves the data plane to other workers.
#ifndef CAUSEWAY_CLUSTER_WORKER_SERVER_H_
#define CAUSEWAY_CLUSTER_WORKER_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/grpc/grpc_common.h"

namespace causeway {

class CollectiveHub;
class DataPlane;
struct ReassemblyStats;
class HostExecutor;
class TraceRecorder;

struct WorkerServerOptions {
  std::string coordinator;  // host:port
  int64_t island = 0;
  int devices = 4;
  int64_t memory_bytes = int64_t{1} << 30;
  // The kind of this worker's devices (backend::DeviceKind::name()), one
  // this process has (the cpu kind always).
  std::string device_kind = "cpu";
  // The data-plane server's address; port 0 picks a free one.
  std::string listen = "0.0.0.0:0";
  // The host name peers use to reach the data plane; empty: the address
  // the coordinator sees this worker connect from.
  std::string advertise;
  // The cluster's worker token (the coordinator's --worker-token). Empty:
  // CAUSEWAY_WORKER_TOKEN, then CAUSEWAY_TOKEN.
  std::string token;
  grpc_transport::TlsFiles tls;  // cert/key: data server; ca: channels
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration collective_timeout = absl::Seconds(60);
  // Allocations waiting on a full device with nothing freed for this long
  // fail with RESOURCE_EXHAUSTED.
  absl::Duration memory_stall_timeout = absl::Seconds(60);
  // A launch waits at most this long for its inputs at the head of its
  // device's queue (HostExecutorOptions::input_timeout).
  absl::Duration input_timeout = absl::Minutes(5);
  // How collectives between processes travel: "gloo" (Gloo's ring and
  // halving-doubling algorithms on connections of their own) or "grpc"
  // (every contribution to every process on the data plane). Empty: gloo
  // when this build has it and the data plane is not on TLS (Gloo's TCP
  // transport has neither TLS nor the token), grpc otherwise.
  std::string collectives;
  // With gloo: collectives moving fewer bytes take the data plane (lower
  // latency there on this kind of machine; docs/BENCHMARKS.md,
  // "Collectives"). Must be the same on every worker.
  int64_t gloo_from_bytes = int64_t{2} << 20;
  // Checkpoints are written and read only in folders under this one (an
  // absolute path every worker and client sees alike: one machine, or a
  // shared filesystem). Empty: this worker refuses checkpoint calls.
  std::string checkpoint_root;
};

// Whether this build has Gloo (libgloo-dev found at configure time).
bool HaveGloo();

// Thread-safe.
class WorkerServer {
 public:
  // Starts the data server, joins the coordinator and waits for its
  // welcome. UNAVAILABLE if the coordinator cannot be reached in time;
  // UNAUTHENTICATED / FAILED_PRECONDITION if it refuses the token or the
  // protocol version; INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options);
  ~WorkerServer();

  HostId host() const { return host_; }
  // The port its data-plane server listens on.
  int data_port() const;
  // What the data plane holds of payloads being reassembled from chunks.
  ReassemblyStats reassembly_stats() const;
  // Blocks until the coordinator ends the connection or Shutdown() is
  // called; returns why the worker stopped.
  absl::Status Wait();
  // Stops everything; pending work fails. Idempotent.
  void Shutdown();

 private:
  class Impl;
  explicit WorkerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  HostId host_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_WORKER_SERVER_H_
