// Tests for causeway/base: status helpers, strong ids, the real clock and the
// Mutex / Notification wrappers. Cross-thread tests synchronise only through
// the primitives under test and thread joins, never with sleeps.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "causeway/base/clock.h"
#include "causeway/base/ids.h"
#include "causeway/base/mutex.h"
#include "causeway/base/settings.h"
#include "causeway/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// Annotate

TEST(AnnotateTest, PrependsContextAndKeepsCode) {
  absl::Status s = Annotate(absl::NotFoundError("array 7"), "node 3 (matmul) on device 5");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "node 3 (matmul) on device 5: array 7");
}

TEST(AnnotateTest, NestsOutermostContextFirst) {
  absl::Status s = Annotate(Annotate(absl::UnavailableError("lost"), "host 1"), "run 2");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "run 2: host 1: lost");
}

TEST(AnnotateTest, OkStaysOk) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "context").ok());
}

// ---------------------------------------------------------------------------
// CW_RETURN_IF_ERROR / CW_ASSIGN_OR_RETURN

absl::Status ReturnIfError(absl::Status in, int* reached) {
  CW_RETURN_IF_ERROR(in);
  ++*reached;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheError) {
  int reached = 0;
  absl::Status s = ReturnIfError(absl::InvalidArgumentError("bad"), &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad");
  EXPECT_EQ(reached, 0);
}

TEST(StatusMacrosTest, ReturnIfErrorContinuesOnOk) {
  int reached = 0;
  EXPECT_TRUE(ReturnIfError(absl::OkStatus(), &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorEvaluatesItsArgumentOnce) {
  int calls = 0;
  auto fn = [&]() -> absl::Status {
    CW_RETURN_IF_ERROR([&] {
      ++calls;
      return absl::OkStatus();
    }());
    return absl::OkStatus();
  };
  EXPECT_TRUE(fn().ok());
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorWorksInStatusOrFunction) {
  auto fn = [](absl::Status in) -> absl::StatusOr<int> {
    CW_RETURN_IF_ERROR(in);
    return 5;
  };
  EXPECT_EQ(fn(absl::OkStatus()).value(), 5);
  EXPECT_EQ(fn(absl::InternalError("x")).status().code(), absl::StatusCode::kInternal);
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError(absl::StrCat(x, " is odd"));
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  CW_ASSIGN_OR_RETURN(int half, Half(x));
  CW_ASSIGN_OR_RETURN(int quarter, Half(half));  // a second one in the same scope
  return quarter;
}

TEST(StatusMacrosTest, AssignOrReturnAssignsValues) {
  absl::StatusOr<int> q = Quarter(12);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, 3);
}

TEST(StatusMacrosTest, AssignOrReturnReturnsFirstError) {
  absl::StatusOr<int> q = Quarter(6);  // 6 -> 3 -> error
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q.status().message(), "3 is odd");
}

TEST(StatusMacrosTest, AssignOrReturnAssignsToExistingVariable) {
  auto fn = [](int x) -> absl::Status {
    int out = -1;
    CW_ASSIGN_OR_RETURN(out, Half(x));
    return out == x / 2 ? absl::OkStatus() : absl::InternalError("wrong value");
  };
  EXPECT_TRUE(fn(8).ok());
  EXPECT_EQ(fn(7).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacrosTest, AssignOrReturnMovesMoveOnlyValues) {
  auto make = [](bool ok) -> absl::StatusOr<std::unique_ptr<int>> {
    if (!ok) return absl::ResourceExhaustedError("no memory");
    return std::make_unique<int>(42);
  };
  auto fn = [&](bool ok) -> absl::StatusOr<int> {
    CW_ASSIGN_OR_RETURN(std::unique_ptr<int> p, make(ok));
    return *p;
  };
  EXPECT_EQ(fn(true).value(), 42);
  EXPECT_EQ(fn(false).status().code(), absl::StatusCode::kResourceExhausted);
}

// ---------------------------------------------------------------------------
// Strong ids

static_assert(!std::is_convertible_v<HostId, DeviceId>,
              "distinct id kinds must not convert into each other");
static_assert(!std::is_convertible_v<int64_t, HostId>,
              "ids are made from integers only explicitly");
static_assert(std::is_trivially_copyable_v<ArrayId>, "ids are small value types");
static_assert(sizeof(ArrayId) == sizeof(int64_t));

TEST(StrongIdTest, DefaultIsInvalid) {
  HostId id;
  EXPECT_FALSE(id.valid());
  EXPECT_EQ(id.value(), -1);
  EXPECT_TRUE(HostId(0).valid());
  EXPECT_EQ(HostId(17).value(), 17);
}

TEST(StrongIdTest, ComparesByValue) {
  EXPECT_EQ(DeviceId(3), DeviceId(3));
  EXPECT_NE(DeviceId(3), DeviceId(4));
  EXPECT_LT(DeviceId(3), DeviceId(4));
  EXPECT_GT(DeviceId(5), DeviceId(4));
  EXPECT_LE(DeviceId(4), DeviceId(4));
  EXPECT_GE(DeviceId(4), DeviceId(4));
  EXPECT_LT(DeviceId(), DeviceId(0));  // the invalid id sorts first
}

TEST(StrongIdTest, HashesByValue) {
  EXPECT_EQ(absl::Hash<ArrayId>()(ArrayId(9)), absl::Hash<ArrayId>()(ArrayId(9)));
  EXPECT_NE(absl::Hash<ArrayId>()(ArrayId(9)), absl::Hash<ArrayId>()(ArrayId(10)));

  // Ids key hash containers through absl::Hash. (std containers here because
  // causeway::base does not link absl::raw_hash_set.)
  std::unordered_set<ArrayId, absl::Hash<ArrayId>> set;
  for (int64_t i = 0; i < 1000; ++i) set.insert(ArrayId(i % 100));
  EXPECT_EQ(set.size(), 100u);
  EXPECT_EQ(set.count(ArrayId(42)), 1u);
  EXPECT_EQ(set.count(ArrayId(100)), 0u);

  std::unordered_map<HostId, std::string, absl::Hash<HostId>> names;
  names[HostId(1)] = "one";
  names[HostId(2)] = "two";
  EXPECT_EQ(names.at(HostId(1)), "one");
  EXPECT_EQ(names.at(HostId(2)), "two");
}

TEST(StrongIdTest, ToStringNamesTheKind) {
  EXPECT_EQ(HostId(1).ToString(), "host 1");
  EXPECT_EQ(DeviceId(5).ToString(), "device 5");
  EXPECT_EQ(ArrayId(12).ToString(), "array 12");
  EXPECT_EQ(RunId(0).ToString(), "run 0");
  EXPECT_EQ(IslandId(2).ToString(), "island 2");
  std::ostringstream os;
  os << ClientId(3) << ", " << MeshId(4) << ", " << ProgramId(6);
  EXPECT_EQ(os.str(), "client 3, mesh 4, program 6");
}

// ---------------------------------------------------------------------------
// Clock

TEST(ClockTest, RealIsASingleton) {
  ASSERT_NE(Clock::Real(), nullptr);
  EXPECT_EQ(Clock::Real(), Clock::Real());
}

TEST(ClockTest, RealIsMonotonic) {
  Clock* clock = Clock::Real();
  int64_t prev = clock->NowNanos();
  for (int i = 0; i < 100000; ++i) {
    int64_t now = clock->NowNanos();
    ASSERT_GE(now, prev);
    prev = now;
  }
}

TEST(ClockTest, RealIsMonotonicAcrossThreads) {
  // Each thread reads after the previous one published its reading through
  // an atomic, so the readings are ordered and must not go backwards.
  Clock* clock = Clock::Real();
  std::atomic<int64_t> last{clock->NowNanos()};
  std::atomic<bool> backwards{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        int64_t seen = last.load();
        int64_t now = clock->NowNanos();
        if (now < seen) backwards = true;
        int64_t expected = seen;
        while (expected < now && !last.compare_exchange_weak(expected, now)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(backwards.load());
}

TEST(ClockTest, MicrosAndNanosShareAnEpoch) {
  Clock* clock = Clock::Real();
  int64_t before = clock->NowNanos();
  int64_t micros = clock->NowMicros();
  int64_t after = clock->NowNanos();
  EXPECT_GE(micros, before / 1000);
  EXPECT_LE(micros, after / 1000);
}

// ---------------------------------------------------------------------------
// Mutex / MutexLock / Notification

// `threads` threads each add 1 to a counter `increments` times, reading and
// writing it under one Mutex; thread t first calls `start(t)`. Returns the
// count, which is exact only if the Mutex excluded them.
int64_t CountUnderOneMutex(int threads, int increments,
                           const std::function<void(int)>& start = nullptr) {
  Mutex mu;
  int64_t counter = 0;  // guarded by mu
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      if (start) start(t);
      for (int i = 0; i < increments; ++i) {
        MutexLock lock(&mu);
        const int64_t read = counter;
        counter = read + 1;
      }
    });
  }
  for (auto& t : running) t.join();
  MutexLock lock(&mu);
  return counter;
}

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  EXPECT_EQ(CountUnderOneMutex(8, 20000), int64_t{8} * 20000);
}

