// Tests for causeway/transport/inproc/inproc_transport.h: inline delivery
// within an island, DCN latency and bandwidth emulation between islands
// (timed with the real clock; only lower bounds, or upper bounds of
// seconds), Shutdown flushing delayed pieces, and the cross-island byte
// count. Threads synchronise through the recording host's mutex, never
// sleeps.

#include "causeway/transport/inproc/inproc_transport.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/async/future.h"
#include "causeway/base/clock.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/literal.h"
#include "causeway/testing/status_matchers.h"
#include "causeway/transport/services.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Delivery {
  HostId host;
  ShardPieceMessage piece;
  std::thread::id thread;
  int64_t at_micros = 0;  // Clock::Real()
};

// Every delivery to any RecordingHost sharing one log, in delivery order.
// Thread-safe.
class DeliveryLog {
 public:
  void Add(Delivery d) {
    MutexLock lock(&mu_);
    deliveries_.push_back(std::move(d));
  }
  // Waits until at least `n` pieces were delivered; returns whether they were
  // within `timeout`.
  bool AwaitCount(size_t n, absl::Duration timeout = absl::Seconds(30)) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return deliveries_.size() >= n; },
        timeout);
  }
  std::vector<Delivery> deliveries() const {
    MutexLock lock(&mu_);
    return deliveries_;
  }
  size_t size() const {
    MutexLock lock(&mu_);
    return deliveries_.size();
  }

 private:
  mutable Mutex mu_;
  std::vector<Delivery> deliveries_ ABSL_GUARDED_BY(mu_);
};

// A HostService that only records DeliverPiece; everything else is
// unimplemented.
class RecordingHost final : public HostService {
 public:
  RecordingHost(HostId id, DeliveryLog* log) : id_(id), log_(log) {}

  HostId id() const override { return id_; }
  absl::Status RegisterProgram(std::shared_ptr<const ProgramPlan>) override {
    return absl::UnimplementedError("recording host");
  }
  void UnregisterProgram(ProgramId) override {}
  void EnqueueRun(const RunRequest&) override {}
  absl::Status PutShard(ArrayId, int, int, ClientId, ir::Literal) override {
    return absl::UnimplementedError("recording host");
  }
  Future<ir::Literal> FetchShard(ArrayId, int) override {
    return Future<ir::Literal>::Ready(absl::UnimplementedError("recording host"));
  }
  Future<Unit> AwaitShard(ArrayId, int) override {
    return Future<Unit>::Ready(absl::UnimplementedError("recording host"));
  }
  void ReleaseArrays(absl::Span<const ArrayId>) override {}
  void ReleaseOwner(ClientId) override {}
  void SetMemoryQuota(ClientId, int64_t) override {}

  Future<std::vector<DeviceCounters>> GetCounters(bool) override {
    return Future<std::vector<DeviceCounters>>::Ready(
        absl::UnimplementedError("not used by these tests"));
  }
  void DeliverPiece(ShardPieceMessage piece) override {
    log_->Add(Delivery{id_, std::move(piece), std::this_thread::get_id(),
                       Clock::Real()->NowMicros()});
  }

 private:
  const HostId id_;
  DeliveryLog* const log_;
};

ShardPieceMessage Piece(int piece, size_t bytes) {
  ShardPieceMessage m;
  m.run = RunId(9);
  m.node = 3;
  m.dst_shard = 1;
  m.piece = piece;
  m.bytes.assign(bytes, static_cast<char>(piece));
  return m;
}

// Hosts 0 and 1 on island 0, host 2 on island 1, host 3 on island 2. The
// hosts outlive the transport (declared first in each test).
struct Hosts {
  DeliveryLog log;
  RecordingHost h0{HostId(0), &log};
  RecordingHost h1{HostId(1), &log};
  RecordingHost h2{HostId(2), &log};
  RecordingHost h3{HostId(3), &log};

  void RegisterWith(InProcessDataTransport& t) {
    t.RegisterHost(&h0, IslandId(0));
    t.RegisterHost(&h1, IslandId(0));
    t.RegisterHost(&h2, IslandId(1));
    t.RegisterHost(&h3, IslandId(2));
  }
};

