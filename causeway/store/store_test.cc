// Tests for causeway/store: DeviceMemory (capacity accounting with FIFO
// back-pressure), DeviceBuffer (allocation, reference-counted release) and
// ObjectStore (named shards, release by array and by owner). Threads
// synchronise only through notifications, futures and joins, never sleeps.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "causeway/async/future.h"
#include "causeway/backend/cpu/device.h"
#include "causeway/backend/device.h"
#include "causeway/base/check.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/ir/shape.h"
#include "causeway/store/buffer.h"
#include "causeway/store/device_memory.h"
#include "causeway/store/object_store.h"
#include "causeway/testing/arena_kind.h"
#include "causeway/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::causeway::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records the result of one reservation and the thread that reported it.
// Thread-safe.
class Outcome {
 public:
  DeviceMemory::Callback callback() {
    return [this](absl::Status status) {
      MutexLock lock(&mu_);
      EXPECT_FALSE(done_) << "callback ran twice";
      done_ = true;
      status_ = std::move(status);
      thread_ = std::this_thread::get_id();
    };
  }
  bool done() const {
    MutexLock lock(&mu_);
    return done_;
  }
  absl::Status status() const {
    MutexLock lock(&mu_);
    return status_;
  }
  std::thread::id thread() const {
    MutexLock lock(&mu_);
    return thread_;
  }

 private:
  mutable Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread::id thread_ ABSL_GUARDED_BY(mu_);
};

ir::Shape F32(std::vector<int64_t> dims) { return ir::Shape(ir::DType::kF32, std::move(dims)); }

// ---------------------------------------------------------------------------
// DeviceMemory

TEST(DeviceMemoryQuotaTest, AClientOverItsQuotaWaitsWithoutHoldingOthersBack) {
  DeviceMemory memory(DeviceId(0), 1000);
  const ClientId greedy(1), other(2);
  memory.SetQuota(greedy, 100);
  Outcome a, b, c, d;
  memory.Reserve(60, a.callback(), greedy);
  memory.Reserve(60, b.callback(), greedy);  // 120 > 100: waits for greedy's frees
  memory.Reserve(30, c.callback(), greedy);  // behind b, in greedy's own line
  memory.Reserve(500, d.callback(), other);  // not held back by greedy
  EXPECT_TRUE(a.done());
  EXPECT_FALSE(b.done());
  EXPECT_FALSE(c.done());
  ASSERT_TRUE(d.done());
  EXPECT_OK(d.status());
  EXPECT_EQ(memory.num_waiting(), 2);
  EXPECT_FALSE(memory.TryReserve(10, greedy));
  EXPECT_TRUE(memory.TryReserve(10, other));
  // Greedy frees: b (60) and c (30) now fit its quota.
  memory.Free(60, greedy);
  EXPECT_TRUE(b.done());
  EXPECT_TRUE(c.done());
  EXPECT_EQ(memory.admitted(greedy), 90);
  EXPECT_EQ(memory.in_use(), 90 + 500 + 10);
}

TEST(DeviceMemoryQuotaTest, ARequestLargerThanTheQuotaFailsNamingIt) {
  DeviceMemory memory(DeviceId(4), 1000);
  memory.SetQuota(ClientId(1), 100);
  Outcome a;
  memory.Reserve(101, a.callback(), ClientId(1));
  ASSERT_TRUE(a.done());
  EXPECT_THAT(a.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("quota of 100 bytes"), HasSubstr("client 1"))));
}

TEST(DeviceMemoryQuotaTest, RaisingOrLiftingTheQuotaLetsWaitersGo) {
  DeviceMemory memory(DeviceId(0), 1000);
  memory.SetQuota(ClientId(1), 100);
  Outcome a, b;
  memory.Reserve(100, a.callback(), ClientId(1));
  memory.Reserve(50, b.callback(), ClientId(1));
  EXPECT_FALSE(b.done());
  memory.SetQuota(ClientId(1), 0);
  EXPECT_TRUE(b.done());
  EXPECT_EQ(memory.in_use(), 150);
  memory.Free(100, ClientId(1));
  memory.Free(50, ClientId(1));
  EXPECT_EQ(memory.in_use(), 0);
  EXPECT_EQ(memory.admitted(ClientId(1)), 0);
}