// Threads that try a held mutex before sleeping on it, beside threads that
// sleep at once: the lock still excludes all of them.
TEST(MutexTest, ThreadsThatSpinOnContentionStillExcludeEachOther) {
  EXPECT_FALSE(Mutex::SpinsOnContention());
  const int64_t count = CountUnderOneMutex(6, 20000, [](int t) {
    const bool spin = t % 2 == 0;
    Mutex::SpinOnContention(spin);
    EXPECT_EQ(Mutex::SpinsOnContention(), spin);
  });
  EXPECT_EQ(count, int64_t{6} * 20000);
  EXPECT_FALSE(Mutex::SpinsOnContention());  // the setting is per thread
}

TEST(MutexTest, AwaitReturnsAtOnceWhenConditionHolds) {
  Mutex mu;
  MutexLock lock(&mu);
  int evaluations = 0;
  mu.Await([&] {
    ++evaluations;
    return true;
  });
  EXPECT_EQ(evaluations, 1);
}

TEST(MutexTest, AwaitWakesWhenAnotherThreadMakesConditionTrue) {
  Mutex mu;
  int produced = 0;  // guarded by mu
  constexpr int kItems = 1000;
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      MutexLock lock(&mu);
      ++produced;
    }
  });
  {
    MutexLock lock(&mu);
    mu.Await([&] { return produced == kItems; });
    EXPECT_EQ(produced, kItems);
  }
  producer.join();
}