TEST(InProcessDataTransportTest, SameIslandPieceIsDeliveredInlineOnTheSendingThread) {
  Hosts hosts;
  // DCN emulation applies only between islands.
  InProcessDataTransport transport(DcnOptions{absl::Hours(1), 1.0});
  hosts.RegisterWith(transport);

  ShardPieceMessage piece = Piece(4, 16);
  piece.status = absl::DataLossError("poisoned source");
  transport.SendPiece(HostId(0), HostId(1), piece);

  ASSERT_EQ(hosts.log.size(), 1u);  // before SendPiece returned
  const Delivery d = hosts.log.deliveries()[0];
  EXPECT_EQ(d.host, HostId(1));
  EXPECT_EQ(d.thread, std::this_thread::get_id());
  EXPECT_EQ(d.piece.run, RunId(9));
  EXPECT_EQ(d.piece.node, 3);
  EXPECT_EQ(d.piece.dst_shard, 1);
  EXPECT_EQ(d.piece.piece, 4);
  EXPECT_EQ(d.piece.bytes, piece.bytes);
  EXPECT_THAT(d.piece.status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("poisoned")));
  EXPECT_EQ(transport.bytes_sent_between_islands(), 0);
}

TEST(InProcessDataTransportTest, CrossIslandPieceWithoutEmulationIsDeliveredInline) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{});
  hosts.RegisterWith(transport);
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 100));
  ASSERT_EQ(hosts.log.size(), 1u);
  EXPECT_EQ(hosts.log.deliveries()[0].host, HostId(2));
  EXPECT_EQ(hosts.log.deliveries()[0].thread, std::this_thread::get_id());
  EXPECT_EQ(transport.bytes_sent_between_islands(), 100);
}

TEST(InProcessDataTransportTest, CrossIslandPieceArrivesOnTheTimerThreadNoEarlierThanTheLatency) {
  Hosts hosts;
  const absl::Duration latency = absl::Milliseconds(50);
  InProcessDataTransport transport(DcnOptions{latency, 0});
  hosts.RegisterWith(transport);

  const int64_t sent_at = Clock::Real()->NowMicros();
  transport.SendPiece(HostId(1), HostId(2), Piece(7, 64));
  ASSERT_TRUE(hosts.log.AwaitCount(1));

  const Delivery d = hosts.log.deliveries()[0];
  EXPECT_EQ(d.host, HostId(2));
  EXPECT_EQ(d.piece.piece, 7);
  EXPECT_EQ(d.piece.bytes.size(), 64u);
  EXPECT_NE(d.thread, std::this_thread::get_id());
  EXPECT_GE(d.at_micros - sent_at, absl::ToInt64Microseconds(latency));
  EXPECT_EQ(transport.bytes_sent_between_islands(), 64);
}

// Within a process a piece may carry a reference to its source's memory
// instead of bytes: it arrives as sent, keeping the source alive (the
// sender dropped its own hold), and counts its box's bytes on the link
// between islands, delayed or not.
TEST(InProcessDataTransportTest, APieceByReferenceArrivesWithItsSourceAliveAndCountsItsBox) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Milliseconds(1), 0});
  hosts.RegisterWith(transport);
  EXPECT_TRUE(transport.CarriesReferences());

  auto source = std::make_shared<std::vector<float>>(std::vector<float>{0, 1, 2, 3, 4, 5});
  const auto* data = reinterpret_cast<const std::byte*>(source->data());
  std::weak_ptr<std::vector<float>> watch = source;
  ShardPieceMessage piece = Piece(2, 0);
  // The box [1:2, 1:3] of a 2 x 3 shard: 2 floats.
  piece.reference = std::make_shared<const PieceReference>(
      PieceReference{std::move(source), data, {2, 3}, {1, 1}, 8});
  EXPECT_EQ(piece.payload_bytes(), 8);
  transport.SendPiece(HostId(1), HostId(2), std::move(piece));
  ASSERT_TRUE(hosts.log.AwaitCount(1));

  const Delivery d = hosts.log.deliveries()[0];
  ASSERT_NE(d.piece.reference, nullptr);
  EXPECT_TRUE(d.piece.bytes.empty());
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(d.piece.reference->data, data);
  EXPECT_THAT(d.piece.reference->dims, ElementsAre(2, 3));
  EXPECT_THAT(d.piece.reference->offset, ElementsAre(1, 1));
  EXPECT_EQ(transport.bytes_sent_between_islands(), 8);
}

