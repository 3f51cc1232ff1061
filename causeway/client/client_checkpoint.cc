// ClientCore's part of checkpoints: which host writes which shard of an
// array, and which host makes which shard of a restored one. The bytes
// never pass through the client (docs/CHECKPOINT.md).
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/base/status_macros.h"
#include "causeway/checkpoint/format.h"
#include "causeway/client/client_core.h"

namespace causeway::internal {
namespace {

std::vector<int64_t> Offsets(const std::vector<Range>& ranges) {
  std::vector<int64_t> out;
  for (const Range& r : ranges) out.push_back(r.begin);
  return out;
}

}  // namespace

Future<std::vector<checkpoint::Piece>> ClientCore::SavePieces(const ArrayState& array,
                                                              const std::string& folder,
                                                              const std::string& prefix) {
  using Pieces = std::vector<checkpoint::Piece>;
  // What each host writes, grouped: one call per host, not per shard.
  std::map<HostId, std::vector<SavePieceRequest>> by_host;
  std::map<HostId, std::vector<size_t>> places;  // of each request in `pieces`
  Pieces pieces;
  const ir::Shape shard_shape = array.sharding.ShardShape(array.shape, array.mesh);
  for (int s : DistinctShards(array)) {
    SavePieceRequest request;
    request.array = array.id;
    request.shard = s;
    request.file = absl::StrCat(prefix, ".s", s);
    request.global_shape = array.shape.dims;
    request.offset = Offsets(array.sharding.ShardRanges(array.shape, array.mesh, s));
    checkpoint::Piece piece;
    piece.file = request.file;
    piece.offset = request.offset;
    piece.extent = shard_shape.dims;
    const HostId h = array.hosts->by_shard[s];
    places[h].push_back(pieces.size());
    pieces.push_back(std::move(piece));
    by_host[h].push_back(std::move(request));
  }
  Promise<Pieces> promise;
  std::weak_ptr<ClientCore> weak = shared_from_this();
  // Sent once the run making the array reached its hosts, as a read is.
  array.submitted.OnReady([=, by_host = std::move(by_host), places = std::move(places),
                           pieces = std::move(pieces)](const absl::StatusOr<Unit>& submitted) {
    if (!submitted.ok()) {
      promise.Set(submitted.status());
      return;
    }
    auto core = weak.lock();
    if (core == nullptr) {
      promise.Set(absl::FailedPreconditionError("client is gone"));
      return;
    }
    std::vector<Future<std::vector<SavedPiece>>> written;
    std::vector<std::vector<size_t>> which;  // per call, its pieces' places in `pieces`
    for (const auto& [h, requests] : by_host) {
      which.push_back(places.at(h));
      HostService* host = core->cluster_->host(h);
      written.push_back(host != nullptr
                            ? host->SaveShards(folder, requests)
                            : Future<std::vector<SavedPiece>>::Ready(absl::UnavailableError(
                                  absl::StrCat(h.ToString(), " is gone"))));
    }
    WhenAll(written).OnReady([=](const absl::StatusOr<Unit>& all) mutable {
      if (!all.ok()) {
        promise.Set(all.status());
        return;
      }
      Pieces out = pieces;
      for (size_t c = 0; c < written.size(); ++c) {
        const std::vector<SavedPiece>& saved = *written[c].Await();
        if (saved.size() != which[c].size()) {
          promise.Set(absl::InternalError(absl::StrCat("a host answered ", saved.size(),
                                                       " pieces of a save for ",
                                                       which[c].size())));
          return;
        }
        for (size_t k = 0; k < saved.size(); ++k) {
          out[which[c][k]].bytes = saved[k].bytes;
          out[which[c][k]].crc32 = saved[k].crc32;
        }
      }
      promise.Set(std::move(out));
    });
  });
  return promise.future();
}

absl::StatusOr<Array> ClientCore::RestoreArray(const std::string& folder,
                                               const checkpoint::ArrayEntry& entry,
                                               const Mesh& mesh, const Sharding& sharding) {
  const ir::Shape shape(entry.dtype, entry.shape);
  absl::StatusOr<std::vector<DeviceInfo>> devices = CheckPut(shape, mesh, sharding);
  if (!devices.ok()) {
    return absl::Status(devices.status().code(),
                        absl::StrCat("restoring '", entry.name, "': ", devices.status().message()));
  }
  const ir::Shape shard_shape = sharding.ShardShape(shape, mesh);
  const ArrayId id(NextId(next_array_));
  std::map<HostId, std::vector<RestoreShardRequest>> by_host;
  std::vector<HostId> hosts;
  for (int s = 0; s < mesh.size(); ++s) {
    const DeviceInfo& d = (*devices)[s];
    RestoreShardRequest request;
    request.name = entry.name;
    request.array = id;
    request.shard = s;
    request.local_device = d.local_index;
    request.dtype = entry.dtype;
    request.offset = Offsets(sharding.ShardRanges(shape, mesh, s));
    request.extent = shard_shape.dims;
    by_host[d.host].push_back(std::move(request));
    hosts.push_back(d.host);
  }
  auto placement = std::make_shared<const ShardHosts>(std::move(hosts));
  for (auto& [h, requests] : by_host) {
    HostService* host = cluster_->host(h);
    absl::Status made = host != nullptr
                            ? host->RestoreShards(folder, id_, std::move(requests))
                            : absl::UnavailableError(absl::StrCat(h.ToString(), " is gone"));
    if (!made.ok()) {
      // The hosts that made their shards drop them again.
      QueueRelease(id, *placement);
      return absl::Status(made.code(),
                          absl::StrCat("restoring '", entry.name, "': ", made.message()));
    }
  }
  return MakeArray(id, shape, mesh, sharding, std::move(placement), Future<Unit>::Ready(Unit{}));
}

}  // namespace causeway::internal