TEST(MutexTest, AwaitHandsOffBetweenThreadsInTurn) {
  // Two threads alternate strictly through a shared turn variable; each
  // waits for its own turn with Await. Any lost wake-up hangs the test.
  Mutex mu;
  int turn = 0;  // guarded by mu
  std::vector<int> order;  // guarded by mu
  constexpr int kRounds = 500;
  auto player = [&](int me) {
    for (int i = 0; i < kRounds; ++i) {
      MutexLock lock(&mu);
      mu.Await([&] { return turn == me; });
      order.push_back(me);
      turn = 1 - me;
    }
  };
  std::thread a(player, 0);
  std::thread b(player, 1);
  a.join();
  b.join();
  ASSERT_EQ(order.size(), 2u * kRounds);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i % 2));
}

TEST(MutexTest, AwaitWithTimeoutReturnsTrueAtOnceWhenConditionHolds) {
  Mutex mu;
  MutexLock lock(&mu);
  EXPECT_TRUE(mu.AwaitWithTimeout([] { return true; }, absl::ZeroDuration()));
}

TEST(MutexTest, AwaitWithTimeoutReturnsFalseWhenConditionNeverHolds) {
  Mutex mu;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(mu.AwaitWithTimeout([] { return false; }, absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

TEST(MutexTest, AwaitWithTimeoutSeesAnotherThreadsChange) {
  Mutex mu;
  bool ready = false;  // guarded by mu
  std::thread setter;
  {
    MutexLock lock(&mu);
    // The setter needs the mutex, so it can only run once this thread is
    // waiting inside AwaitWithTimeout; the timeout is a safety net only.
    setter = std::thread([&] {
      MutexLock lock(&mu);
      ready = true;
    });
    EXPECT_TRUE(mu.AwaitWithTimeout([&] { return ready; }, absl::Seconds(60)));
  }
  setter.join();
}

// Bug report (see the header): when a thread releases the mutex by waiting
// inside Await/AwaitWithTimeout, other waiters are not woken, so a change the
// waiting thread made before it started waiting goes unseen. absl::Mutex does
// re-evaluate other waiters' conditions there. Enable once mutex.h is fixed;
// with the bug this test fails after its 5 s safety timeout.
TEST(MutexTest, AwaitWakesOtherWaitersWhenItReleasesTheMutex) {
  Mutex mu;
  bool x = false;  // guarded by mu
  bool y = false;  // guarded by mu
  Notification b_waiting;
  std::thread b([&] {
    MutexLock lock(&mu);
    mu.Await([&] {
      b_waiting.Notify();  // B holds mu here; A can only lock it once B waits.
      return x;
    });
    y = true;
  });
  b_waiting.WaitForNotification();
  {
    MutexLock lock(&mu);
    x = true;  // B's condition now holds, but nobody has unlocked mu yet.
    EXPECT_TRUE(mu.AwaitWithTimeout([&] { return y; }, absl::Seconds(5)));
  }
  b.join();
}

TEST(NotificationTest, StartsUnnotified) {
  Notification n;
  EXPECT_FALSE(n.HasBeenNotified());
  EXPECT_FALSE(n.WaitForNotificationWithTimeout(absl::Milliseconds(1)));
}

TEST(NotificationTest, NotifyIsSeenByThisThread) {
  Notification n;
  n.Notify();
  EXPECT_TRUE(n.HasBeenNotified());
  n.WaitForNotification();  // returns at once
  EXPECT_TRUE(n.WaitForNotificationWithTimeout(absl::ZeroDuration()));
}

TEST(NotificationTest, WakesAllWaitingThreads) {
  Notification go;
  Notification done;
  Mutex mu;
  int woken = 0;  // guarded by mu
  constexpr int kWaiters = 8;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      go.WaitForNotification();
      EXPECT_TRUE(go.HasBeenNotified());
      MutexLock lock(&mu);
      if (++woken == kWaiters) done.Notify();
    });
  }
  {
    MutexLock lock(&mu);
    EXPECT_EQ(woken, 0);
  }
  go.Notify();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  for (auto& t : waiters) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(woken, kWaiters);
}