TEST(DeviceMemoryQuotaTest, AStalledQuotaWaitFailsNamingTheQuota) {
  DeviceMemory memory(DeviceId(0), 1000);
  memory.SetQuota(ClientId(1), 100);
  Outcome a, b;
  memory.Reserve(100, a.callback(), ClientId(1));
  memory.Reserve(50, b.callback(), ClientId(1));
  EXPECT_EQ(memory.FailStalledWaiters(absl::Now(), absl::Hours(1)), 0);
  EXPECT_EQ(memory.FailStalledWaiters(absl::Now() + absl::Minutes(2), absl::Minutes(1)), 1);
  ASSERT_TRUE(b.done());
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   HasSubstr("over its memory quota")));
  // A withdrawn quota waiter never runs; the quota is still enforced.
  Outcome c;
  const uint64_t ticket = memory.Reserve(50, c.callback(), ClientId(1));
  ASSERT_NE(ticket, 0u);
  EXPECT_TRUE(memory.Cancel(ticket));
  EXPECT_FALSE(c.done());
  EXPECT_EQ(memory.num_waiting(), 0);
}

TEST(DeviceMemoryTest, GrantsInlineOnTheCallingThreadWhenItFits) {
  DeviceMemory memory(DeviceId(3), 100);
  Outcome a;
  memory.Reserve(60, a.callback());
  ASSERT_TRUE(a.done());
  EXPECT_OK(a.status());
  EXPECT_EQ(a.thread(), std::this_thread::get_id());
  Outcome b;
  memory.Reserve(40, b.callback());  // exactly fills the device
  ASSERT_TRUE(b.done());
  EXPECT_OK(b.status());
  EXPECT_EQ(memory.in_use(), 100);
  EXPECT_EQ(memory.num_waiting(), 0);
  EXPECT_EQ(memory.device(), DeviceId(3));
  EXPECT_EQ(memory.capacity(), 100);
}

TEST(DeviceMemoryTest, ReservationThatDoesNotFitWaitsUntilMemoryIsFreed) {
  DeviceMemory memory(DeviceId(0), 100);
  Outcome a, b;
  memory.Reserve(80, a.callback());
  memory.Reserve(50, b.callback());
  ASSERT_TRUE(a.done());
  EXPECT_FALSE(b.done());
  EXPECT_EQ(memory.num_waiting(), 1);
  EXPECT_EQ(memory.in_use(), 80);

  memory.Free(80);
  ASSERT_TRUE(b.done());
  EXPECT_OK(b.status());
  EXPECT_EQ(memory.in_use(), 50);
  EXPECT_EQ(memory.num_waiting(), 0);
}

TEST(DeviceMemoryTest, WaitersFailOnlyWhenNothingHasBeenFreedForTheStallTimeout) {
  DeviceMemory memory(DeviceId(3), 100);
  Outcome a, b, c;
  memory.Reserve(80, a.callback());
  memory.Reserve(50, b.callback());
  memory.Reserve(10, c.callback());
  const absl::Time start = absl::Now();
  // Not stalled yet: nothing fails.
  EXPECT_EQ(memory.FailStalledWaiters(start, absl::Seconds(30)), 0);
  EXPECT_FALSE(b.done());
  // Progress (a free, even one that grants nobody) restarts the stall
  // clock.
  memory.Free(0);
  EXPECT_EQ(memory.FailStalledWaiters(start + absl::Seconds(20), absl::Seconds(30)), 0);
  // Nothing freed for longer than the timeout: every waiter fails, naming
  // the device and what holds it; the granted reservation stays.
  EXPECT_EQ(memory.FailStalledWaiters(absl::Now() + absl::Seconds(31), absl::Seconds(30)), 2);
  ASSERT_TRUE(b.done() && c.done());
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("device 3"), HasSubstr("80 of 100"))));
  EXPECT_EQ(memory.num_waiting(), 0);
  EXPECT_EQ(memory.in_use(), 80);
  // With nobody waiting there is nothing to fail.
  EXPECT_EQ(memory.FailStalledWaiters(absl::Now() + absl::Hours(1), absl::Seconds(30)), 0);
}

TEST(DeviceMemoryTest, AHoldGivesItsBytesBackOnceWhenResetMovedOrDestroyed) {
  DeviceMemory memory(DeviceId(0), 100);
  ASSERT_TRUE(memory.TryReserve(60));
  {
    MemoryHold hold(&memory, 60);
    MemoryHold moved = std::move(hold);
    hold.reset();  // moved from: gives nothing back
    EXPECT_EQ(memory.in_use(), 60);
  }
  EXPECT_EQ(memory.in_use(), 0);
  ASSERT_TRUE(memory.TryReserve(30));
  MemoryHold a(&memory, 30);
  a.reset();
  a.reset();
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceMemoryTest, ABigRequestQueuedFirstBlocksLaterSmallOnes) {
  DeviceMemory memory(DeviceId(0), 100);
  std::vector<std::string> order;
  auto record = [&order](std::string name) {
    return [&order, name](absl::Status status) {
      EXPECT_OK(status);
      order.push_back(name);
    };
  };
  memory.Reserve(60, record("first"));
  memory.Reserve(90, record("big"));
  // 60 + 20 would fit, but the big request is ahead of it.
  memory.Reserve(20, record("small"));
  EXPECT_THAT(order, ElementsAre("first"));
  EXPECT_EQ(memory.num_waiting(), 2);
  EXPECT_EQ(memory.in_use(), 60);

  memory.Free(60);  // room for the big one only
  EXPECT_THAT(order, ElementsAre("first", "big"));
  EXPECT_EQ(memory.in_use(), 90);
  EXPECT_EQ(memory.num_waiting(), 1);

  memory.Free(90);
  EXPECT_THAT(order, ElementsAre("first", "big", "small"));
  EXPECT_EQ(memory.in_use(), 20);
  EXPECT_EQ(memory.num_waiting(), 0);
}

