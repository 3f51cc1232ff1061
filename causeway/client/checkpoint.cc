#include "causeway/client/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "causeway/client/client_core.h"

namespace causeway {

// A save begun: its arrays, held until written, and each one's pieces.
struct Checkpointer::Pending {
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  absl::Time deadline;
  std::vector<NamedArray> arrays;
  std::vector<Future<std::vector<checkpoint::Piece>>> pieces;
  Promise<Unit> done;
};

absl::StatusOr<std::unique_ptr<Checkpointer>> Checkpointer::Open(Client* client, std::string root,
                                                                 CheckpointOptions options) {
  if (client == nullptr) return absl::InvalidArgumentError("checkpoints need a client");
  if (root.empty()) return absl::InvalidArgumentError("checkpoints need a root folder");
  if (options.keep < 1 || options.max_in_flight < 1 || options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint options need keep >= 1, max_in_flight >= 1 and a positive timeout (keep ",
        options.keep, ", max_in_flight ", options.max_in_flight, ", timeout ",
        absl::FormatDuration(options.timeout), ")"));
  }
  // A root that cannot be listed is refused now, not at the first save.
  absl::StatusOr<std::vector<int64_t>> steps = checkpoint::CommittedSteps(root);
  if (!steps.ok()) return steps.status();
  return std::unique_ptr<Checkpointer>(new Checkpointer(client, std::move(root), options));
}

Checkpointer::Checkpointer(Client* client, std::string root, CheckpointOptions options)
    : client_(client), root_(std::move(root)), options_(options) {
  committer_ = std::thread([this] { CommitLoop(); });
}

Checkpointer::~Checkpointer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  committer_.join();
}

Future<Unit> Checkpointer::Save(int64_t step, std::vector<NamedArray> arrays,
                                std::map<std::string, std::string> metadata) {
  auto refuse = [&](absl::Status why) {
    return Future<Unit>::Ready(absl::Status(
        why.code(), absl::StrCat("saving step ", step, " under ", root_, ": ", why.message())));
  };
  if (arrays.empty()) return refuse(absl::InvalidArgumentError("no arrays to save"));
  internal::ClientCore& core = *client_->core_;
  absl::flat_hash_set<std::string> names;
  for (const NamedArray& a : arrays) {
    if (a.name.empty() || !names.insert(a.name).second) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          "array names must be distinct and not empty; '", a.name, "' is not")));
    }
    for (unsigned char c : a.name) {
      if (c < 0x20 || c == 0x7f) {
        return refuse(absl::InvalidArgumentError(
            absl::StrCat("array name '", absl::CEscape(a.name), "' has a control character")));
      }
    }
    if (absl::Status ok = core.CheckArgument(a.array, absl::StrCat("array '", a.name, "'"));
        !ok.ok()) {
      return refuse(ok);
    }
  }
  auto pending = std::make_shared<Pending>();
  pending->step = step;
  pending->metadata = std::move(metadata);
  Future<Unit> result = pending->done.future();
  {
    MutexLock lock(&mu_);
    if (step <= last_step_) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("step ", last_step_, " was saved before; steps must increase")));
    }
    // Room: at most max_in_flight saves hold their arrays at once.
    const absl::Time give_up = absl::Now() + options_.timeout;
    while (!stopping_ && static_cast<int>(pending_.size()) >= options_.max_in_flight) {
      if (absl::Now() >= give_up) {
        return refuse(absl::DeadlineExceededError(
            absl::StrCat(pending_.size(), " saves in flight did not finish within ",
                         absl::FormatDuration(options_.timeout))));
      }
      cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
    if (stopping_) return refuse(absl::CancelledError("the checkpointer is closing"));
    // Begun under the lock, so that steps begin in order.
    absl::StatusOr<std::string> folder = checkpoint::BeginSave(root_, step);
    if (!folder.ok()) return refuse(folder.status());
    last_step_ = step;
    for (size_t i = 0; i < arrays.size(); ++i) {
      pending->pieces.push_back(core.SavePieces(internal::ClientCore::StateOf(arrays[i].array),
                                                *folder, absl::StrCat("a", i)));
    }
    pending->arrays = std::move(arrays);
    pending->deadline = absl::Now() + options_.timeout;
    if (pending_.empty()) cv_.SignalAll();
    pending_.push_back(std::move(pending));
  }
  return result;
}

