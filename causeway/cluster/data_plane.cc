#include "causeway/cluster/data_plane.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "causeway/base/check.h"
#include "causeway/base/limits.h"
#include "causeway/transport/grpc/wire_codec.h"

namespace causeway {

using grpc_transport::BatchWriter;

namespace {

// Calls `emit(offset, length)` for each chunk of at most kDataChunkBytes of a
// `total`-byte payload, in order; once, with length 0, for an empty one.
template <typename Emit>
void ForEachChunk(int64_t total, Emit emit) {
  int64_t offset = 0;
  do {
    const int64_t n = std::min(kDataChunkBytes, total - offset);
    emit(offset, n);
    offset += n;
  } while (offset < total);
}

// A collective's key in a contribution chunk or a readiness message, and
// back.
template <typename M>
void SetCollectiveKey(const CollectiveKey& key, M& m) {
  m.set_run(key.run.value());
  m.set_node(key.node);
  m.set_index(key.index);
  m.set_group_leader(key.group_leader);
}

template <typename M>
CollectiveKey CollectiveKeyOf(const M& m) {
  return CollectiveKey{RunId(m.run()), m.node(), m.index(), m.group_leader()};
}

}  // namespace

// The sending half of the stream to one peer. The stream opens on the
// writer thread at the first write, so no caller waits for a connection.
class DataPlane::Sender {
 public:
  Sender(std::shared_ptr<grpc::Channel> channel, const std::string& token)
      : stub_(cluster::Data::NewStub(channel)) {
    grpc_transport::AddCallMetadata(context_, token);
    // A peer more than 1 GiB behind is not reading: the writer gives up,
    // and the stream is reopened for later messages (DataPlane::Post).
    writer_ = std::make_unique<BatchWriter<cluster::DataBatch, cluster::DataMessage>>(
        [this](const cluster::DataBatch& batch) {
          if (stream_ == nullptr) stream_ = stub_->Push(&context_, &ack_);
          return stream_->Write(batch);
        },
        grpc_transport::WriterLimit{size_t{1} << 30, absl::ZeroDuration()});
  }

  ~Sender() {
    writer_->Close();  // the writer thread is gone: stream_ is ours
    if (stream_ != nullptr) {
      stream_->WritesDone();
      context_.TryCancel();
      stream_->Finish().IgnoreError();
    }
  }

  bool Post(cluster::DataMessage message) { return writer_->Post(std::move(message)); }
  bool broken() const { return writer_->broken(); }
  // Unblocks a write to a peer that stopped reading.
  void Cancel() { context_.TryCancel(); }

 private:
  std::unique_ptr<cluster::Data::Stub> stub_;
  grpc::ClientContext context_;
  cluster::DataAck ack_;
  std::unique_ptr<grpc::ClientWriter<cluster::DataBatch>> stream_;  // writer thread only
  std::unique_ptr<BatchWriter<cluster::DataBatch, cluster::DataMessage>> writer_;
};

// The payloads of one Push stream being reassembled from their chunks, held
// against the data plane's bounds for the stream's peer address; released
// when a payload is whole or dropped, and when the stream ends.
class DataPlane::Reassembly {
 public:
  Reassembly(DataPlane* plane, std::string peer) : plane_(plane), peer_(std::move(peer)) {}
  ~Reassembly() {
    int64_t held = 0;
    for (const auto& [key, p] : pieces_) held += p.received;
    for (const auto& [key, p] : contributions_) held += p.received;
    if (held > 0) plane_->ReleaseReassembly(peer_, held);
  }
  Reassembly(const Reassembly&) = delete;
  Reassembly& operator=(const Reassembly&) = delete;

  using PieceKey = std::tuple<int64_t, int, int, int>;
  using ContributionKey = std::tuple<int64_t, int, int, int, int>;

  // Adds a chunk; true (with the payload in `out`) once the payload is whole.
  bool AddPiece(const PieceKey& key, int64_t offset, int64_t total, std::string chunk,
                std::string& out) {
    return Add(pieces_, key, offset, total, std::move(chunk), out);
  }
  bool AddContribution(const ContributionKey& key, int64_t offset, int64_t total,
                       std::string chunk, std::string& out) {
    return Add(contributions_, key, offset, total, std::move(chunk), out);
  }