TEST(DeviceMemoryTest, OneFreeGrantsEveryWaiterThatNowFitsInOrder) {
  DeviceMemory memory(DeviceId(0), 100);
  std::vector<int> order;
  memory.Reserve(100, [](absl::Status s) { EXPECT_OK(s); });
  for (int i = 0; i < 4; ++i) {
    memory.Reserve(30, [&order, i](absl::Status s) {
      EXPECT_OK(s);
      order.push_back(i);
    });
  }
  EXPECT_TRUE(order.empty());
  memory.Free(100);
  // Three of 30 fit into 100; the fourth keeps waiting.
  EXPECT_THAT(order, ElementsAre(0, 1, 2));
  EXPECT_EQ(memory.in_use(), 90);
  EXPECT_EQ(memory.num_waiting(), 1);
  memory.Free(30);
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3));
}

TEST(DeviceMemoryTest, FreeGrantsWaitersOnTheFreeingThread) {
  DeviceMemory memory(DeviceId(0), 100);
  Outcome a, b;
  memory.Reserve(100, a.callback());
  memory.Reserve(10, b.callback());
  ASSERT_FALSE(b.done());

  std::thread::id freeing_thread;
  std::thread t([&] {
    freeing_thread = std::this_thread::get_id();
    memory.Free(100);
  });
  t.join();
  ASSERT_TRUE(b.done());
  EXPECT_OK(b.status());
  EXPECT_EQ(b.thread(), freeing_thread);
  EXPECT_NE(b.thread(), std::this_thread::get_id());
}

TEST(DeviceMemoryTest, RequestLargerThanCapacityFailsAtOnceWithResourceExhausted) {
  DeviceMemory memory(DeviceId(5), 100);
  Outcome a;
  memory.Reserve(101, a.callback());
  ASSERT_TRUE(a.done());
  EXPECT_THAT(a.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("101"), HasSubstr("device 5"),
                                         HasSubstr("100"))));
  EXPECT_EQ(a.thread(), std::this_thread::get_id());
  EXPECT_EQ(memory.in_use(), 0);
  EXPECT_EQ(memory.num_waiting(), 0);
}

TEST(DeviceMemoryTest, RequestLargerThanCapacityFailsAtOnceEvenBehindWaiters) {
  // Declared first: b still waits when the memory is destroyed (and cancels
  // it), so its callback's target must outlive the memory.
  Outcome a, b, c;
  DeviceMemory memory(DeviceId(0), 100);
  memory.Reserve(100, a.callback());
  memory.Reserve(50, b.callback());
  memory.Reserve(500, c.callback());
  ASSERT_TRUE(c.done());
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("500")));
  EXPECT_EQ(memory.num_waiting(), 1);
}

TEST(DeviceMemoryTest, ShutdownCancelsWaitersAndLaterReservations) {
  DeviceMemory memory(DeviceId(2), 100);
  Outcome a, b, c;
  memory.Reserve(100, a.callback());
  memory.Reserve(10, b.callback());
  memory.Reserve(20, c.callback());
  ASSERT_FALSE(b.done());

  memory.Shutdown();
  ASSERT_TRUE(b.done());
  ASSERT_TRUE(c.done());
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("device 2")));
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("device 2")));
  EXPECT_EQ(memory.num_waiting(), 0);
  EXPECT_EQ(memory.in_use(), 100);  // granted memory stays granted

  Outcome d;
  memory.Reserve(1, d.callback());
  ASSERT_TRUE(d.done());
  EXPECT_THAT(d.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("shut down")));
  memory.Free(100);
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceMemoryTest, DestructionCancelsWaiters) {
  Outcome b;
  {
    DeviceMemory memory(DeviceId(0), 10);
    memory.Reserve(10, [](absl::Status) {});
    memory.Reserve(5, b.callback());
    ASSERT_FALSE(b.done());
  }
  ASSERT_TRUE(b.done());
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kCancelled, ::testing::_));
}

