// The in-process data transport: pieces move between hosts of one process by
// direct calls. Within an island (ICI) a piece is delivered on the sending
// thread. Between islands (DCN) it can be given a latency and a bandwidth to
// emulate a data-center network: pieces on one island-to-island link are
// serialised at the link's bandwidth and delivered by a timer thread.
#ifndef CAUSEWAY_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
#define CAUSEWAY_TRANSPORT_INPROC_INPROC_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "causeway/base/clock.h"
#include "causeway/base/mutex.h"
#include "causeway/transport/services.h"

namespace causeway {

// Thread-safe. Hosts must be registered before pieces are sent to them and
// outlive the transport's Shutdown().
class InProcessDataTransport final : public DataTransport {
 public:
  explicit InProcessDataTransport(DcnOptions dcn, Clock* clock = Clock::Real());
  ~InProcessDataTransport() override;

  void RegisterHost(HostService* host, IslandId island);
  void SendPiece(HostId from, HostId to, ShardPieceMessage piece) override;
  // Every host is in this process: pieces may travel as references.
  bool CarriesReferences() const override { return true; }
  // Delivers every delayed piece now and stops the timer thread. Safe to
  // call from several threads; later pieces are delivered inline.
  void Shutdown();

  int64_t bytes_sent_between_islands() const;

 private:
  struct Endpoint {
    HostService* host;
    IslandId island;
  };
  struct Delayed {
    HostService* to;
    ShardPieceMessage piece;
  };
  void TimerLoop();

  const DcnOptions dcn_;
  Clock* const clock_;
  mutable Mutex mu_;
  absl::flat_hash_map<HostId, Endpoint> hosts_ ABSL_GUARDED_BY(mu_);
  // When each directed island link is next free, in clock micros.
  std::map<std::pair<int64_t, int64_t>, int64_t> link_free_at_ ABSL_GUARDED_BY(mu_);
  std::multimap<int64_t, Delayed> delayed_ ABSL_GUARDED_BY(mu_);
  int64_t dcn_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool timer_exited_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
  std::once_flag joined_;
};

}  // namespace causeway

#endif  // CAUSEWAY_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