 private:
  // A payload's chunks so far: kept as they came (the memory held is what
  // arrived, never what the sender declared), joined once whole.
  struct Partial {
    std::vector<std::string> chunks;
    int64_t received = 0;
    int64_t total = 0;
  };

  template <typename Key>
  bool Add(absl::flat_hash_map<Key, Partial>& partial, const Key& key, int64_t offset,
           int64_t total, std::string chunk, std::string& out) {
    const ReassemblyLimits& bounds = plane_->reassembly_limits_;
    const int64_t largest = std::min(bounds.max_payload_bytes, limits::kMaxPayloadBytes);
    const int64_t size = static_cast<int64_t>(chunk.size());
    if (total < 0 || total > largest ||
        offset < 0 || size > total - std::min(offset, total)) {
      if (LogDrop()) CW_LOG(kWarning)
          << "data plane: a chunk of " << size << " bytes at offset " << offset
          << " of a payload of " << total << " bytes from " << peer_ << " (at most " << largest
          << " bytes here); payload dropped";
      Drop(partial, key);
      return false;
    }
    auto it = partial.find(key);
    if (it == partial.end()) {
      if (offset == 0 && size == total) {
        out = std::move(chunk);
        return true;
      }
      if (partial.size() >= static_cast<size_t>(limits::kMaxPartialPayloadsPerStream)) {
        if (LogDrop()) CW_LOG(kWarning)
            << "data plane: more than " << limits::kMaxPartialPayloadsPerStream
            << " payloads in flight on one stream from " << peer_ << "; payload dropped";
        plane_->CountDroppedChunk();
        return false;
      }
      if (offset != 0) {
        // A later chunk of a payload already dropped (or never begun).
        plane_->CountDroppedChunk();
        return false;
      }
      it = partial.emplace(key, Partial{{}, 0, total}).first;
    }
    Partial& p = it->second;
    if (p.received != offset || p.total != total) {
      // Out of order or inconsistent: a sender bug; drop the payload (its
      // consumer fails by timeout or by the sender's loss).
      if (LogDrop()) CW_LOG(kWarning)
          << "data plane: chunk at offset " << offset << " of " << total << " bytes after "
          << p.received << " of " << p.total << " from " << peer_ << "; payload dropped";
      Drop(partial, key);
      return false;
    }
    if (p.received + size < total) {
      if (!plane_->ReserveReassembly(peer_, size)) {
        if (LogDrop()) CW_LOG(kWarning)
            << "data plane: payloads being reassembled from " << peer_
            << " would pass this host's bound (" << bounds.per_peer_bytes << " bytes a peer, "
            << bounds.per_host_bytes << " in all); payload of " << total << " bytes dropped";
        Drop(partial, key);
        return false;
      }
      p.received += size;
      p.chunks.push_back(std::move(chunk));
      return false;
    }
    // The last chunk: join (no reservation for it; held only while joined).
    out.clear();
    out.reserve(static_cast<size_t>(total));
    for (const std::string& c : p.chunks) out.append(c);
    out.append(chunk);
    const int64_t held = p.received;
    partial.erase(it);
    if (held > 0) plane_->ReleaseReassembly(peer_, held);
    return true;
  }

  // The first drop on a stream is logged, then every 1000th.
  bool LogDrop() {
    ++drops_;
    return drops_ == 1 || drops_ % 1000 == 0;
  }

  template <typename Key>
  void Drop(absl::flat_hash_map<Key, Partial>& partial, const Key& key) {
    plane_->CountDroppedChunk();
    auto it = partial.find(key);
    if (it == partial.end()) return;
    const int64_t held = it->second.received;
    partial.erase(it);
    if (held > 0) plane_->ReleaseReassembly(peer_, held);
  }