TEST(InProcessDataTransportTest, PiecesOnOneLinkArriveInSendOrder) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Milliseconds(5), 0});
  hosts.RegisterWith(transport);
  for (int i = 0; i < 10; ++i) transport.SendPiece(HostId(0), HostId(2), Piece(i, 8));
  ASSERT_TRUE(hosts.log.AwaitCount(10));
  std::vector<int> order;
  for (const Delivery& d : hosts.log.deliveries()) order.push_back(d.piece.piece);
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(InProcessDataTransportTest, BandwidthSerialisesPiecesOnALink) {
  Hosts hosts;
  // 1 MB at 100 MB/s takes 10 ms on the wire.
  InProcessDataTransport transport(DcnOptions{absl::ZeroDuration(), 100e6});
  hosts.RegisterWith(transport);

  const int64_t sent_at = Clock::Real()->NowMicros();
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 1'000'000));
  transport.SendPiece(HostId(0), HostId(2), Piece(1, 1'000'000));
  ASSERT_TRUE(hosts.log.AwaitCount(2));

  const std::vector<Delivery> d = hosts.log.deliveries();
  EXPECT_EQ(d[0].piece.piece, 0);
  EXPECT_EQ(d[1].piece.piece, 1);
  EXPECT_NE(d[0].thread, std::this_thread::get_id());
  EXPECT_GE(d[0].at_micros - sent_at, 10'000);
  // The second piece waits for the first to leave the wire.
  EXPECT_GE(d[1].at_micros - sent_at, 20'000);
  EXPECT_EQ(transport.bytes_sent_between_islands(), 2'000'000);
}

TEST(InProcessDataTransportTest, BandwidthAndLatencyAddUp) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Milliseconds(15), 100e6});
  hosts.RegisterWith(transport);
  const int64_t sent_at = Clock::Real()->NowMicros();
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 1'000'000));
  ASSERT_TRUE(hosts.log.AwaitCount(1));
  EXPECT_GE(hosts.log.deliveries()[0].at_micros - sent_at, 10'000 + 15'000);
}

TEST(InProcessDataTransportTest, APieceOnAFreeLinkIsNotHeldBehindABusyLink) {
  Hosts hosts;
  // 1000 bytes per second: 10 kB takes 10 s, 10 bytes takes 10 ms.
  InProcessDataTransport transport(DcnOptions{absl::ZeroDuration(), 1000});
  hosts.RegisterWith(transport);
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 10'000));  // island 0 -> 1
  transport.SendPiece(HostId(0), HostId(3), Piece(1, 10));      // island 0 -> 2

  // The small piece does not wait the 10 s the big one needs.
  ASSERT_TRUE(hosts.log.AwaitCount(1, absl::Seconds(5)));
  EXPECT_EQ(hosts.log.deliveries()[0].piece.piece, 1);
  EXPECT_EQ(hosts.log.deliveries()[0].host, HostId(3));

  transport.Shutdown();  // flushes the big one
  ASSERT_EQ(hosts.log.size(), 2u);
  EXPECT_EQ(hosts.log.deliveries()[1].piece.piece, 0);
}

