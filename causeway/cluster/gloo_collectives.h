// GlooCollectives: collectives between the worker processes of a
// distributed cluster on Gloo (Debian's libgloo-dev, the CPU collective
// library PyTorch uses): ring all-reduce for large operands,
// halving-doubling (bcube) for small ones, ring all-gather, pairwise
// all-to-all, over TCP
// connections of Gloo's own between every pair of processes of a group.
//
// A group is a set of processes (the hosts of a collective's members); its
// connections are made on first use through a rendezvous whose entries
// travel on the data plane (DataPlane::SendRendezvous), and kept. A call
// that fails (a peer died, a deadline passed) leaves the group's
// connections in an unknown state: they are dropped, and the next call
// connects afresh under the next generation of the group (processes agree
// on it first: see ProcessCollectives); a lost host drops every group it
// was in. The collective hub decides when to call (every
// process's members have arrived: see CollectivePeers), so a process never
// waits inside Gloo for a gang that failed elsewhere. See
// docs/DISTRIBUTED.md, "Collectives between processes".
#ifndef CAUSEWAY_CLUSTER_GLOO_COLLECTIVES_H_
#define CAUSEWAY_CLUSTER_GLOO_COLLECTIVES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/worker/collective_hub.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace causeway {

// Thread-safe.
class GlooCollectives final : public ProcessCollectives {
 public:
  // What the collectives need of the data plane: this process's host and
  // the host name its peers reach it by (known once the coordinator's peer
  // table has come), and a non-blocking send of a rendezvous entry.
  struct Plane {
    std::function<HostId()> self;
    std::function<std::string()> hostname;
    std::function<void(HostId to, const std::string& key, const std::string& value)> send;
  };
  // `from_bytes`: see ProcessCollectives::from_bytes.
  GlooCollectives(Plane plane, int64_t from_bytes);
  ~GlooCollectives() override;

  absl::string_view name() const override { return "gloo"; }
  int64_t from_bytes() const override { return from_bytes_; }
  int64_t Generation(absl::Span<const HostId> hosts) override;
  absl::Status AllReduce(const CollectiveKey& key, absl::Span<const HostId> hosts,
                         int64_t generation, ir::DType dtype, ir::ReduceKind kind, void* data,
                         int64_t elements, absl::Time deadline) override;
  absl::Status AllGather(const CollectiveKey& key, absl::Span<const HostId> hosts,
                         int64_t generation, const void* in, absl::Span<const int64_t> bytes,
                         void* out, absl::Time deadline) override;

  absl::Status AllToAll(const CollectiveKey& key, absl::Span<const HostId> hosts,
                        int64_t generation, const void* in, absl::Span<const int64_t> send_bytes,
                        void* out, absl::Span<const int64_t> recv_bytes,
                        absl::Time deadline) override;

  // A rendezvous entry from host `from`. Entries are bounded (count and
  // size); beyond that, new ones are dropped (the rendezvous that needed
  // them fails by its deadline).
  void DeliverRendezvous(HostId from, std::string key, std::string value) override;
  // Drops the connections of every group with `host`.
  void HostLost(HostId host, const absl::Status& status) override;

  // Bounds on rendezvous entries held.
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxEntryBytes = size_t{1} << 20;
  // Operands of at most this many bytes use halving-doubling, larger ones
  // the ring.
  static constexpr int64_t kRingFromBytes = int64_t{256} << 10;

  // Groups connected so far (each connection made once, until it fails).
  int64_t connects() const;
  // Rendezvous entries held now.
  size_t entries_held() const;
  // After a call failed: how long it waits for the notice of a lost peer,
  // to name it as the cause (a dead peer's connections fail at once; the
  // coordinator's notice follows).
  static constexpr absl::Duration kLostNoticeWait = absl::Seconds(2);

 private:
  class Store;
  struct Group {
    // The generation of `context`, or (none) the next to connect.
    int64_t generation = 0;
    bool connecting = false;
    std::shared_ptr<gloo::Context> context;
  };

  // The group's context of `generation`, connecting it if needed (or
  // waiting for the call that is connecting it).
  absl::StatusOr<std::shared_ptr<gloo::Context>> ContextFor(const std::vector<HostId>& hosts,
                                                            int64_t generation,
                                                            absl::Time deadline);
  // "host H was lost: why" for the first of `hosts` lost; empty if none.
  std::string LostLocked(absl::Span<const HostId> hosts) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A call on `context` failed: drops it, so the next call connects anew.
  void Drop(const std::vector<HostId>& hosts, const std::shared_ptr<gloo::Context>& context);
  // Runs `op` on the group's context; maps Gloo's exceptions to a status
  // naming `what`.
  absl::Status Run(absl::Span<const HostId> hosts, int64_t generation, absl::Time deadline,
                   absl::string_view what,
                   const std::function<void(const std::shared_ptr<gloo::Context>&,
                                            std::chrono::milliseconds)>& op);

  const Plane plane_;
  const int64_t from_bytes_;
  mutable Mutex mu_;
  CondVar changed_;  // an entry came, or a group finished connecting
  std::shared_ptr<gloo::transport::Device> device_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::vector<HostId>, Group> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> entries_ ABSL_GUARDED_BY(mu_);
  size_t entry_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<HostId, absl::Status> lost_ ABSL_GUARDED_BY(mu_);
  int64_t connects_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLUSTER_GLOO_COLLECTIVES_H_