  DataPlane* const plane_;
  const std::string peer_;
  absl::flat_hash_map<PieceKey, Partial> pieces_;
  absl::flat_hash_map<ContributionKey, Partial> contributions_;
  int64_t drops_ = 0;
};

// The receiving half: one Push stream per sending peer. Chunks of one
// payload arrive in order on one stream and are reassembled per stream.
class DataPlane::Service final : public cluster::Data::Service {
 public:
  explicit Service(DataPlane* plane) : plane_(plane) {}

  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<cluster::DataBatch>* reader,
                    cluster::DataAck*) override {
    grpc::Status auth = grpc_transport::CheckCallMetadata(*context, plane_->token_);
    if (!auth.ok()) return auth;
    Reassembly reassembly(plane_, grpc_transport::PeerHost(context->peer()));
    cluster::DataBatch batch;
    while (reader->Read(&batch)) {
      HostExecutor* host;
      CollectiveHub* hub;
      ProcessCollectives* library;
      {
        MutexLock lock(&plane_->mu_);
        host = plane_->host_;
        hub = plane_->hub_;
        library = plane_->library_;
      }
      if (host == nullptr || hub == nullptr) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker not started");
      }
      for (cluster::DataMessage& m : *batch.mutable_messages()) {
        switch (m.body_case()) {
          case cluster::DataMessage::kPiece: {
            cluster::PieceChunk& c = *m.mutable_piece();
            std::string bytes;
            if (!reassembly.AddPiece(
                    Reassembly::PieceKey{c.run(), c.node(), c.dst_shard(), c.piece()}, c.offset(),
                    c.total_bytes(), std::move(*c.mutable_data()), bytes)) {
              break;
            }
            host->DeliverPiece(ShardPieceMessage{RunId(c.run()), c.node(), c.dst_shard(),
                                                 c.piece(), wire::DecodeStatus(c.status()),
                                                 std::move(bytes)});
            break;
          }
          case cluster::DataMessage::kContribution: {
            cluster::ContributionChunk& c = *m.mutable_contribution();
            std::string bytes;
            if (!reassembly.AddContribution(
                    Reassembly::ContributionKey{c.run(), c.node(), c.index(), c.group_leader(),
                                                c.rank()},
                    c.offset(), c.total_bytes(), std::move(*c.mutable_data()), bytes)) {
              break;
            }
            hub->DeliverContribution(CollectiveKeyOf(c), c.rank(), std::move(bytes));
            break;
          }
          case cluster::DataMessage::kAbort:
            hub->AbortGangFromPeer(RunId(m.abort().run()), m.abort().node(),
                                   wire::DecodeStatus(m.abort().status()));
            break;
          case cluster::DataMessage::kReady: {
            const cluster::CollectiveReady& r = m.ready();
            hub->DeliverReady(CollectiveKeyOf(r), HostId(r.host()), r.generation());
            break;
          }
          case cluster::DataMessage::kRendezvous:
            if (library != nullptr) {
              cluster::RendezvousEntry& e = *m.mutable_rendezvous();
              library->DeliverRendezvous(HostId(e.host()), std::move(*e.mutable_key()),
                                    std::move(*e.mutable_value()));
            }
            break;
          case cluster::DataMessage::kReport: {
            // Checked by the host: a child of it in the program's tree,
            // once per run; device time and launches clamped.
            const cluster::SubtreeReport& r = m.report();
            host->ChildReported(SubtreeReport{HostId(r.child()), ProgramId(r.program()),
                                              RunId(r.run()), r.device_us(), r.launches()});
            break;
          }
          case cluster::DataMessage::BODY_NOT_SET:
            break;
        }
      }
    }
    return grpc::Status::OK;
  }

 private:
  DataPlane* const plane_;
};

ReassemblyLimits ReassemblyLimits::ForHost(int devices, int64_t memory_bytes) {
  constexpr int64_t kFloor = int64_t{64} << 20;
  ReassemblyLimits l;
  l.max_payload_bytes = std::clamp<int64_t>(memory_bytes, 0, limits::kMaxPayloadBytes);
  const int64_t all = std::max<int64_t>(1, devices) * std::max<int64_t>(0, memory_bytes);
  l.per_host_bytes = std::max({kFloor, l.max_payload_bytes, all});
  l.per_peer_bytes = std::max({kFloor, l.max_payload_bytes, all / 2});
  return l;
}

DataPlane::DataPlane(std::string token, std::shared_ptr<grpc::ChannelCredentials> creds,
                     ReassemblyLimits reassembly)
    : token_(std::move(token)), creds_(std::move(creds)),
      service_(std::make_unique<Service>(this)), reassembly_limits_(reassembly) {}

bool DataPlane::ReserveReassembly(const std::string& peer, int64_t bytes) {
  MutexLock lock(&reassembly_mu_);
  int64_t& mine = reassembly_by_peer_[peer];
  if (mine + bytes > reassembly_limits_.per_peer_bytes ||
      reassembly_.held_bytes + bytes > reassembly_limits_.per_host_bytes) {
    if (mine == 0) reassembly_by_peer_.erase(peer);
    return false;
  }
  mine += bytes;
  reassembly_.held_bytes += bytes;
  reassembly_.peak_bytes = std::max(reassembly_.peak_bytes, reassembly_.held_bytes);
  return true;
}

