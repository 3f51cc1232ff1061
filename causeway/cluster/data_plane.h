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

// What a payload's reassembly from chunks may hold of this host's memory.
// A payload arrives in chunks of kDataChunkBytes, and its bytes are held
// (as they arrive, never from the size the sender declares) until its last
// chunk. A chunk that would take the bytes held past a bound drops its
// payload (the consumer fails by its input or collective timeout, or by
// the sender's loss); so does a payload declared larger than any buffer of
// this host.
struct ReassemblyLimits {
  // The largest payload accepted: a piece or contribution fills at most one
  // device's buffer (WorkerServer: the device memory).
  int64_t max_payload_bytes = int64_t{1} << 32;
  // Bytes held for payloads not yet whole: from one peer address, and from
  // all peers together (WorkerServer: half the host's device memory, and
  // all of it; at least 64 MiB and one largest payload).
  int64_t per_peer_bytes = int64_t{1} << 31;
  int64_t per_host_bytes = int64_t{1} << 32;
  // The limits WorkerServer uses for `devices` devices of `memory_bytes`.
  static ReassemblyLimits ForHost(int devices, int64_t memory_bytes);
};

struct ReassemblyStats {
  int64_t held_bytes = 0;        // now, for payloads not yet whole
  int64_t peak_bytes = 0;        // the most held at once
  int64_t dropped_chunks = 0;    // of payloads over a bound, malformed or out of order
};

// Thread-safe.
class DataPlane final : public DataTransport, public CollectivePeers {
 public:
  DataPlane(std::string token, std::shared_ptr<grpc::ChannelCredentials> creds,
            ReassemblyLimits reassembly = {});
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
  ReassemblyStats reassembly_stats() const;

 private:
  class Sender;
  class Service;
  class Reassembly;

  // Takes `bytes` more of the reassembly bounds for `peer`; false (taking
  // nothing) if that would pass one of them.
  bool ReserveReassembly(const std::string& peer, int64_t bytes);
  void ReleaseReassembly(const std::string& peer, int64_t bytes);
  void CountDroppedChunk();
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

  const ReassemblyLimits reassembly_limits_;
  mutable Mutex reassembly_mu_;
  absl::flat_hash_map<std::string, int64_t> reassembly_by_peer_ ABSL_GUARDED_BY(reassembly_mu_);
  ReassemblyStats reassembly_ ABSL_GUARDED_BY(reassembly_mu_);

  friend class Service;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_DATA_PLANE_H_