TEST(NotificationTest, PublishesWritesMadeBeforeNotify) {
  // Plain (unguarded) data written before Notify() must be visible after
  // WaitForNotification(); ThreadSanitizer checks the happens-before edge.
  Notification n;
  std::vector<int> data;
  std::thread writer([&] {
    data = {1, 2, 3};
    n.Notify();
  });
  n.WaitForNotification();
  EXPECT_EQ(data, (std::vector<int>{1, 2, 3}));
  writer.join();
}

// Every CAUSEWAY_* setting is read through the table: choices outside
// their set and indices that do not parse are refused naming the variable
// and its values; unset is the fallback.
TEST(SettingsTest, ValuesOutsideTheirSetAreRefusedByName) {
  setenv("CAUSEWAY_VULKAN_KERNELS", "gpu", 1);
  EXPECT_EQ(SettingValue("CAUSEWAY_VULKAN_KERNELS", "auto").value_or("?"), "gpu");
  setenv("CAUSEWAY_VULKAN_KERNELS", "nonsense", 1);
  absl::StatusOr<std::string> bad = SettingValue("CAUSEWAY_VULKAN_KERNELS", "auto");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("CAUSEWAY_VULKAN_KERNELS=nonsense is not one of auto, gpu"));
  EXPECT_EQ(CheckSettings().code(), absl::StatusCode::kInvalidArgument);
  unsetenv("CAUSEWAY_VULKAN_KERNELS");
  EXPECT_EQ(SettingValue("CAUSEWAY_VULKAN_KERNELS", "auto").value_or("?"), "auto");

  setenv("CAUSEWAY_CUDA_GPU", "-1", 1);
  EXPECT_EQ(SettingIndex("CAUSEWAY_CUDA_GPU").status().code(),
            absl::StatusCode::kInvalidArgument);
  setenv("CAUSEWAY_CUDA_GPU", "2", 1);
  EXPECT_EQ(SettingIndex("CAUSEWAY_CUDA_GPU").value_or(-9), 2);
  unsetenv("CAUSEWAY_CUDA_GPU");
  EXPECT_EQ(SettingIndex("CAUSEWAY_CUDA_GPU").value_or(-9), -1);

  // A name the table lacks is reported, not refused.
  setenv("CAUSEWAY_NOT_A_SETTING", "1", 1);
  std::vector<std::string> unknown;
  EXPECT_TRUE(CheckSettings(&unknown).ok());
  EXPECT_THAT(unknown, ::testing::Contains("CAUSEWAY_NOT_A_SETTING"));
  unsetenv("CAUSEWAY_NOT_A_SETTING");
}

// The table is in name order, with no name twice, and every choice
// setting has choices.
TEST(SettingsTest, TheTableIsSortedAndComplete) {
  const std::vector<Setting>& all = AllSettings();
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_LT(std::string(all[i - 1].name), std::string(all[i].name));
  }
  for (const Setting& s : all) {
    EXPECT_TRUE(absl::StartsWith(s.name, "CAUSEWAY_")) << s.name;
    if (s.kind == Setting::Kind::kChoice) {
      EXPECT_FALSE(s.choices.empty()) << s.name;
    }
  }
}

}  // namespace
}  // namespace causeway