TEST(DeviceMemoryTest, PeakIsTheHighestUseSeen) {
  DeviceMemory memory(DeviceId(0), 100);
  EXPECT_EQ(memory.peak(), 0);
  memory.Reserve(30, [](absl::Status) {});
  memory.Reserve(50, [](absl::Status) {});
  EXPECT_EQ(memory.peak(), 80);
  memory.Free(50);
  memory.Reserve(10, [](absl::Status) {});
  EXPECT_EQ(memory.in_use(), 40);
  EXPECT_EQ(memory.peak(), 80);
  // Peaks reached by grants from Free count too.
  memory.Reserve(70, [](absl::Status) {});  // waits: 40 + 70 > 100
  memory.Free(10);
  EXPECT_EQ(memory.in_use(), 100);
  EXPECT_EQ(memory.peak(), 100);
}

TEST(DeviceMemoryTest, AwaitEmptyReturnsAtOnceWhenNothingIsInUse) {
  DeviceMemory memory(DeviceId(0), 100);
  EXPECT_TRUE(memory.AwaitEmpty(absl::ZeroDuration()));
  memory.Reserve(10, [](absl::Status) {});
  memory.Free(10);
  EXPECT_TRUE(memory.AwaitEmpty(absl::ZeroDuration()));
}

TEST(DeviceMemoryTest, AwaitEmptyTimesOutWhileMemoryIsHeld) {
  DeviceMemory memory(DeviceId(0), 100);
  memory.Reserve(10, [](absl::Status) {});
  EXPECT_FALSE(memory.AwaitEmpty(absl::Milliseconds(20)));
  EXPECT_EQ(memory.in_use(), 10);
}

TEST(DeviceMemoryTest, AwaitEmptyReturnsOnceAnotherThreadFreesEverything) {
  DeviceMemory memory(DeviceId(0), 100);
  memory.Reserve(10, [](absl::Status) {});
  memory.Reserve(20, [](absl::Status) {});
  Notification go;
  std::thread t([&] {
    go.WaitForNotification();
    memory.Free(10);
    memory.Free(20);
  });
  go.Notify();
  EXPECT_TRUE(memory.AwaitEmpty(absl::Seconds(30)));
  EXPECT_EQ(memory.in_use(), 0);
  t.join();
}

// ---------------------------------------------------------------------------
// DeviceBuffer

// A cpu device for `id`, whose memory is the host's.
std::unique_ptr<backend::Device> Cpu(DeviceId id = DeviceId(0)) {
  absl::StatusOr<std::unique_ptr<backend::Device>> d = backend::cpu::CreateDevice({id, 0, 0});
  CW_CHECK_OK(d.status());
  return *std::move(d);
}

TEST(DeviceBufferTest, AllocationThatFitsIsGrantedAtOnce) {
  const auto cpu = Cpu(DeviceId(4));
  DeviceMemory memory(DeviceId(4), 1024, cpu.get());
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({2, 8}), ClientId(7));
  ASSERT_TRUE(b->allocated().IsReady());
  EXPECT_OK(b->allocated().Await());
  EXPECT_NE(b->data(), nullptr);
  EXPECT_EQ(b->byte_size(), 64);
  EXPECT_EQ(b->shape(), F32({2, 8}));
  EXPECT_EQ(b->owner(), ClientId(7));
  EXPECT_EQ(b->device(), DeviceId(4));
  EXPECT_EQ(memory.in_use(), 64);
  EXPECT_FALSE(b->ready().IsReady());
  // The whole buffer is writable.
  for (int64_t i = 0; i < b->byte_size(); ++i) b->data()[i] = std::byte{0x5A};
}