void Checkpointer::CommitLoop() {
  while (true) {
    std::shared_ptr<Pending> p;
    {
      MutexLock lock(&mu_);
      while (pending_.empty() && !stopping_) {
        cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      }
      if (pending_.empty()) return;  // stopping, nothing left
      p = pending_.front();
    }
    const std::string where = absl::StrCat("saving step ", p->step, " under ", root_);
    absl::Status status;
    checkpoint::Manifest manifest;
    manifest.step = p->step;
    manifest.metadata = p->metadata;
    for (size_t i = 0; i < p->pieces.size() && status.ok(); ++i) {
      const absl::StatusOr<std::vector<checkpoint::Piece>>* written =
          p->pieces[i].AwaitWithTimeout(std::max(p->deadline - absl::Now(), absl::ZeroDuration()));
      if (written == nullptr) {
        status = absl::DeadlineExceededError(
            absl::StrCat(where, ": not written within ", absl::FormatDuration(options_.timeout)));
        break;
      }
      if (!written->ok()) {
        status = absl::Status(written->status().code(),
                              absl::StrCat(where, ": ", written->status().message()));
        break;
      }
      const internal::ArrayState& a = internal::ClientCore::StateOf(p->arrays[i].array);
      checkpoint::ArrayEntry entry;
      entry.name = p->arrays[i].name;
      entry.dtype = a.shape.dtype;
      entry.shape = a.shape.dims;
      entry.sharding = absl::StrCat("mesh ", a.mesh.ToString(), ", ", a.sharding.ToString());
      entry.pieces = **written;
      manifest.arrays.push_back(std::move(entry));
    }
    if (status.ok()) status = checkpoint::Commit(root_, manifest, options_.keep);
    {
      MutexLock lock(&mu_);
      pending_.pop_front();
      if (!status.ok() && first_error_.ok()) first_error_ = status;
      cv_.SignalAll();
    }
    if (status.ok()) {
      p->done.Set(Unit{});
    } else {
      p->done.Set(status);
    }
    // `p` goes here, and with it the last hold on its arrays.
  }
}

absl::Status Checkpointer::Wait() {
  MutexLock lock(&mu_);
  // Each save in flight ends by its own deadline.
  while (!pending_.empty()) {
    cv_.WaitWithDeadline(&mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  absl::Status out = first_error_;
  first_error_ = absl::OkStatus();
  return out;
}

absl::StatusOr<std::vector<int64_t>> Checkpointer::Steps() const {
  return checkpoint::CommittedSteps(root_);
}

absl::StatusOr<checkpoint::Manifest> Checkpointer::ReadManifest(int64_t step) const {
  return checkpoint::ReadManifest(checkpoint::StepFolder(root_, step));
}

absl::StatusOr<std::vector<Array>> Checkpointer::Restore(int64_t step,
                                                         absl::Span<const RestoreTarget> targets) {
  const std::string folder = checkpoint::StepFolder(root_, step);
  absl::StatusOr<std::vector<int64_t>> steps = Steps();
  if (!steps.ok()) return steps.status();
  if (std::find(steps->begin(), steps->end(), step) == steps->end()) {
    return absl::NotFoundError(absl::StrCat("no committed step ", step, " under ", root_));
  }
  absl::StatusOr<checkpoint::Manifest> manifest = checkpoint::ReadManifest(folder);
  if (!manifest.ok()) return manifest.status();
  internal::ClientCore& core = *client_->core_;
  std::vector<Array> out;
  for (const RestoreTarget& t : targets) {
    const checkpoint::ArrayEntry* entry = manifest->Find(t.name);
    if (entry == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("step ", step, " under ", root_, " has no array named '", t.name, "'"));
    }
    absl::StatusOr<Array> a = core.RestoreArray(folder, *entry, t.mesh, t.sharding);
    if (!a.ok()) return a.status();
    out.push_back(*std::move(a));
  }
  return out;
}

}  // namespace causeway