void DataPlane::ReleaseReassembly(const std::string& peer, int64_t bytes) {
  MutexLock lock(&reassembly_mu_);
  reassembly_.held_bytes -= bytes;
  auto it = reassembly_by_peer_.find(peer);
  CW_CHECK(it != reassembly_by_peer_.end() && it->second >= bytes);
  it->second -= bytes;
  if (it->second == 0) reassembly_by_peer_.erase(it);
}

void DataPlane::CountDroppedChunk() {
  MutexLock lock(&reassembly_mu_);
  ++reassembly_.dropped_chunks;
}

ReassemblyStats DataPlane::reassembly_stats() const {
  MutexLock lock(&reassembly_mu_);
  return reassembly_;
}

DataPlane::~DataPlane() { Shutdown(); }

grpc::Service* DataPlane::service() { return service_.get(); }

HostId DataPlane::self() const {
  MutexLock lock(&mu_);
  return self_;
}

void DataPlane::Attach(HostId self, HostExecutor* host, CollectiveHub* hub,
                       ProcessCollectives* library) {
  MutexLock lock(&mu_);
  self_ = self;
  host_ = host;
  hub_ = hub;
  library_ = library;
}

ProcessCollectives* DataPlane::process_collectives() {
  MutexLock lock(&mu_);
  return library_;
}

std::string DataPlane::HostnameOf(HostId host) const {
  MutexLock lock(&mu_);
  auto it = peers_.find(host);
  if (it == peers_.end()) return "";
  const std::string& address = it->second.address;
  // HOST:PORT or [V6]:PORT
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  return address.substr(0, address.rfind(':'));
}

void DataPlane::SendReady(HostId to, const CollectiveKey& key, int64_t generation) {
  cluster::DataMessage m;
  cluster::CollectiveReady& r = *m.mutable_ready();
  SetCollectiveKey(key, r);
  r.set_host(self().value());
  r.set_generation(generation);
  Post(to, std::move(m));
}

void DataPlane::SendReport(HostId to, const SubtreeReport& report) {
  cluster::DataMessage m;
  cluster::SubtreeReport& r = *m.mutable_report();
  r.set_child(report.child.value());
  r.set_program(report.program.value());
  r.set_run(report.run.value());
  r.set_device_us(report.device_us);
  r.set_launches(report.launches);
  Post(to, std::move(m));
}

void DataPlane::SendRendezvous(HostId to, const std::string& key, const std::string& value) {
  cluster::DataMessage m;
  cluster::RendezvousEntry& e = *m.mutable_rendezvous();
  e.set_host(self().value());
  e.set_key(key);
  e.set_value(value);
  Post(to, std::move(m));
}

void DataPlane::UpdatePeers(const cluster::PeerTable& table) {
  std::vector<std::pair<HostId, absl::Status>> newly_lost;
  std::vector<std::shared_ptr<Sender>> closing;
  HostExecutor* host;
  CollectiveHub* hub;
  ProcessCollectives* library;
  {
    MutexLock lock(&mu_);
    host = host_;
    hub = hub_;
    library = library_;
    for (const cluster::Peer& p : table.peers()) {
      const HostId h(p.host());
      PeerInfo& info = peers_[h];
      const bool was_lost = info.lost;
      info.address = p.data_address();
      info.lost = p.lost();
      for (int64_t d : p.devices()) device_hosts_[DeviceId(d)] = h;
      if (p.lost() && !was_lost) {
        newly_lost.emplace_back(h, absl::UnavailableError(p.lost_reason()));
        if (auto it = senders_.find(h); it != senders_.end()) {
          closing.push_back(std::move(it->second));
          senders_.erase(it);
        }
      }
    }
  }
  for (auto& s : closing) s->Cancel();
  closing.clear();  // joins their writer threads
  for (const auto& [h, status] : newly_lost) {
    if (host != nullptr) host->PeerLost(h, status);
    if (hub != nullptr) hub->HostLost(h, status);
    if (library != nullptr) library->HostLost(h, status);
  }
}

