// HostExecutor's part of checkpoints (docs/CHECKPOINT.md): writing the
// shards it holds as pieces of a save, and making shards from the pieces
// of a committed checkpoint. The file work runs on the checkpoint thread.
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/device.h"
#include "causeway/base/limits.h"
#include "causeway/checkpoint/format.h"
#include "causeway/worker/checkpoint_io.h"
#include "causeway/worker/host_executor.h"

namespace causeway {
namespace {

// A device copy issued from the checkpoint thread completes on the device's;
// the thread waits at most this long for it.
constexpr absl::Duration kCopyTimeout = absl::Minutes(5);

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

// Copies between a buffer's storage and host memory `host` (owned by
// `keep`, which the copy holds until it completes) and waits for it.
absl::Status CopyAndWait(const BufferRef& buffer, const std::shared_ptr<std::byte[]>& keep,
                         bool in) {
  absl::StatusOr<backend::DeviceAllocation*> storage = buffer->storage();
  if (!storage.ok()) return storage.status();
  const int64_t n = buffer->byte_size();
  Promise<Unit> copied;
  auto done = [copied, keep, buffer](absl::Status status) {
    if (status.ok()) {
      copied.Set(Unit{});
    } else {
      copied.Set(status);
    }
  };
  const backend::BoxCopy box = backend::BoxCopy::Flat(0, n, 0, n, n);
  if (in) {
    buffer->backend()->CopyIn(keep.get(), **storage, box, done);
  } else {
    buffer->backend()->CopyOut(**storage, keep.get(), box, done);
  }
  const absl::StatusOr<Unit>* result = copied.future().AwaitWithTimeout(kCopyTimeout);
  if (result == nullptr) {
    return absl::DeadlineExceededError(absl::StrCat("a copy ", in ? "to " : "from ",
                                                    buffer->device().ToString(),
                                                    " did not complete within ",
                                                    absl::FormatDuration(kCopyTimeout)));
  }
  return result->status();
}

// The pieces of one SaveShards call as they are written.
struct Saving {
  explicit Saving(size_t n) : saved(n), left(n) {}
  Mutex mu;
  std::vector<SavedPiece> saved ABSL_GUARDED_BY(mu);
  size_t left ABSL_GUARDED_BY(mu);
  absl::Status first_error ABSL_GUARDED_BY(mu);
  Promise<std::vector<SavedPiece>> done;

  void Finish(size_t i, absl::StatusOr<SavedPiece> piece) {
    std::optional<absl::StatusOr<std::vector<SavedPiece>>> result;
    {
      MutexLock lock(&mu);
      if (piece.ok()) {
        saved[i] = *piece;
      } else if (first_error.ok()) {
        first_error = piece.status();
      }
      if (--left > 0) return;
      if (first_error.ok()) {
        result = std::move(saved);
      } else {
        result = first_error;
      }
    }
    done.Set(std::move(*result));
  }
};

// The manifest of a checkpoint being restored, read once by the first
// shard of a RestoreShards call that needs it (on the checkpoint thread).
struct Restoring {
  std::string folder;
  Mutex mu;
  std::optional<absl::StatusOr<checkpoint::Manifest>> manifest ABSL_GUARDED_BY(mu);