TEST(DeviceBufferTest, HostMemoryIsTakenOnFirstUseNotAtTheGrant) {
  // A granted buffer of the largest shape there is (64 GiB) on a device
  // that has room for it: taking that much host memory at the grant would
  // fail on most hosts.
  const auto cpu = Cpu();
  DeviceMemory memory(DeviceId(0), int64_t{1} << 40, cpu.get());
  BufferRef huge = DeviceBuffer::Allocate(&memory, F32({ir::kMaxElements}), ClientId(1));
  ASSERT_TRUE(huge->granted());
  EXPECT_EQ(memory.in_use(), int64_t{1} << 36);
  huge.reset();
  EXPECT_EQ(memory.in_use(), 0);
  // A reservation has no storage at all.
  BufferRef reservation = DeviceBuffer::Reservation(&memory, 1 << 20, ClientId(1));
  EXPECT_EQ(reservation->data(), nullptr);
  EXPECT_THAT(reservation->storage(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no storage")));
}

// The bytes are the device's: a kind whose memory the host cannot address
// gives storage with no host address, a device with no room fails the
// buffer's storage naming the device, and memory that keeps a budget only
// gives none.
TEST(DeviceBufferTest, StorageComesFromTheDeviceOfItsMemory) {
  absl::StatusOr<std::unique_ptr<backend::Device>> arena =
      testing::CreateArenaDevice({DeviceId(2), 0, 256});
  ASSERT_OK(arena.status());
  DeviceMemory memory(DeviceId(2), 1 << 20, arena->get());  // a budget larger than the arena
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({16}), ClientId(1));
  ASSERT_TRUE(b->granted());
  EXPECT_EQ(b->backend(), arena->get());
  ASSERT_OK_AND_ASSIGN(backend::DeviceAllocation * a, b->storage());
  EXPECT_EQ(a->bytes(), 64);
  ASSERT_OK_AND_ASSIGN(backend::DeviceAllocation * again, b->storage());
  EXPECT_EQ(again, a);
  EXPECT_EQ(b->data(), nullptr);  // the arena's memory is not the host's
  // Written and read back through the device.
  std::vector<float> in(16, 2.5f), out(16, 0.f);
  EXPECT_OK(backend::Await([&](backend::Completion done) {
    b->backend()->CopyIn(in.data(), *a, backend::BoxCopy::Flat(0, 64, 0, 64, 64),
                         std::move(done));
  }));
  EXPECT_OK(backend::Await([&](backend::Completion done) {
    b->backend()->CopyOut(*a, out.data(), backend::BoxCopy::Flat(0, 64, 0, 64, 64),
                          std::move(done));
  }));
  EXPECT_EQ(out, in);

  BufferRef too_big = DeviceBuffer::Allocate(&memory, F32({1024}), ClientId(1));
  ASSERT_TRUE(too_big->granted());  // the budget allowed it; the device has no room
  EXPECT_THAT(too_big->storage(), StatusIs(absl::StatusCode::kResourceExhausted,
                                           HasSubstr(DeviceId(2).ToString())));

  DeviceMemory budget_only(DeviceId(3), 1024);
  BufferRef none = DeviceBuffer::Allocate(&budget_only, F32({4}), ClientId(1));
  EXPECT_THAT(none->storage(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("budget only")));
  EXPECT_EQ(none->data(), nullptr);
}

TEST(DeviceBufferTest, ConcurrentFirstUsesShareOneAllocation) {
  const auto cpu = Cpu();
  DeviceMemory memory(DeviceId(0), 1 << 20, cpu.get());
  for (int round = 0; round < 20; ++round) {
    BufferRef b = DeviceBuffer::Allocate(&memory, F32({1024}), ClientId(1));
    std::vector<std::byte*> seen(4, nullptr);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        seen[t] = b->data();
        // Each writes its own quarter, as the pieces of a transfer do.
        for (int i = t * 1024; i < (t + 1) * 1024; ++i) seen[t][i] = std::byte(t);
      });
    }
    for (std::thread& t : threads) t.join();
    ASSERT_NE(seen[0], nullptr);
    for (int t = 1; t < 4; ++t) EXPECT_EQ(seen[t], seen[0]);
    for (int t = 0; t < 4; ++t) EXPECT_EQ(b->data()[t * 1024 + 7], std::byte(t));
  }
}

TEST(DeviceBufferTest, SetReadyFulfilsReadyWithTheStatus) {
  DeviceMemory memory(DeviceId(0), 1024);
  BufferRef ok = DeviceBuffer::Allocate(&memory, F32({4}), ClientId(1));
  ok->SetReady(absl::OkStatus());
  ASSERT_TRUE(ok->ready().IsReady());
  EXPECT_OK(ok->ready().Await());

  BufferRef failed = DeviceBuffer::Allocate(&memory, F32({4}), ClientId(1));
  failed->SetReady(absl::InternalError("kernel blew up"));
  EXPECT_THAT(failed->ready().Await(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("kernel blew up")));
}

