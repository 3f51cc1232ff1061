// DataPlane: a worker's side of the data plane of the distributed cluster.
// It moves reshard pieces and collective contributions to other workers on
// one long-lived gRPC stream per peer (chunked; HTTP/2 flow control makes
// a sender wait when its peer falls behind), receives theirs (DataService),
// and keeps the peer table the coordinator sends: every host's data address
// and devices, and which hosts are lost. Pieces for this host never touch
// the network.
#ifndef CAUSEWAY_CLUSTER_DATA_PLANE_H_
#define CAUSEWAY_CLUSTER_DATA_PLANE_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/grpc/cluster.grpc.pb.h"
#include "causeway/transport/grpc/grpc_common.h"
#include "causeway/transport/services.h"
#include "causeway/worker/collective_hub.h"
#include "causeway/worker/host_executor.h"

namespace causeway {

// Payloads are sent in chunks of at most this many bytes.
inline constexpr int64_t kDataChunkBytes = int64_t{1} << 20;

// Thread-safe.
class DataPlane final : public DataTransport, public CollectivePeers {
 public:
  DataPlane(std::string token, std::shared_ptr<grpc::ChannelCredentials> creds);
  ~DataPlane() override;

  // This worker's host id, and where received pieces and contributions go.
  // Must be set before any peer can send (before the coordinator announces
  // the host); not owned. Until then the service refuses pushes.
  // `library` (optional): collectives between processes go through it
  // (CollectivePeers::process_collectives), and rendezvous entries to it.
  void Attach(HostId self, HostExecutor* host, CollectiveHub* hub,
              ProcessCollectives* library = nullptr);

  // Replaces the peer table. Hosts newly marked lost are reported to the
  // host service (PeerLost) and the hub (HostLost), and their streams close.
  void UpdatePeers(const cluster::PeerTable& table);

  // DataTransport.
  void SendPiece(HostId from, HostId to, ShardPieceMessage piece) override;

  // CollectivePeers.
  HostId self() const override;
  HostId HostOf(DeviceId device) const override;
  void SendContribution(HostId to, const CollectiveKey& key, int rank, const void* data,
                        int64_t bytes) override;
  void BroadcastAbort(RunId run, int node, const absl::Status& status) override;
  ProcessCollectives* process_collectives() override;
  void SendReady(HostId to, const CollectiveKey& key, int64_t generation) override;

  // This host's report of its subtree's part of a run, to its parent `to`
  // (HostExecutorOptions::report_to_parent).
  void SendReport(HostId to, const SubtreeReport& report);
  // A rendezvous entry of the collective library, to host `to`.
  void SendRendezvous(HostId to, const std::string& key, const std::string& value);
  // The host part of `host`'s data address ("" if unknown).
  std::string HostnameOf(HostId host) const;

  // Closes every stream. Later sends are dropped.
  void Shutdown();

  // The receiving side, served by the worker's data server.
  grpc::Service* service();

  int64_t bytes_sent() const;

 private:
  class Sender;
  class Service;
  struct PeerInfo {
    std::string address;
    bool lost = false;
  };

  // The stream to `to`, opened on first use; nullptr if `to` is unknown or
  // lost, or after Shutdown.
  std::shared_ptr<Sender> SenderFor(HostId to);
  void Post(HostId to, cluster::DataMessage message);

  const std::string token_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;
  std::unique_ptr<Service> service_;

  mutable Mutex mu_;
  HostId self_ ABSL_GUARDED_BY(mu_);
  HostExecutor* host_ ABSL_GUARDED_BY(mu_) = nullptr;
  CollectiveHub* hub_ ABSL_GUARDED_BY(mu_) = nullptr;
  ProcessCollectives* library_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<HostId, PeerInfo> peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<DeviceId, HostId> device_hosts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<HostId, std::shared_ptr<Sender>> senders_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;

  friend class Service;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_DATA_PLANE_H_