TEST(InProcessDataTransportTest, ShutdownDeliversPendingPiecesAtOnce) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Hours(1), 0});
  hosts.RegisterWith(transport);
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 8));
  transport.SendPiece(HostId(1), HostId(2), Piece(1, 8));
  transport.SendPiece(HostId(2), HostId(0), Piece(2, 8));

  transport.Shutdown();
  // Everything was delivered by the time Shutdown returned, an hour early.
  ASSERT_EQ(hosts.log.size(), 3u);
  const std::vector<Delivery> d = hosts.log.deliveries();
  EXPECT_EQ(d[0].piece.piece, 0);
  EXPECT_EQ(d[1].piece.piece, 1);
  EXPECT_EQ(d[2].piece.piece, 2);
  EXPECT_EQ(d[2].host, HostId(0));
  transport.Shutdown();  // idempotent
  EXPECT_EQ(hosts.log.size(), 3u);
}

TEST(InProcessDataTransportTest, DestructionDeliversPendingPieces) {
  Hosts hosts;
  {
    InProcessDataTransport transport(DcnOptions{absl::Hours(1), 0});
    hosts.RegisterWith(transport);
    transport.SendPiece(HostId(0), HostId(2), Piece(0, 8));
    EXPECT_EQ(hosts.log.size(), 0u);
  }
  EXPECT_EQ(hosts.log.size(), 1u);
}

TEST(InProcessDataTransportTest, AfterShutdownCrossIslandPiecesAreDeliveredInline) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Hours(1), 0});
  hosts.RegisterWith(transport);
  transport.Shutdown();
  transport.SendPiece(HostId(0), HostId(2), Piece(0, 8));
  ASSERT_EQ(hosts.log.size(), 1u);
  EXPECT_EQ(hosts.log.deliveries()[0].thread, std::this_thread::get_id());
  EXPECT_EQ(transport.bytes_sent_between_islands(), 8);
}

TEST(InProcessDataTransportTest, BytesSentBetweenIslandsCountsOnlyCrossIslandBytes) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{});
  hosts.RegisterWith(transport);
  transport.SendPiece(HostId(0), HostId(1), Piece(0, 1000));  // island 0 -> 0
  transport.SendPiece(HostId(1), HostId(0), Piece(1, 500));   // island 0 -> 0
  EXPECT_EQ(transport.bytes_sent_between_islands(), 0);
  transport.SendPiece(HostId(0), HostId(2), Piece(2, 300));   // island 0 -> 1
  transport.SendPiece(HostId(2), HostId(1), Piece(3, 50));    // island 1 -> 0
  transport.SendPiece(HostId(2), HostId(3), Piece(4, 7));     // island 1 -> 2
  EXPECT_EQ(transport.bytes_sent_between_islands(), 357);
  EXPECT_EQ(hosts.log.size(), 5u);
}

TEST(InProcessDataTransportTest, ConcurrentSendersAllGetDelivered) {
  Hosts hosts;
  InProcessDataTransport transport(DcnOptions{absl::Milliseconds(1), 0});
  hosts.RegisterWith(transport);
  constexpr int kThreads = 4;
  constexpr int kPieces = 50;
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&transport, t] {
      for (int i = 0; i < kPieces; ++i) {
        // Alternate same-island and cross-island destinations.
        transport.SendPiece(HostId(0), i % 2 == 0 ? HostId(1) : HostId(2),
                            Piece(t * kPieces + i, 10));
      }
    });
  }
  for (std::thread& t : senders) t.join();
  ASSERT_TRUE(hosts.log.AwaitCount(kThreads * kPieces));
  EXPECT_EQ(transport.bytes_sent_between_islands(), kThreads * kPieces / 2 * 10);
  std::vector<int> seen(kThreads * kPieces, 0);
  // Each sender's pieces to one host arrive in the order it sent them.
  std::vector<int> last_to_h2(kThreads, -1);
  for (const Delivery& d : hosts.log.deliveries()) {
    ++seen[d.piece.piece];
    if (d.host == HostId(2)) {
      const int sender = d.piece.piece / kPieces;
      EXPECT_GT(d.piece.piece, last_to_h2[sender]);
      last_to_h2[sender] = d.piece.piece;
    }
  }
  EXPECT_EQ(seen, std::vector<int>(kThreads * kPieces, 1));
}

}  // namespace
}  // namespace causeway