TEST(DeviceBufferTest, MemoryReturnsWhenTheLastReferenceDrops) {
  DeviceMemory memory(DeviceId(0), 1024);
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({16}), ClientId(1));
  BufferRef copy = b;
  EXPECT_EQ(memory.in_use(), 64);
  b.reset();
  EXPECT_EQ(memory.in_use(), 64);
  copy.reset();
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceBufferTest, AllocationWaitsUnderBackPressureAndCompletesWhenAnotherBufferIsDestroyed) {
  const auto cpu = Cpu();
  DeviceMemory memory(DeviceId(0), 64, cpu.get());
  BufferRef a = DeviceBuffer::Allocate(&memory, F32({16}), ClientId(1));  // 64 bytes
  ASSERT_TRUE(a->allocated().IsReady());
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({8}), ClientId(1));  // 32 bytes
  EXPECT_FALSE(b->allocated().IsReady());
  EXPECT_EQ(memory.num_waiting(), 1);

  std::thread::id continuation_thread;
  b->allocated().OnReady(
      [&](const absl::StatusOr<Unit>&) { continuation_thread = std::this_thread::get_id(); });

  std::thread::id destroying_thread;
  std::thread t([&, a = std::move(a)]() mutable {
    destroying_thread = std::this_thread::get_id();
    a.reset();
  });
  t.join();

  ASSERT_TRUE(b->allocated().IsReady());
  EXPECT_OK(b->allocated().Await());
  EXPECT_NE(b->data(), nullptr);
  EXPECT_EQ(continuation_thread, destroying_thread);
  EXPECT_EQ(memory.in_use(), 32);
  b.reset();
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceBufferTest, BufferDestroyedWhileWaitingWithdrawsItsReservation) {
  DeviceMemory memory(DeviceId(0), 64);
  BufferRef a = DeviceBuffer::Allocate(&memory, F32({16}), ClientId(1));
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({8}), ClientId(1));
  BufferRef c = DeviceBuffer::Allocate(&memory, F32({4}), ClientId(1));
  ASSERT_FALSE(b->allocated().IsReady());
  ASSERT_EQ(memory.num_waiting(), 2);
  b.reset();  // still waiting for memory: its request goes, and c moves up
  EXPECT_EQ(memory.num_waiting(), 1);
  a.reset();  // grants c, and nothing is granted to the dead b
  EXPECT_EQ(memory.num_waiting(), 0);
  ASSERT_TRUE(c->allocated().IsReady());
  EXPECT_EQ(memory.in_use(), 16);
  c.reset();
  EXPECT_EQ(memory.in_use(), 0);
  EXPECT_TRUE(memory.AwaitEmpty(absl::ZeroDuration()));
}

TEST(DeviceMemoryTest, CancellingTheHeadOfTheQueueGrantsTheRequestsBehindIt) {
  DeviceMemory memory(DeviceId(0), 100);
  ASSERT_TRUE(memory.TryReserve(60));
  int granted = 0;
  const uint64_t big = memory.Reserve(80, [&](absl::Status) { ADD_FAILURE() << "cancelled"; });
  ASSERT_NE(big, 0u);
  EXPECT_NE(memory.Reserve(30, [&](absl::Status s) { granted += s.ok(); }), 0u);
  EXPECT_EQ(granted, 0);  // FIFO: waits behind the big request
  EXPECT_TRUE(memory.Cancel(big));
  EXPECT_EQ(granted, 1);
  EXPECT_FALSE(memory.Cancel(big));
  EXPECT_EQ(memory.in_use(), 90);
}

TEST(DeviceBufferTest, AllocationLargerThanTheDeviceFails) {
  DeviceMemory memory(DeviceId(0), 64);
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({17}), ClientId(1));
  ASSERT_TRUE(b->allocated().IsReady());
  EXPECT_THAT(b->allocated().Await(), StatusIs(absl::StatusCode::kResourceExhausted,
                                               HasSubstr("68")));
  b.reset();
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceBufferTest, WaitingAllocationIsCancelledByShutdownAndReturnsNoMemory) {
  DeviceMemory memory(DeviceId(0), 64);
  BufferRef a = DeviceBuffer::Allocate(&memory, F32({16}), ClientId(1));
  BufferRef b = DeviceBuffer::Allocate(&memory, F32({8}), ClientId(1));
  memory.Shutdown();
  ASSERT_TRUE(b->allocated().IsReady());
  EXPECT_THAT(b->allocated().Await(), StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  b.reset();  // never granted: must not free anything
  EXPECT_EQ(memory.in_use(), 64);
  a.reset();
  EXPECT_EQ(memory.in_use(), 0);
}

TEST(DeviceBufferTest, FailedBufferCarriesTheErrorAndUsesNoMemory) {
  BufferRef b = DeviceBuffer::Failed(F32({4}), ClientId(2), absl::UnavailableError("host 1 lost"));
  ASSERT_TRUE(b->allocated().IsReady());
  ASSERT_TRUE(b->ready().IsReady());
  EXPECT_THAT(b->allocated().Await(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("host 1 lost")));
  EXPECT_THAT(b->ready().Await(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("host 1 lost")));
  EXPECT_FALSE(b->device().valid());
  EXPECT_EQ(b->owner(), ClientId(2));
  EXPECT_EQ(b->shape(), F32({4}));
  b.reset();  // destroying it must not touch any memory
}

TEST(DeviceBufferTest, ConcurrentAllocationsAndReleasesBalanceOut) {
  DeviceMemory memory(DeviceId(0), 256);
  constexpr int kThreads = 4;
  constexpr int kIterations = 200;
  std::vector<std::thread> threads;
  std::atomic<int> granted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIterations; ++i) {
        BufferRef b = DeviceBuffer::Allocate(&memory, F32({16 + (i % 8) * 4}), ClientId(1));
        if (b->allocated().Await().ok()) ++granted;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), kThreads * kIterations);
  EXPECT_EQ(memory.in_use(), 0);
  EXPECT_LE(memory.peak(), 256);
}

