// RemoteCluster: what a client connects to when the cluster runs as
// separate processes (`grpc://HOST:PORT`). It implements ClusterConnection
// over one long-lived bidirectional stream to the coordinator: the
// resource manager, every island scheduler and every host are reached
// through it, so calls keep the order in which they were made (the ordering
// contract of causeway/transport/services.h). Calls that return a status
// wait for the coordinator's reply (bounded by `timeout`); the others only
// queue a message. The topology is pushed by the coordinator on connect and
// whenever a host joins or is lost, so GetTopology() never makes a round
// trip.
#ifndef CAUSEWAY_CLUSTER_REMOTE_CLUSTER_H_
#define CAUSEWAY_CLUSTER_REMOTE_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "causeway/base/trace.h"
#include "causeway/transport/grpc/tls_files.h"
#include "causeway/transport/services.h"

namespace causeway {

struct RemoteClusterOptions {
  // "grpc://host:port" or "host:port".
  std::string address;
  // The cluster token; empty: CAUSEWAY_TOKEN.
  std::string token;
  // `ca` set (or CAUSEWAY_TLS_CA): connect over TLS, trusting that CA.
  grpc_transport::TlsFiles tls;
  // Bound on connecting and on every call that waits for a reply.
  absl::Duration timeout = absl::Seconds(30);
};

// Thread-safe.
class RemoteCluster final : public ClusterConnection {
 public:
  // UNAVAILABLE if the coordinator cannot be reached within the timeout;
  // UNAUTHENTICATED for a wrong token; FAILED_PRECONDITION for another
  // protocol version; INVALID_ARGUMENT for a malformed address.
  static absl::StatusOr<std::unique_ptr<RemoteCluster>> Connect(
      const RemoteClusterOptions& options);
  // Ends the stream: the coordinator reclaims every array of its clients.
  ~RemoteCluster() override;

  ResourceService* resources() override;
  SchedulerService* scheduler(IslandId island) override;
  HostService* host(HostId host) override;
  using ClusterConnection::SubmitRun;
  absl::Status SubmitRun(const RunRequest& run, const std::vector<IslandId>& islands,
                         std::function<void(const absl::Status&)> forwarded) override;
  void ReleaseArrays(ClientId client, const std::vector<HostId>& hosts,
                     std::vector<ArrayId> arrays) override;
  absl::Status SetClientShare(ClientId client, const ClientShare& share) override;
  // An operator's call: sets the share of any client of the cluster. Needs
  // a connection made with the workers' token (PERMISSION_DENIED
  // otherwise); NOT_FOUND for a client not connected.
  absl::Status AdminSetClientShare(ClientId client, const ClientShare& share);
  // An operator's call: cancels all the work of `client` (its held runs,
  // every host's queued and running launches; its memory is released) and
  // refuses its later runs. Needs the workers' token; NOT_FOUND if the
  // client is not connected.
  absl::Status AdminCancelClient(ClientId client);
  // An operator's call: the runs the coordinator's island schedulers
  // accounted after `since_ns` (its CLOCK_MONOTONIC; on one machine, every
  // process's), oldest first, at most 65,536 per call; `*more` says whether
  // later ones are waiting.
  struct AccountedRun {
    int64_t time_ns = 0;
    ClientId client;
    int64_t device_us = 0;
    int launches = 0;
  };
  absl::StatusOr<std::vector<AccountedRun>> AdminShareLog(int64_t since_ns, bool* more);
  void DropClient(ClientId client) override;

  // Blocks until the topology has at least `devices` devices.
  // DEADLINE_EXCEEDED after `timeout`; UNAVAILABLE if the connection ends.
  absl::Status WaitForDevices(int64_t devices, absl::Duration timeout);
  // Blocks until `done(topology)` holds (it runs under a lock: keep it
  // short). Errors as WaitForDevices.
  absl::Status WaitForTopology(const std::function<bool(const Topology&)>& done,
                               absl::Duration timeout);
  // UNAVAILABLE once the connection to the coordinator is gone.
  absl::Status status() const;

  // Tracing (docs/DEPLOYMENT.md, "Traces"). StartTrace: every host and
  // island scheduler records from when it returns, and this connection's
  // clients record the runs they submit. CollectTrace moves what the
  // cluster recorded of this connection's runs (no other connection's) into
  // trace(), on this process's clock, with the hosts' tracks named; call it
  // once the runs of interest finished. StopTrace ends this connection's
  // part (so does disconnecting): hosts stop recording when no connection
  // traces.
  absl::Status StartTrace();
  absl::Status CollectTrace();
  absl::Status StopTrace();
  TraceRecorder& trace() { return trace_; }
  TraceRecorder* client_trace() override { return &trace_; }

  class Impl;

 private:
  explicit RemoteCluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  TraceRecorder trace_{false};
};

// Strips "grpc://"; INVALID_ARGUMENT unless what remains is HOST:PORT.
absl::StatusOr<std::string> ParseGrpcAddress(const std::string& url);

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_REMOTE_CLUSTER_H_
