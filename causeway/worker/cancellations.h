// Cancellations: the cancellation flag of each client with work on one host.
// Every launch of a client's runs holds its client's flag (Launch::cancel);
// when the client leaves (its session ended: a closed connection, a lost
// heartbeat, a killed process) or an operator cancels its work, the host
// sets the flag, so that launches still queued fail with CANCELLED instead
// of starting and one running (a loop) ends at its next check
// (backend::RunContext::cancel). Part of the host executor.
#ifndef CAUSEWAY_WORKER_CANCELLATIONS_H_
#define CAUSEWAY_WORKER_CANCELLATIONS_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"

namespace causeway {

// Owns one flag per client that has had a run on this host and has not
// been cancelled; a flag outlives its entry as long as launches hold it.
// Thread-safe.
class Cancellations {
 public:
  // The flag of `client`, made unset on first use.
  std::shared_ptr<const std::atomic<bool>> FlagOf(ClientId client);
  // Sets `client`'s flag and forgets the client (a later run of it gets a
  // new, unset flag). False if it had none: no run of it came here.
  bool Cancel(ClientId client);
  // Clients with a flag.
  int64_t size() const;

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<ClientId, std::shared_ptr<std::atomic<bool>>> flags_ ABSL_GUARDED_BY(mu_);
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_CANCELLATIONS_H_