// ---------------------------------------------------------------------------
// ObjectStore

TEST(ObjectStoreTest, HasOneMemoryPerDevice) {
  ObjectStore store(HostId(3), {DeviceId(10), DeviceId(11)}, 1000);
  EXPECT_EQ(store.host(), HostId(3));
  ASSERT_EQ(store.num_devices(), 2);
  EXPECT_EQ(store.memory(0)->device(), DeviceId(10));
  EXPECT_EQ(store.memory(1)->device(), DeviceId(11));
  EXPECT_EQ(store.memory(1)->capacity(), 1000);
  BufferRef b = store.Allocate(1, F32({4}), ClientId(1));
  EXPECT_EQ(b->device(), DeviceId(11));
  EXPECT_EQ(store.memory(0)->in_use(), 0);
  EXPECT_EQ(store.memory(1)->in_use(), 16);
}

TEST(ObjectStoreTest, GetReturnsTheBufferThatWasPut) {
  ObjectStore store(HostId(3), {DeviceId(10)}, 1024);
  BufferRef b = store.Allocate(0, F32({4}), ClientId(1));
  ASSERT_OK(store.Put(ShardKey{ArrayId(7), 0}, b));
  EXPECT_EQ(store.num_shards(), 1);
  ASSERT_OK_AND_ASSIGN(BufferRef got, store.Get(ShardKey{ArrayId(7), 0}));
  EXPECT_EQ(got, b);
  // Shard index is part of the key.
  EXPECT_THAT(store.Get(ShardKey{ArrayId(7), 1}),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST(ObjectStoreTest, DuplicatePutIsAlreadyExistsAndKeepsTheFirstBuffer) {
  ObjectStore store(HostId(3), {DeviceId(10)}, 1024);
  BufferRef first = store.Allocate(0, F32({4}), ClientId(1));
  BufferRef second = store.Allocate(0, F32({4}), ClientId(1));
  ASSERT_OK(store.Put(ShardKey{ArrayId(7), 2}, first));
  EXPECT_THAT(store.Put(ShardKey{ArrayId(7), 2}, second),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       AllOf(HasSubstr("array 7"), HasSubstr("shard 2"), HasSubstr("host 3"))));
  ASSERT_OK_AND_ASSIGN(BufferRef got, store.Get(ShardKey{ArrayId(7), 2}));
  EXPECT_EQ(got, first);
  EXPECT_EQ(store.num_shards(), 1);
}

TEST(ObjectStoreTest, GetOfAnUnknownShardIsNotFoundNamingArrayShardAndHost) {
  ObjectStore store(HostId(3), {DeviceId(10)}, 1024);
  EXPECT_THAT(store.Get(ShardKey{ArrayId(8), 2}),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("array 8"), HasSubstr("shard 2"), HasSubstr("host 3"))));
}

TEST(ObjectStoreTest, ReleaseByArrayIdDropsEveryShardAndFreesItsMemory) {
  ObjectStore store(HostId(0), {DeviceId(0), DeviceId(1)}, 1024);
  ASSERT_OK(store.Put(ShardKey{ArrayId(7), 0}, store.Allocate(0, F32({4}), ClientId(1))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(7), 1}, store.Allocate(1, F32({4}), ClientId(1))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(9), 0}, store.Allocate(0, F32({8}), ClientId(1))));
  EXPECT_EQ(store.memory_in_use(), 16 + 16 + 32);
  EXPECT_EQ(store.num_shards(), 3);

  store.Release({ArrayId(7), ArrayId(123)});  // unknown ids are ignored
  EXPECT_EQ(store.memory_in_use(), 32);
  EXPECT_EQ(store.num_shards(), 1);
  EXPECT_THAT(store.Get(ShardKey{ArrayId(7), 0}), StatusIs(absl::StatusCode::kNotFound,
                                                           HasSubstr("array 7")));
  EXPECT_THAT(store.Get(ShardKey{ArrayId(7), 1}), StatusIs(absl::StatusCode::kNotFound,
                                                           HasSubstr("array 7")));
  EXPECT_OK(store.Get(ShardKey{ArrayId(9), 0}));

  // The id can be reused once released.
  EXPECT_OK(store.Put(ShardKey{ArrayId(7), 0}, store.Allocate(0, F32({4}), ClientId(1))));
}

TEST(ObjectStoreTest, ReleasedShardKeepsItsMemoryWhileSomeoneStillHoldsIt) {
  ObjectStore store(HostId(0), {DeviceId(0)}, 1024);
  BufferRef in_flight = store.Allocate(0, F32({4}), ClientId(1));
  ASSERT_OK(store.Put(ShardKey{ArrayId(7), 0}, in_flight));
  store.Release({ArrayId(7)});
  EXPECT_EQ(store.num_shards(), 0);
  EXPECT_EQ(store.memory_in_use(), 16);
  in_flight.reset();
  EXPECT_EQ(store.memory_in_use(), 0);
}

