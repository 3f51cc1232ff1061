// HostExecutor's reshards: the pieces a node sends and receives between
// devices and hosts, early pieces, and what a lost peer fails.
#include "causeway/worker/host_executor.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "causeway/backend/device.h"
#include "causeway/base/check.h"
#include "causeway/base/limits.h"

namespace causeway {

void HostExecutor::EnqueueReshard(const RunRequest& run, const Registered& reg, int node_index,
                                  RunValues& values) {
  const std::shared_ptr<const ProgramPlan>& plan = reg.plan;
  const PlanNode& node = plan->nodes[node_index];
  const HostId self = options_.host.id;
  const int src_v = node.inputs[0];
  const int dst_v = node.outputs[0];
  const PlanValue& src = plan->values[src_v];
  const PlanValue& dst = plan->values[dst_v];

  // Post a receive slot for every destination shard here.
  std::vector<ShardPieceMessage> early_pieces;
  std::vector<std::tuple<SlotKey, int, absl::Status>> lost_pieces;
  // Destinations of a run whose slot is posted already (a peer repeating
  // a run id): they fail at once; the first copy's transfer goes on.
  std::vector<BufferRef> refused;
  for (int d = 0; d < dst.mesh.size(); ++d) {
    if (dst.shard_hosts[d] != self) continue;
    BufferRef buffer = store_.Allocate(dst.shard_local_device[d], dst.shard_shape, run.client);
    values[dst_v][LocalIndex(reg, dst_v, d)] = buffer;
    const SlotKey key{run.run, node_index, d};
    MutexLock lock(&mu_);
    if (shut_down_) {
      buffer->SetReady(absl::UnavailableError(
          absl::StrCat(self.ToString(), " shut down before a transfer arrived")));
      continue;
    }
    const int n = static_cast<int>(node.pieces[d].size());
    auto [slot, inserted] = slots_.try_emplace(key);
    if (!inserted) {
      refused.push_back(buffer);
      continue;
    }
    slot->second = Slot{buffer, plan, n, absl::OkStatus(), std::vector<bool>(n, false)};
    for (int i = 0; i < n && !lost_peers_.empty(); ++i) {
      auto lost = lost_peers_.find(src.shard_hosts[node.pieces[d][i].src_shard]);
      if (lost != lost_peers_.end()) lost_pieces.emplace_back(key, i, lost->second);
    }
    if (auto it = early_.find(key); it != early_.end()) {
      for (auto& p : it->second.pieces) {
        early_bytes_ -= p.payload_bytes();
        --early_count_;
        early_pieces.push_back(std::move(p));
      }
      early_.erase(it);
    }
    if (auto it = dropped_.find(key); it != dropped_.end()) {
      for (int i = 0; i < n; ++i) lost_pieces.emplace_back(key, i, it->second);
      dropped_.erase(it);
    }
  }
  for (const BufferRef& b : refused) {
    b->SetReady(absl::InvalidArgumentError(absl::StrCat(
        run.run.ToString(), " was enqueued on ", self.ToString(),
        " again while its first copy's transfer into this shard was waiting (a repeated "
        "run id)")));
  }
  for (ShardPieceMessage& p : early_pieces) DeliverPiece(std::move(p));
  for (auto& [key, i, status] : lost_pieces) PieceDone(key, i, status);

  // Send (or copy locally) every piece whose source shard is here.
  for (int d = 0; d < dst.mesh.size(); ++d) {
    for (size_t i = 0; i < node.pieces[d].size(); ++i) {
      const ReshardPiece& piece = node.pieces[d][i];
      if (src.shard_hosts[piece.src_shard] != self) continue;
      const BufferRef source = values[src_v][LocalIndex(reg, src_v, piece.src_shard)];
      const HostId to = dst.shard_hosts[d];
      const SlotKey key{run.run, node_index, d};
      if (to == self) {
        const BufferRef target = values[dst_v][LocalIndex(reg, dst_v, d)];
        source->ready().OnReady([this, key, i, source, target, &piece, &src,
                                 plan](const absl::StatusOr<Unit>& ready) {
          FillSlot(key, static_cast<int>(i), target, piece,
                   PieceSource{source, nullptr, nullptr, src.shard_shape.dims, piece.src_offset},
                   ready.status());
        });
        continue;
      }
      DataTransport* transport = options_.transport;
      TraceRecorder* trace = options_.trace;
      Clock* clock = options_.clock;
      const int piece_index = static_cast<int>(i);
      source->ready().OnReady([transport, trace, clock, self, to, key, source, &piece,
                               piece_index, &src, plan](const absl::StatusOr<Unit>& ready) {
        ShardPieceMessage message{key.run, key.node, key.shard, piece_index, ready.status(), {}};
        if (trace->enabled()) {
          trace->Record(TraceEvent{TraceKind::kSend, self, source->device(), key.run, key.node,
                                   "reshard", clock->NowMicros(), 0,
                                   TraceFlowId(key.run, key.node, key.shard, piece_index)});
        }
        if (!ready.ok()) {
          transport->SendPiece(self, to, std::move(message));
          return;
        }
        const int64_t elem = ir::ByteSize(src.shard_shape.dtype);
        int64_t n = 1;
        for (int64_t e : piece.extent) n *= e;
        if (const std::byte* base = source->data();
            base != nullptr && transport->CarriesReferences()) {
          // Within the process, from memory the host can read: the
          // receiver copies straight from the source shard, which the
          // reference keeps alive until then.
          message.reference = std::make_shared<const PieceReference>(PieceReference{
              source, base, src.shard_shape.dims, piece.src_offset, n * elem});
          transport->SendPiece(self, to, std::move(message));
          return;
        }
        absl::StatusOr<backend::DeviceAllocation*> storage = source->storage();
        if (!storage.ok()) {
          message.status = storage.status();
          transport->SendPiece(self, to, std::move(message));
          return;
        }
        // The device copies the box out into the message's bytes, compact.
        auto out = std::make_shared<ShardPieceMessage>(std::move(message));
        out->bytes.resize(static_cast<size_t>(n * elem));
        backend::BoxCopy box;
        box.src_dims = src.shard_shape.dims;
        box.src_offset = piece.src_offset;
        box.dst_dims = piece.extent;
        box.dst_offset.assign(piece.extent.size(), 0);
        box.extent = piece.extent;
        box.element_bytes = elem;
        source->backend()->CopyOut(
            **storage, out->bytes.data(), box,
            [transport, self, to, source, out](absl::Status status) {
              if (!status.ok()) {
                out->status = status;
                out->bytes.clear();
              }
              transport->SendPiece(self, to, std::move(*out));
            });
      });
    }
  }
}

void HostExecutor::DeliverPiece(ShardPieceMessage message) {
  const SlotKey key{message.run, message.node, message.dst_shard};
  BufferRef target;
  std::shared_ptr<const ProgramPlan> plan;
  {
    MutexLock lock(&mu_);
    auto it = slots_.find(key);
    if (it == slots_.end()) {
      if (shut_down_) return;
      const int64_t bytes = message.payload_bytes();
      if (early_bytes_ + bytes > options_.early_piece_budget_bytes ||
          early_count_ + 1 > options_.early_piece_budget_count) {
        DropEarlyLocked(key, absl::ResourceExhaustedError(absl::StrCat(
                                 options_.host.id.ToString(), " holds ", early_count_,
                                 " pieces (", early_bytes_, " bytes) for runs not yet here (at most ",
                                 options_.early_piece_budget_count, " pieces, ",
                                 options_.early_piece_budget_bytes, " bytes); a piece of ",
                                 message.run.ToString(), " was dropped")));
        return;
      }
      Early& early = early_[key];
      if (early.pieces.empty()) early.arrived = absl::Now();
      early_bytes_ += bytes;
      ++early_count_;
      early.pieces.push_back(std::move(message));
      return;
    }
    target = it->second.buffer;
    plan = it->second.plan;
  }
  const auto& pieces = plan->nodes[message.node].pieces[message.dst_shard];
  if (message.piece < 0 || message.piece >= static_cast<int>(pieces.size())) {
    CW_LOG(kWarning) << options_.host.id.ToString() << ": dropped piece " << message.piece
                    << " of node " << message.node << " of " << message.run.ToString()
                    << ": no such piece";
    return;
  }
  const ReshardPiece& piece = pieces[message.piece];
  absl::Status status = message.status;
  int64_t expected = ir::ByteSize(target->shape().dtype);
  for (int64_t e : piece.extent) expected *= e;
  if (status.ok() && message.payload_bytes() != expected) {
    status = absl::InvalidArgumentError(
        absl::StrCat("piece ", message.piece, " of node ", message.node, " of ",
                     message.run.ToString(), " has ", message.payload_bytes(),
                     " bytes, expected ", expected));
  }
  if (const std::shared_ptr<const PieceReference>& ref = message.reference; ref != nullptr) {
    FillSlot(key, message.piece, target, piece,
             PieceSource{nullptr, ref->keep_alive, ref->data, ref->dims, ref->offset}, status);
    return;
  }
  auto bytes = std::make_shared<const std::string>(std::move(message.bytes));
  const auto* data = reinterpret_cast<const std::byte*>(bytes->data());
  FillSlot(key, message.piece, target, piece,
           PieceSource{nullptr, std::move(bytes), data, piece.extent,
                       std::vector<int64_t>(piece.extent.size(), 0)},
           status);
}

void HostExecutor::FillSlot(const SlotKey& key, int piece_index, const BufferRef& dst,
                            const ReshardPiece& piece, PieceSource source, absl::Status status) {
  if (!status.ok()) {
    PieceDone(key, piece_index, status, dst.get());
    return;
  }
  dst->allocated().OnReady([this, key, piece_index, dst, &piece, source = std::move(source)](
                               const absl::StatusOr<Unit>& alloc) {
    if (!alloc.ok()) {
      PieceDone(key, piece_index, alloc.status(), dst.get());
      return;
    }
    absl::StatusOr<backend::DeviceAllocation*> to = dst->storage();
    if (!to.ok()) {
      PieceDone(key, piece_index, to.status(), dst.get());
      return;
    }
    const int64_t start = options_.clock->NowMicros();
    backend::BoxCopy box;
    box.src_dims = source.dims;
    box.src_offset = source.offset;
    box.dst_dims = dst->shape().dims;
    box.dst_offset = piece.dst_offset;
    box.extent = piece.extent;
    box.element_bytes = ir::ByteSize(dst->shape().dtype);
    // Holds the source and the destination until the copy completed.
    backend::Completion done = [this, key, piece_index, dst, start,
                                keep = source.buffer != nullptr
                                           ? std::shared_ptr<const void>(source.buffer)
                                           : source.keep_alive](absl::Status status) {
      if (status.ok() && options_.trace->enabled()) {
        options_.trace->Record(TraceEvent{TraceKind::kTransfer, options_.host.id,
                                          dst->device(), key.run, key.node, "reshard", start,
                                          options_.clock->NowMicros() - start,
                                          TraceFlowId(key.run, key.node, key.shard, piece_index)});
      }
      PieceDone(key, piece_index, status, dst.get());
    };
    backend::Device* device = dst->backend();
    if (source.buffer == nullptr) {
      device->CopyIn(source.data, **to, box, std::move(done));
      return;
    }
    absl::StatusOr<backend::DeviceAllocation*> from = source.buffer->storage();
    if (!from.ok()) {
      std::move(done)(from.status());
    } else if (source.buffer->backend() == device) {
      device->CopyWithin(**from, **to, box, std::move(done));
    } else {
      source.buffer->backend()->CopyToPeer(**from, *device, **to, box, std::move(done));
    }
  });
}
void HostExecutor::PeerLost(HostId host, const absl::Status& status) {
  // Runs waiting for the lost host's subtree count it as in (later runs do
  // from the start, Gather).
  std::vector<std::pair<std::shared_ptr<const Registered>, SubtreeReport>> complete;
  {
    MutexLock lock(&report_mu_);
    {
      MutexLock programs_lock(&mu_);
      lost_peers_[host] = status;
    }
    for (auto it = gathering_.begin(); it != gathering_.end();) {
      auto next = std::next(it);
      Gathering& g = it->second;
      const std::vector<HostId>& children = g.program->tree.children;
      const auto child = std::find(children.begin(), children.end(), host);
      if (child != children.end()) {
        g.in |= uint64_t{1} << (1 + (child - children.begin()));
        if (g.complete()) {
          complete.emplace_back(g.program, SubtreeReport{id(), g.program->plan->id, it->first,
                                                         g.device_us, g.launches});
          gathering_.erase(it);
        }
      }
      it = next;
    }
  }
  for (const auto& [program, report] : complete) ReportUp(*program, report);
  std::vector<std::pair<SlotKey, int>> failed;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, slot] : slots_) {
      const PlanNode& node = slot.plan->nodes[key.node];
      const PlanValue& src = slot.plan->values[node.inputs[0]];
      const auto& pieces = node.pieces[key.shard];
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (!slot.done[i] && src.shard_hosts[pieces[i].src_shard] == host) {
          failed.emplace_back(key, static_cast<int>(i));
        }
      }
    }
  }
  for (const auto& [key, i] : failed) PieceDone(key, i, status);
}

void HostExecutor::PieceDone(const SlotKey& key, int piece_index, const absl::Status& status,
                             const DeviceBuffer* buffer) {
  Promise<Unit> ready;
  absl::Status final_status;
  {
    MutexLock lock(&mu_);
    auto it = slots_.find(key);
    if (it == slots_.end()) return;  // failed by shutdown
    Slot& slot = it->second;
    // A copy into another buffer than the slot's (a repeated run's,
    // refused) is not this slot's piece.
    if (buffer != nullptr && slot.buffer.get() != buffer) return;
    if (piece_index < 0 || static_cast<size_t>(piece_index) >= slot.done.size()) return;
    if (slot.done[piece_index]) return;
    slot.done[piece_index] = true;
    if (!status.ok() && slot.status.ok()) slot.status = status;
    if (--slot.remaining > 0) return;
    ready = slot.buffer->ready_promise();
    final_status = slot.status;
    slots_.erase(it);
  }
  if (final_status.ok()) {
    ready.Set(Unit{});
  } else {
    ready.Set(final_status);
  }
}

}  // namespace causeway