HostId DataPlane::HostOf(DeviceId device) const {
  MutexLock lock(&mu_);
  auto it = device_hosts_.find(device);
  return it == device_hosts_.end() ? HostId() : it->second;
}

std::shared_ptr<DataPlane::Sender> DataPlane::SenderFor(HostId to) {
  MutexLock lock(&mu_);
  if (shut_down_) return nullptr;
  auto peer = peers_.find(to);
  if (peer == peers_.end() || peer->second.lost) return nullptr;
  std::shared_ptr<Sender>& sender = senders_[to];
  if (sender == nullptr) {
    sender = std::make_shared<Sender>(grpc_transport::MakeChannel(peer->second.address, creds_),
                                      token_);
  }
  return sender;
}

void DataPlane::Post(HostId to, cluster::DataMessage message) {
  std::shared_ptr<Sender> sender = SenderFor(to);
  if (sender == nullptr) return;  // lost: its consumers fail through the peer table
  if (sender->broken()) {
    // The stream broke while the peer is still in the table: later messages
    // go on a fresh stream (what was in flight on the broken one is lost).
    CW_LOG(kWarning) << "data stream to " << to.ToString() << " broke; reopening it";
    {
      MutexLock lock(&mu_);
      if (auto it = senders_.find(to); it != senders_.end() && it->second == sender) {
        senders_.erase(it);
      }
    }
    sender = SenderFor(to);
    if (sender == nullptr) return;
  }
  sender->Post(std::move(message));
}

void DataPlane::SendPiece(HostId from, HostId to, ShardPieceMessage piece) {
  HostExecutor* local = nullptr;
  {
    MutexLock lock(&mu_);
    if (to == self_) local = host_;
  }
  if (local != nullptr) {
    local->DeliverPiece(std::move(piece));
    return;
  }
  const int64_t total = static_cast<int64_t>(piece.bytes.size());
  {
    MutexLock lock(&mu_);
    bytes_sent_ += total;
  }
  ForEachChunk(total, [&](int64_t offset, int64_t n) {
    cluster::DataMessage m;
    cluster::PieceChunk& c = *m.mutable_piece();
    c.set_run(piece.run.value());
    c.set_node(piece.node);
    c.set_dst_shard(piece.dst_shard);
    c.set_piece(piece.piece);
    wire::EncodeStatus(piece.status, c.mutable_status());
    c.set_total_bytes(total);
    c.set_offset(offset);
    if (n == total) {
      *c.mutable_data() = std::move(piece.bytes);  // one chunk: no copy
    } else {
      c.set_data(piece.bytes.data() + offset, static_cast<size_t>(n));
    }
    Post(to, std::move(m));
  });
}

void DataPlane::SendContribution(HostId to, const CollectiveKey& key, int rank,
                                 const void* data, int64_t bytes) {
  {
    MutexLock lock(&mu_);
    bytes_sent_ += bytes;
  }
  const char* p = static_cast<const char*>(data);
  ForEachChunk(bytes, [&](int64_t offset, int64_t n) {
    cluster::DataMessage m;
    cluster::ContributionChunk& c = *m.mutable_contribution();
    SetCollectiveKey(key, c);
    c.set_rank(rank);
    c.set_total_bytes(bytes);
    c.set_offset(offset);
    c.set_data(p + offset, static_cast<size_t>(n));
    Post(to, std::move(m));
  });
}

void DataPlane::BroadcastAbort(RunId run, int node, const absl::Status& status) {
  std::vector<HostId> targets;
  {
    MutexLock lock(&mu_);
    for (const auto& [h, info] : peers_) {
      if (h != self_ && !info.lost) targets.push_back(h);
    }
  }
  for (HostId h : targets) {
    cluster::DataMessage m;
    m.mutable_abort()->set_run(run.value());
    m.mutable_abort()->set_node(node);
    wire::EncodeStatus(status, m.mutable_abort()->mutable_status());
    Post(h, std::move(m));
  }
}

void DataPlane::Shutdown() {
  absl::flat_hash_map<HostId, std::shared_ptr<Sender>> senders;
  {
    MutexLock lock(&mu_);
    shut_down_ = true;
    senders.swap(senders_);
  }
  for (auto& [h, s] : senders) s->Cancel();
}

int64_t DataPlane::bytes_sent() const {
  MutexLock lock(&mu_);
  return bytes_sent_;
}

}  // namespace causeway