  absl::StatusOr<const checkpoint::ArrayEntry*> Find(const std::string& name) {
    MutexLock lock(&mu);
    if (!manifest.has_value()) manifest = checkpoint::ReadManifest(folder);
    if (!manifest->ok()) return manifest->status();
    const checkpoint::ArrayEntry* entry = (*manifest)->Find(name);
    if (entry == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", folder, " has no array named '", name, "'"));
    }
    // Entries are never changed once read: the pointer outlives the lock.
    return entry;
  }
};

}  // namespace

Future<std::vector<SavedPiece>> HostExecutor::SaveShards(const std::string& folder,
                                                         std::vector<SavePieceRequest> pieces) {
  using Result = Future<std::vector<SavedPiece>>;
  const std::string host = options_.host.id.ToString();
  if (pieces.size() > limits::kMaxCheckpointShardsPerCall) {
    return Result::Ready(absl::InvalidArgumentError(
        absl::StrCat("a save names ", pieces.size(), " shards on ", host, "; at most ",
                     limits::kMaxCheckpointShardsPerCall, " per call")));
  }
  // Every shard is taken now, so that a release after this call does not
  // free it before it is written.
  std::vector<BufferRef> buffers;
  buffers.reserve(pieces.size());
  for (const SavePieceRequest& p : pieces) {
    absl::StatusOr<BufferRef> buffer = store_.Get(ShardKey{p.array, p.shard});
    if (!buffer.ok()) {
      return Result::Ready(Prefixed(buffer.status(), absl::StrCat("saving on ", host)));
    }
    const size_t rank = (*buffer)->shape().dims.size();
    if (p.offset.size() != rank || p.global_shape.size() != rank) {
      return Result::Ready(absl::InvalidArgumentError(absl::StrCat(
          "saving shard ", p.shard, " of ", p.array.ToString(), " on ", host, ": the shard has ",
          rank, " dimensions, the request names ", p.offset.size(), " offsets and ",
          p.global_shape.size(), " global dimensions")));
    }
    buffers.push_back(*std::move(buffer));
  }
  if (pieces.empty()) return Result::Ready(std::vector<SavedPiece>{});
  auto saving = std::make_shared<Saving>(pieces.size());
  Result result = saving->done.future();
  std::shared_ptr<CheckpointIo> io = checkpoint_io_;
  for (size_t i = 0; i < pieces.size(); ++i) {
    BufferRef b = std::move(buffers[i]);
    auto piece = std::make_shared<const SavePieceRequest>(std::move(pieces[i]));
    const std::string where =
        absl::StrCat("saving shard ", piece->shard, " of ", piece->array.ToString(), " on ", host);
    b->ready().OnReady([=](const absl::StatusOr<Unit>& ready) {
      if (!ready.ok()) {
        saving->Finish(i, Prefixed(ready.status(), where));
        return;
      }
      io->Post([=](const absl::Status& run) {
        if (!run.ok()) {
          saving->Finish(i, Prefixed(run, where));
          return;
        }
        // A kind whose memory is the host's is written from it; any other
        // is staged through host memory first.
        absl::StatusOr<backend::DeviceAllocation*> storage = b->storage();
        if (!storage.ok()) {
          saving->Finish(i, Prefixed(storage.status(), where));
          return;
        }
        const std::byte* data = b->backend()->HostAddress(**storage);
        std::shared_ptr<std::byte[]> staging;
        if (data == nullptr) {
          staging.reset(new std::byte[b->byte_size()]);
          absl::Status copied = CopyAndWait(b, staging, /*in=*/false);
          if (!copied.ok()) {
            saving->Finish(i, Prefixed(copied, where));
            return;
          }
          data = staging.get();
        }
        absl::StatusOr<checkpoint::Piece> written =
            checkpoint::WritePiece(folder, piece->file, piece->global_shape, b->shape().dtype,
                                   piece->offset, b->shape().dims, data);
        if (!written.ok()) {
          saving->Finish(i, Prefixed(written.status(), where));
          return;
        }
        saving->Finish(i, SavedPiece{written->bytes, written->crc32});
      });
    });
  }
  return result;
}

absl::Status HostExecutor::RestoreShards(const std::string& folder, ClientId owner,
                                         std::vector<RestoreShardRequest> shards) {
  const std::string host = options_.host.id.ToString();
  if (shards.size() > limits::kMaxCheckpointShardsPerCall) {
    return absl::InvalidArgumentError(
        absl::StrCat("a restore names ", shards.size(), " shards on ", host, "; at most ",
                     limits::kMaxCheckpointShardsPerCall, " per call"));
  }
  // Everything is checked before any shard is made.
  for (const RestoreShardRequest& r : shards) {
    const std::string where = absl::StrCat("restoring shard ", r.shard, " of '", r.name, "' (",
                                           r.array.ToString(), ") on ", host);
    if (r.local_device < 0 || r.local_device >= num_devices()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": no local device ", r.local_device));
    }
    if (r.offset.size() != r.extent.size() ||
        r.extent.size() > static_cast<size_t>(checkpoint::kMaxRank)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a box of ", r.offset.size(),
                                                     " offsets and ", r.extent.size(),
                                                     " extents"));
    }
    int64_t elements = 1;
    for (size_t d = 0; d < r.extent.size(); ++d) {
      const int64_t capacity = store_.memory(r.local_device)->capacity();
      if (r.extent[d] < 0 || r.offset[d] < 0 ||
          (r.extent[d] > 0 && elements > capacity / r.extent[d])) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a box of negative or impossible size"));
      }
      elements *= r.extent[d];
    }
    const int64_t bytes = elements * ir::ByteSize(r.dtype);
    const int64_t capacity = store_.memory(r.local_device)->capacity();
    if (bytes > capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          where, ": the shard's ", bytes, " bytes exceed the whole memory of local device ",
          r.local_device, " (", capacity, " bytes)"));
    }
  }
  auto restoring = std::make_shared<Restoring>();
  restoring->folder = folder;
  std::shared_ptr<CheckpointIo> io = checkpoint_io_;
  std::vector<ArrayId> made;
  for (RestoreShardRequest& r : shards) {
    BufferRef buffer = store_.Allocate(r.local_device, ir::Shape(r.dtype, r.extent), owner);
    if (absl::Status put = store_.Put(ShardKey{r.array, r.shard}, buffer); !put.ok()) {
      // No half-made array stays behind.
      store_.Release(made);
      return put;
    }
    made.push_back(r.array);
    auto request = std::make_shared<const RestoreShardRequest>(std::move(r));
    const std::string where = absl::StrCat("restoring shard ", request->shard, " of '",
                                           request->name, "' on ", host);
    // Weak, as in PutShard: a shard released before its memory is granted
    // or its turn comes withdraws rather than being read.
    std::weak_ptr<DeviceBuffer> weak = buffer;
    buffer->allocated().OnReady([=](const absl::StatusOr<Unit>& alloc) {
      BufferRef b = weak.lock();
      if (b == nullptr) return;
      if (!alloc.ok()) {
        b->SetReady(alloc.status());
        return;
      }
      io->Post([=](const absl::Status& run) {
        BufferRef shard = weak.lock();
        if (shard == nullptr) return;
        if (!run.ok()) {
          shard->SetReady(Prefixed(run, where));
          return;
        }
        absl::StatusOr<const checkpoint::ArrayEntry*> entry = restoring->Find(request->name);
        if (!entry.ok()) {
          shard->SetReady(Prefixed(entry.status(), where));
          return;
        }
        if ((*entry)->dtype != request->dtype) {
          shard->SetReady(absl::InvalidArgumentError(absl::StrCat(
              where, ": it was saved as ", ir::DTypeName((*entry)->dtype), ", not ",
              ir::DTypeName(request->dtype))));
          return;
        }
        absl::StatusOr<backend::DeviceAllocation*> storage = shard->storage();
        if (!storage.ok()) {
          shard->SetReady(Prefixed(storage.status(), where));
          return;
        }
        // Read straight into a kind's memory that is the host's; staged
        // through host memory into any other.
        if (std::byte* direct = shard->backend()->HostAddress(**storage); direct != nullptr) {
          absl::Status read =
              checkpoint::ReadBox(restoring->folder, **entry, request->offset, request->extent,
                                  direct);
          shard->SetReady(read.ok() ? read : Prefixed(read, where));
          return;
        }
        std::shared_ptr<std::byte[]> staging(new std::byte[shard->byte_size()]);
        absl::Status read = checkpoint::ReadBox(restoring->folder, **entry, request->offset,
                                                request->extent, staging.get());
        if (read.ok()) read = CopyAndWait(shard, staging, /*in=*/true);
        shard->SetReady(read.ok() ? read : Prefixed(read, where));
      });
    });
  }
  return absl::OkStatus();
}

}  // namespace causeway
