// Conversions between services.h types and cluster.proto messages that
// more than one endpoint needs (the client's connection, the coordinator
// and the worker all speak them).
#ifndef CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_
#define CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "causeway/base/limits.h"
#include "causeway/base/status_macros.h"
#include "causeway/base/trace.h"
#include "causeway/transport/grpc/cluster.pb.h"
#include "causeway/transport/services.h"

namespace causeway::grpc_transport {

// `by_client`: with each device's per-client usage.
inline void EncodeCounters(const std::vector<DeviceCounters>& counters, bool by_client,
                           cluster::CounterList* out) {
  for (const DeviceCounters& c : counters) {
    cluster::DeviceCounters& d = *out->add_devices();
    d.set_device(c.device.value());
    d.set_launches(c.launches);
    d.set_failed(c.failed);
    d.set_busy_us(c.busy_us);
    d.set_collective_us(c.collective_us);
    d.set_queued(c.queued);
    d.set_memory_in_use(c.memory_in_use);
    d.set_memory_peak(c.memory_peak);
    if (!by_client) continue;
    for (const ClientUsage& u : c.clients) {
      cluster::ClientUsage& w = *d.add_clients();
      w.set_client(u.client.value());
      w.set_memory_bytes(u.memory_bytes);
      w.set_waiting_bytes(u.waiting_bytes);
      w.set_arrays(u.arrays);
    }
  }
}

inline void EncodeTraceEvent(const TraceEvent& e, cluster::TraceEventProto* out) {
  out->set_kind(static_cast<int32_t>(e.kind));
  out->set_host(e.host.value());
  out->set_device(e.device.value());
  out->set_run(e.run.value());
  out->set_node(e.node);
  out->set_name(e.name);
  out->set_start_us(e.start_us);
  out->set_duration_us(e.duration_us);
  out->set_flow(e.flow);
  out->set_island(e.island.value());
}

// A reply that carries nothing but its status.
inline absl::StatusOr<Unit> ReplyToUnit(const absl::StatusOr<cluster::Reply>& r) {
  if (!r.ok()) return r.status();
  return Unit{};
}

// Shards one ShardList may name: more than any host holds of one array (a
// device holds one shard of it).
inline constexpr int kMaxShardsPerList = 1 << 16;

// INVALID_ARGUMENT for a list a peer must not send: empty, longer than
// kMaxShardsPerList, or naming a negative shard.
inline absl::Status CheckShardList(const cluster::ShardList& list) {
  if (list.shards_size() == 0 || list.shards_size() > kMaxShardsPerList) {
    return absl::InvalidArgumentError(absl::StrCat("a shard list of ", list.shards_size(),
                                                   " shards (1 to ", kMaxShardsPerList,
                                                   " allowed)"));
  }
  for (int32_t s : list.shards()) {
    if (s < 0) return absl::InvalidArgumentError(absl::StrCat("shard ", s, " in a shard list"));
  }
  return absl::OkStatus();
}

// Times a peer may send: microseconds within about ±36,000 years, so that
// moving them between clocks cannot overflow.
inline constexpr int64_t kMaxTraceMicros = int64_t{1} << 60;

// Events sent by a peer, their times moved by `shift_us` onto the
// receiver's clock. An event of a kind this build does not know, with a
// negative duration, or whose moved start or end falls outside
// ±kMaxTraceMicros is left out and counted in `*skipped` (so that a range
// check here never fails a whole batch the sender has already given up).
// INVALID_ARGUMENT only for a shift out of range.
inline absl::StatusOr<std::vector<TraceEvent>> DecodeTraceEvents(const cluster::TraceEvents& in,
                                                                 int64_t shift_us,
                                                                 int64_t* skipped) {
  if (shift_us < -kMaxTraceMicros || shift_us > kMaxTraceMicros) {
    return absl::InvalidArgumentError("a trace's clock is out of range");
  }
  std::vector<TraceEvent> out;
  out.reserve(static_cast<size_t>(in.events_size()));
  for (const cluster::TraceEventProto& p : in.events()) {
    // Each bound keeps the next sum within int64.
    const bool valid =
        p.kind() >= 0 && p.kind() <= static_cast<int32_t>(TraceKind::kInFlight) &&
        p.duration_us() >= 0 && p.duration_us() <= kMaxTraceMicros &&
        p.start_us() >= -kMaxTraceMicros && p.start_us() <= kMaxTraceMicros &&
        p.start_us() + shift_us >= -kMaxTraceMicros &&
        p.start_us() + shift_us + p.duration_us() <= kMaxTraceMicros;
    if (!valid) {
      ++*skipped;
      continue;
    }
    TraceEvent e{static_cast<TraceKind>(p.kind()), HostId(p.host()), DeviceId(p.device()),
                 RunId(p.run()), p.node(), p.name(), p.start_us() + shift_us, p.duration_us(),
                 p.flow()};
    e.island = IslandId(p.island());
    out.push_back(std::move(e));
  }
  return out;
}

// How far to move a peer's times onto this clock. The peer read
// `peer_now_us` between this side's `asked_us` and `answered_us`: a reading
// inside that interval is consistent with the clocks agreeing (as on one
// machine, where every process reads the same monotonic clock), and is not
// moved: guessing the midpoint would skew two peers' events against each
// other by up to half their round trips. A reading outside it is moved to
// the midpoint.
// A peer's reading out of ±kMaxTraceMicros gives a shift DecodeTraceEvents
// refuses.
inline int64_t ClockShift(int64_t asked_us, int64_t answered_us, int64_t peer_now_us) {
  if (peer_now_us >= asked_us && peer_now_us <= answered_us) return 0;
  if (peer_now_us < -kMaxTraceMicros || peer_now_us > kMaxTraceMicros) {
    return kMaxTraceMicros + 1;
  }
  return asked_us + (answered_us - asked_us) / 2 - peer_now_us;
}

// Checkpoint calls (HostService::SaveShards, RestoreShards). A peer's
// message is held to: at most limits::kMaxCheckpointShardsPerCall shards,
// ranks of at most kMaxCheckpointRank, no negative shard, offset or extent,
// a folder, file and name of at most kMaxCheckpointPath bytes, a known
// dtype. (The host checks the rest: devices, sizes, that the shards exist.)
inline constexpr int kMaxCheckpointRank = 16;
inline constexpr size_t kMaxCheckpointPath = 4096;

inline void EncodeSaveShards(const std::string& folder,
                             const std::vector<SavePieceRequest>& pieces,
                             cluster::SaveShards* out) {
  out->set_folder(folder);
  for (const SavePieceRequest& p : pieces) {
    cluster::SavePiece& w = *out->add_pieces();
    w.set_array(p.array.value());
    w.set_shard(p.shard);
    w.set_file(p.file);
    for (int64_t d : p.global_shape) w.add_global_shape(d);
    for (int64_t o : p.offset) w.add_offset(o);
  }
}

inline absl::Status CheckCheckpointCall(const std::string& folder, int shards) {
  if (folder.empty() || folder.size() > kMaxCheckpointPath) {
    return absl::InvalidArgumentError(absl::StrCat("a checkpoint folder of ", folder.size(),
                                                   " bytes"));
  }
  if (shards < 0 || static_cast<size_t>(shards) > limits::kMaxCheckpointShardsPerCall) {
    return absl::InvalidArgumentError(absl::StrCat("a checkpoint call naming ", shards,
                                                   " shards"));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<std::vector<SavePieceRequest>> DecodeSaveShards(
    const cluster::SaveShards& in) {
  CW_RETURN_IF_ERROR(CheckCheckpointCall(in.folder(), in.pieces_size()));
  std::vector<SavePieceRequest> out;
  out.reserve(static_cast<size_t>(in.pieces_size()));
  for (const cluster::SavePiece& w : in.pieces()) {
    if (w.shard() < 0 || w.file().empty() || w.file().size() > kMaxCheckpointPath ||
        w.global_shape_size() > kMaxCheckpointRank || w.offset_size() > kMaxCheckpointRank) {
      return absl::InvalidArgumentError("a malformed piece in a save");
    }
    SavePieceRequest p;
    p.array = ArrayId(w.array());
    p.shard = w.shard();
    p.file = w.file();
    p.global_shape.assign(w.global_shape().begin(), w.global_shape().end());
    p.offset.assign(w.offset().begin(), w.offset().end());
    out.push_back(std::move(p));
  }
  return out;
}

inline void EncodeRestoreShards(const std::string& folder, ClientId owner,
                                const std::vector<RestoreShardRequest>& shards,
                                cluster::RestoreShards* out) {
  out->set_folder(folder);
  out->set_owner(owner.value());
  for (const RestoreShardRequest& r : shards) {
    cluster::RestoreShard& w = *out->add_shards();
    w.set_name(r.name);
    w.set_array(r.array.value());
    w.set_shard(r.shard);
    w.set_local_device(r.local_device);
    w.set_dtype(static_cast<int32_t>(r.dtype));
    for (int64_t o : r.offset) w.add_offset(o);
    for (int64_t e : r.extent) w.add_extent(e);
  }
}

inline absl::StatusOr<std::vector<RestoreShardRequest>> DecodeRestoreShards(
    const cluster::RestoreShards& in) {
  CW_RETURN_IF_ERROR(CheckCheckpointCall(in.folder(), in.shards_size()));
  std::vector<RestoreShardRequest> out;
  out.reserve(static_cast<size_t>(in.shards_size()));
  for (const cluster::RestoreShard& w : in.shards()) {
    if (w.shard() < 0 || w.name().size() > kMaxCheckpointPath ||
        !ir::IsValidDType(w.dtype()) ||
        w.offset_size() != w.extent_size() || w.extent_size() > kMaxCheckpointRank) {
      return absl::InvalidArgumentError("a malformed shard in a restore");
    }
    RestoreShardRequest r;
    r.name = w.name();
    r.array = ArrayId(w.array());
    r.shard = w.shard();
    r.local_device = w.local_device();
    r.dtype = static_cast<ir::DType>(w.dtype());
    r.offset.assign(w.offset().begin(), w.offset().end());
    r.extent.assign(w.extent().begin(), w.extent().end());
    for (size_t d = 0; d < r.extent.size(); ++d) {
      if (r.offset[d] < 0 || r.extent[d] < 0) {
        return absl::InvalidArgumentError("a negative box in a restore");
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

inline void EncodeSavedPieces(const std::vector<SavedPiece>& saved, cluster::SavedPieceList* out) {
  for (const SavedPiece& p : saved) {
    out->add_bytes(p.bytes);
    out->add_crc32(p.crc32);
  }
}

// `expected`: how many pieces were asked for.
inline absl::StatusOr<std::vector<SavedPiece>> DecodeSavedPieces(const cluster::SavedPieceList& in,
                                                                 size_t expected) {
  if (static_cast<size_t>(in.bytes_size()) != expected ||
      static_cast<size_t>(in.crc32_size()) != expected) {
    return absl::InternalError(absl::StrCat("a host answered a save of ", expected,
                                            " pieces with ", in.bytes_size()));
  }
  std::vector<SavedPiece> out(expected);
  for (size_t i = 0; i < expected; ++i) {
    if (in.bytes(static_cast<int>(i)) < 0) {
      return absl::InternalError("a host answered a save with a negative size");
    }
    out[i].bytes = in.bytes(static_cast<int>(i));
    out[i].crc32 = in.crc32(static_cast<int>(i));
  }
  return out;
}

// The reply to a save of `expected` pieces.
inline absl::StatusOr<std::vector<SavedPiece>> ReplyToSavedPieces(
    const absl::StatusOr<cluster::Reply>& reply, size_t expected) {
  if (!reply.ok()) return reply.status();
  return DecodeSavedPieces(reply->saved(), expected);
}

inline std::vector<DeviceCounters> DecodeCounters(const cluster::CounterList& in) {
  std::vector<DeviceCounters> out;
  for (const cluster::DeviceCounters& d : in.devices()) {
    DeviceCounters c;
    c.device = DeviceId(d.device());
    c.launches = d.launches();
    c.failed = d.failed();
    c.busy_us = d.busy_us();
    c.collective_us = d.collective_us();
    c.queued = d.queued();
    c.memory_in_use = d.memory_in_use();
    c.memory_peak = d.memory_peak();
    for (const cluster::ClientUsage& w : d.clients()) {
      ClientUsage u;
      u.client = ClientId(w.client());
      u.memory_bytes = w.memory_bytes();
      u.waiting_bytes = w.waiting_bytes();
      u.arrays = w.arrays();
      c.clients.push_back(u);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace causeway::grpc_transport

#endif  // CAUSEWAY_TRANSPORT_GRPC_CLUSTER_CODEC_H_