TEST(ObjectStoreTest, ReleaseGrantsAWaitingAllocation) {
  ObjectStore store(HostId(0), {DeviceId(0)}, 64);
  ASSERT_OK(store.Put(ShardKey{ArrayId(1), 0}, store.Allocate(0, F32({16}), ClientId(1))));
  BufferRef waiting = store.Allocate(0, F32({16}), ClientId(1));
  EXPECT_FALSE(waiting->allocated().IsReady());
  store.Release({ArrayId(1)});
  ASSERT_TRUE(waiting->allocated().IsReady());
  EXPECT_OK(waiting->allocated().Await());
  EXPECT_EQ(store.memory_in_use(), 64);
}

TEST(ObjectStoreTest, ReleaseOwnerDropsOnlyThatOwnersShards) {
  ObjectStore store(HostId(0), {DeviceId(0), DeviceId(1)}, 1024);
  ASSERT_OK(store.Put(ShardKey{ArrayId(1), 0}, store.Allocate(0, F32({4}), ClientId(10))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(1), 1}, store.Allocate(1, F32({4}), ClientId(10))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(2), 0}, store.Allocate(0, F32({4}), ClientId(10))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(3), 0}, store.Allocate(0, F32({8}), ClientId(20))));
  ASSERT_OK(store.Put(ShardKey{ArrayId(3), 1}, store.Allocate(1, F32({8}), ClientId(20))));

  EXPECT_EQ(store.ReleaseOwner(ClientId(10)), 2);  // arrays 1 and 2
  EXPECT_EQ(store.num_shards(), 2);
  EXPECT_EQ(store.memory_in_use(), 64);
  EXPECT_THAT(store.Get(ShardKey{ArrayId(1), 1}), StatusIs(absl::StatusCode::kNotFound,
                                                           HasSubstr("array 1")));
  EXPECT_THAT(store.Get(ShardKey{ArrayId(2), 0}), StatusIs(absl::StatusCode::kNotFound,
                                                           HasSubstr("array 2")));
  EXPECT_OK(store.Get(ShardKey{ArrayId(3), 0}));
  EXPECT_OK(store.Get(ShardKey{ArrayId(3), 1}));

  EXPECT_EQ(store.ReleaseOwner(ClientId(99)), 0);
  EXPECT_EQ(store.ReleaseOwner(ClientId(20)), 1);
  EXPECT_EQ(store.num_shards(), 0);
  EXPECT_EQ(store.memory_in_use(), 0);
}

TEST(ObjectStoreTest, MemoryInUseSumsEveryDevice) {
  ObjectStore store(HostId(0), {DeviceId(0), DeviceId(1), DeviceId(2)}, 1024);
  EXPECT_EQ(store.memory_in_use(), 0);
  BufferRef a = store.Allocate(0, F32({4}), ClientId(1));
  BufferRef b = store.Allocate(2, F32({10}), ClientId(1));
  BufferRef c = store.Allocate(2, ir::Shape(ir::DType::kPred, {3}), ClientId(1));
  EXPECT_EQ(store.memory_in_use(), 16 + 40 + 3);
  a.reset();
  EXPECT_EQ(store.memory_in_use(), 40 + 3);
}

TEST(ObjectStoreTest, ShutdownCancelsWaitingAllocations) {
  ObjectStore store(HostId(0), {DeviceId(0)}, 64);
  BufferRef held = store.Allocate(0, F32({16}), ClientId(1));
  BufferRef waiting = store.Allocate(0, F32({4}), ClientId(1));
  store.Shutdown();
  ASSERT_TRUE(waiting->allocated().IsReady());
  EXPECT_THAT(waiting->allocated().Await(), StatusIs(absl::StatusCode::kCancelled, ::testing::_));
}

TEST(ObjectStoreTest, ConcurrentPutsGetsAndReleasesStayConsistent) {
  ObjectStore store(HostId(0), {DeviceId(0), DeviceId(1)}, 1 << 20);
  constexpr int kThreads = 4;
  constexpr int kArrays = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < kArrays; ++i) {
        const ArrayId id(t * kArrays + i);
        EXPECT_OK(store.Put(ShardKey{id, 0}, store.Allocate(t % 2, F32({4}), ClientId(t))));
        EXPECT_OK(store.Get(ShardKey{id, 0}));
        if (i % 2 == 0) store.Release({id});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(store.num_shards(), kThreads * kArrays / 2);
  EXPECT_EQ(store.memory_in_use(), kThreads * kArrays / 2 * 16);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(store.ReleaseOwner(ClientId(t)), kArrays / 2);
  EXPECT_EQ(store.memory_in_use(), 0);
}

}  // namespace
}  // namespace causeway
