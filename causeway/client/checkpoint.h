// Sharded, asynchronous, atomic checkpoints of a client's arrays
// (docs/CHECKPOINT.md).
//
// Each host writes the shards it holds straight from its devices, and
// makes the shards of a restored array from the pieces they overlap:
// nothing passes through the client. Save returns at once and holds the
// arrays it was given until they are written, so training goes on and may
// drop or replace them at the next step. A save is committed by its
// manifest, written last: one cut short (a crash, kill -9) leaves every
// earlier checkpoint whole. A checkpoint restores onto any mesh and
// sharding, on any number of devices and hosts.
//
// The client and every host must see `root` at the same path (one machine,
// or a shared filesystem).
//
//   auto ckpt = Checkpointer::Open(client.get(), "/data/run", {.keep = 3}).value();
//   Future<Unit> saved = ckpt->Save(step, {{"w", w}, {"b", b}});  // at once
//   ...
//   std::vector<Array> back =
//       ckpt->Restore(ckpt->Steps()->back(), {{"w", mesh, P("data")}, ...}).value();
#ifndef CAUSEWAY_CLIENT_CHECKPOINT_H_
#define CAUSEWAY_CLIENT_CHECKPOINT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "causeway/async/future.h"
#include "causeway/base/mutex.h"
#include "causeway/checkpoint/format.h"
#include "causeway/client/client.h"

namespace causeway {

struct CheckpointOptions {
  // Committed steps kept under the root; older ones are removed.
  int keep = 3;
  // Saves begun and not yet committed at once; Save waits for one to
  // finish beyond (each holds its arrays' device memory until written).
  int max_in_flight = 2;
  // A save not committed within this long fails (DEADLINE_EXCEEDED), and
  // so does a Save that waited this long for room.
  absl::Duration timeout = absl::Minutes(10);
};

struct NamedArray {
  std::string name;
  Array array;
};

// Where a saved array goes back: its name in the checkpoint, and the mesh
// and sharding of the new array (any, whatever it was saved from).
struct RestoreTarget {
  std::string name;
  Mesh mesh;
  Sharding sharding;
};

// Thread-safe.
class Checkpointer {
 public:
  // Checkpoints under `root` (made if missing) of `client`'s arrays.
  // `client` must outlive the Checkpointer. INVALID_ARGUMENT for keep or
  // max_in_flight below 1 or a non-positive timeout.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Open(Client* client, std::string root,
                                                            CheckpointOptions options = {});
  // Waits for the saves in flight (each at most its timeout).
  ~Checkpointer();

  // Begins saving `arrays` as step `step` and returns at once; the future
  // is ready once the step is committed, or failed with why it was not
  // (the first host's error, naming the shard or file). INVALID_ARGUMENT
  // (in the future) for no arrays, an empty, repeated or unsafe name, an
  // array that is not valid or not this client's, or a step not after
  // every step saved before.
  // `metadata` is committed with the arrays (Manifest::metadata).
  Future<Unit> Save(int64_t step, std::vector<NamedArray> arrays,
                    std::map<std::string, std::string> metadata = {});
  // Waits until every save begun so far is committed or failed; the first
  // failure since the last Wait.
  absl::Status Wait();

  // Committed steps, oldest first.
  absl::StatusOr<std::vector<int64_t>> Steps() const;
  absl::StatusOr<checkpoint::Manifest> ReadManifest(int64_t step) const;
  // New arrays, in the order of `targets`, restored from committed step
  // `step`. Returns at once; each array is ready when its hosts have read
  // their boxes, or failed naming a missing, corrupt or truncated file.
  // NOT_FOUND for a step or a name the checkpoint lacks; Put's refusals for
  // a target the array does not fit.
  absl::StatusOr<std::vector<Array>> Restore(int64_t step,
                                             absl::Span<const RestoreTarget> targets);

  const std::string& root() const { return root_; }

 private:
  struct Pending;
  Checkpointer(Client* client, std::string root, CheckpointOptions options);
  void CommitLoop();

  Client* const client_;
  const std::string root_;
  const CheckpointOptions options_;
  Mutex mu_;
  CondVar cv_;
  // Saves begun, in step order; the commit thread finishes the first.
  std::deque<std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread committer_;
};

}  // namespace causeway

#endif  // CAUSEWAY_CLIENT_CHECKPOINT_H_
