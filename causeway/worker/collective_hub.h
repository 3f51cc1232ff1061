// CollectiveHub: where the devices of a gang meet for collectives, for all
// devices of one process (shared memory). Each participant contributes its
// buffer and blocks until the whole group has; the last to arrive reduces in
// rank order (so every run gives bit-identical results) and writes the
// result into every participant's buffer.
//
// The hub is also the collective watchdog. Gang scheduling makes every
// device meet its peers in the same order; when that order is violated
// (e.g. the scheduler is bypassed), devices can each block in a different
// collective waiting for the other. The hub keeps a wait-for graph of blocked
// devices — device d, blocked in collective K, waits for each member of K
// that has not arrived and is itself blocked in another collective — and on
// a cycle aborts every collective on it with ABORTED, naming the devices and
// collectives involved. A timeout bounds every wait as a last resort.
#ifndef CAUSEWAY_WORKER_COLLECTIVE_HUB_H_
#define CAUSEWAY_WORKER_COLLECTIVE_HUB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/backend/cpu/executable.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/function.h"
#include "causeway/topology/mesh.h"

namespace causeway {

struct CollectiveKey {
  RunId run;
  int node = 0;
  int index = 0;         // collective instruction within the function
  int group_leader = 0;  // lowest mesh position in the group
  friend bool operator==(const CollectiveKey&, const CollectiveKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const CollectiveKey& k) {
    return H::combine(std::move(h), k.run, k.node, k.index, k.group_leader);
  }
};

// Thread-safe.
class CollectiveHub {
 public:
  explicit CollectiveHub(absl::Duration timeout) : timeout_(timeout) {}

  // Contributes `data` (`shape`) as member `rank` of `members` (device ids
  // in rank order) and blocks until every member has; then `data` holds the
  // reduction. `what` describes the collective for error messages.
  // Errors: ABORTED (deadlock detected, or Shutdown), DEADLINE_EXCEEDED
  // (timeout), INVALID_ARGUMENT (members disagree on the group).
  absl::Status AllReduce(const CollectiveKey& key, DeviceId self, int rank,
                         const std::vector<DeviceId>& members, const ir::Shape& shape,
                         ir::ReduceKind kind, void* data, const std::string& what);

  // The launch of node `node` of `run` failed on one device without
  // reaching (all of) its collectives: fails every pending and later
  // collective of that gang with `status`, so its peers do not wait for a
  // member that will never come.
  void AbortGang(RunId run, int node, const absl::Status& status);

  // Aborts every pending and future collective.
  void Shutdown();

  int64_t deadlocks_detected() const;

 private:
  struct State {
    std::vector<DeviceId> members;
    std::vector<void*> buffers;
    std::vector<bool> arrived_rank;
    int arrived = 0;
    int departed = 0;
    bool done = false;
    absl::Status status;
    std::string what;
  };

  // REQUIRES: mu_. Looks for a cycle through `self` in the wait-for graph;
  // if found aborts the collectives on it and returns true.
  bool DetectDeadlockLocked(DeviceId self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReduceLocked(State& state, const ir::Shape& shape, ir::ReduceKind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration timeout_;
  mutable Mutex mu_;
  absl::flat_hash_map<CollectiveKey, std::shared_ptr<State>> states_ ABSL_GUARDED_BY(mu_);
  // The collective each blocked device waits in.
  absl::flat_hash_map<DeviceId, CollectiveKey> blocked_ ABSL_GUARDED_BY(mu_);
  // Gangs aborted by AbortGang. Entries are small and kept so that members
  // arriving late fail too; the oldest are dropped past kMaxAbortedGangs.
  static constexpr size_t kMaxAbortedGangs = 4096;
  absl::flat_hash_map<std::pair<RunId, int>, absl::Status> aborted_gangs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<RunId, int>> aborted_order_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int64_t deadlocks_ ABSL_GUARDED_BY(mu_) = 0;
};

// The CollectiveOps of one launch: one device's view of the hub.
class HubCollectives final : public backend::cpu::CollectiveOps {
 public:
  HubCollectives(CollectiveHub* hub, RunId run, int node, const Mesh* mesh, int position,
                 std::string function_name)
      : hub_(hub), run_(run), node_(node), mesh_(mesh), position_(position),
        function_name_(std::move(function_name)) {}

  absl::Status AllReduce(int index, absl::Span<const std::string> axes, ir::ReduceKind kind,
                         const ir::Shape& shape, void* data) override;
  // See CollectiveHub::AbortGang.
  void AbortGang(const absl::Status& status) { hub_->AbortGang(run_, node_, status); }

 private:
  CollectiveHub* const hub_;
  const RunId run_;
  const int node_;
  const Mesh* const mesh_;  // owned by the program plan, which outlives the launch
  const int position_;
  const std::string function_name_;
};

}  // namespace causeway

#endif  // CAUSEWAY_WORKER_COLLECTIVE_HUB_H_
