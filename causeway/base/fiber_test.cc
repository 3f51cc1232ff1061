// Tests for FiberPool and the waits that work on fibers and threads alike.
// A fiber that waits must park only itself: most tests run more fibers that
// wait on one another than the pool has threads, so a wait that blocked the
// thread would hang them (ctest's timeout). No test sleeps to synchronise.

#include "causeway/base/fiber.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "causeway/async/future.h"
#include "causeway/base/mutex.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Everyone arrives, then everyone waits for all: N fibers on one thread.
TEST(FiberTest, FibersWaitingOnEachOtherShareOneThread) {
  constexpr int kFibers = 64;
  FiberPool pool(1);
  std::atomic<uint32_t> arrived{0};
  std::atomic<int> passed{0};
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < kFibers; ++i) {
    tasks.push_back(pool.Spawn([&] {
      EXPECT_TRUE(fiber::InFiber());
      if (arrived.fetch_add(1) + 1 == kFibers) fiber::WakeAll(arrived);
      for (uint32_t seen = arrived.load(); seen < kFibers; seen = arrived.load()) {
        fiber::WaitWhileEqual(arrived, seen, fiber::kNever);
      }
      passed.fetch_add(1);
    }));
  }
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(passed.load(), kFibers);
  EXPECT_FALSE(fiber::InFiber());
}

// A pool's threads try a held Mutex before sleeping on it (sleeping would
// stall every fiber behind the one that blocked); other threads do not.
TEST(FiberTest, PoolThreadsSpinOnAHeldMutexOtherThreadsDoNot) {
  EXPECT_FALSE(Mutex::SpinsOnContention());
  FiberPool pool(2);
  std::atomic<int> spinning{0};
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back(pool.Spawn([&] {
      if (Mutex::SpinsOnContention()) spinning.fetch_add(1);
    }));
  }
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(spinning.load(), 4);
  EXPECT_FALSE(Mutex::SpinsOnContention());
}

// Rounds of a barrier across two threads' fibers: exercises parking,
// waking and migration between the pool's threads.
TEST(FiberTest, BarrierRoundsAcrossThreads) {
  constexpr int kFibers = 24;
  constexpr int kRounds = 200;
  FiberPool pool(2);
  struct Barrier {
    Mutex mu;
    int count ABSL_GUARDED_BY(mu) = 0;
  } barrier;
  std::atomic<uint32_t> generation{0};
  std::vector<int> done(kFibers, 0);
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < kFibers; ++i) {
    tasks.push_back(pool.Spawn([&, i] {
      for (int r = 0; r < kRounds; ++r) {
        uint32_t seen;
        bool last;
        {
          MutexLock lock(&barrier.mu);
          seen = generation.load();
          last = ++barrier.count == kFibers;
          if (last) barrier.count = 0;
        }
        if (last) {
          generation.fetch_add(1);
          fiber::WakeAll(generation);
        } else {
          while (generation.load() == seen) fiber::WaitWhileEqual(generation, seen, fiber::kNever);
        }
        ++done[static_cast<size_t>(i)];
      }
    }));
  }
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(generation.load(), static_cast<uint32_t>(kRounds));
  for (int d : done) EXPECT_EQ(d, kRounds);
}

TEST(FiberTest, SleepsEndAtTheirDeadlineNotBefore) {
  FiberPool pool(1);
  const auto deadline = steady_clock::now() + milliseconds(20);
  std::atomic<int> early{0};
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < 16; ++i) {
    tasks.push_back(pool.Spawn([&, i] {
      const auto mine = deadline + milliseconds(i % 4);
      fiber::SleepUntil(mine);
      if (steady_clock::now() < mine) early.fetch_add(1);
    }));
  }
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(early.load(), 0);
}

// A pool wakes early for a deadline, by a margin learned from how late its
// timed wake-ups come, and spins to it: many sleeps of milliseconds (which
// grow the margin), from fibers on two threads, still never end early.
TEST(FiberTest, RepeatedLongSleepsNeverEndEarly) {
  FiberPool pool(2);
  std::atomic<int> early{0};
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(pool.Spawn([&, i] {
      for (int k = 0; k < 12; ++k) {
        const auto mine = steady_clock::now() + microseconds(300 + 700 * ((i + k) % 4));
        fiber::SleepUntil(mine);
        if (steady_clock::now() < mine) early.fetch_add(1);
      }
    }));
  }
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(early.load(), 0);
}

TEST(FiberTest, AWaitTimesOutOnAFiberAndOnAThread) {
  std::atomic<uint32_t> word{7};
  FiberPool pool(1);
  std::atomic<bool> fiber_result{true};
  auto task = pool.Spawn([&] {
    const auto deadline = steady_clock::now() + milliseconds(5);
    bool in_time = true;
    while (in_time && word.load() == 7) in_time = fiber::WaitWhileEqual(word, 7, deadline);
    fiber_result = in_time;
    EXPECT_GE(steady_clock::now(), deadline);
  });
  const auto deadline = steady_clock::now() + milliseconds(5);
  bool in_time = true;
  while (in_time && word.load() == 7) in_time = fiber::WaitWhileEqual(word, 7, deadline);
  EXPECT_FALSE(in_time);
  task->Join();
  EXPECT_FALSE(fiber_result.load());
}

// A thread waits for a fiber and a fiber for a thread, on the same word.
// Deadlines more than a second away (a collective's time-out) are kept
// apart from the near ones: woken early they leave no trace, and one that
// is reached still ends its wait, not before its deadline.
TEST(FiberTest, FarDeadlinesAreWithdrawnWhenWokenAndStillExpire) {
  FiberPool pool(1);
  std::atomic<uint32_t> parked{0};
  std::atomic<uint32_t> go{0};
  std::atomic<int> woken{0};
  std::vector<std::shared_ptr<FiberPool::Task>> tasks;
  for (int i = 0; i < 16; ++i) {
    tasks.push_back(pool.Spawn([&] {
      const auto deadline = steady_clock::now() + std::chrono::seconds(30);
      parked.fetch_add(1);
      fiber::WakeAll(parked);
      bool in_time = true;
      while (in_time && go.load() == 0) in_time = fiber::WaitWhileEqual(go, 0, deadline);
      if (in_time) woken.fetch_add(1);
    }));
  }
  for (uint32_t seen = parked.load(); seen < 16; seen = parked.load()) {
    fiber::WaitWhileEqual(parked, seen, fiber::kNever);
  }
  go = 1;
  fiber::WakeAll(go);
  for (auto& t : tasks) t->Join();
  EXPECT_EQ(woken.load(), 16);

  std::atomic<uint32_t> never{0};
  const auto deadline = steady_clock::now() + milliseconds(1500);
  auto task = pool.Spawn([&] {
    bool in_time = true;
    while (in_time) in_time = fiber::WaitWhileEqual(never, 0, deadline);
    EXPECT_GE(steady_clock::now(), deadline);
  });
  task->Join();
  // Found by the far list's scan, then woken by its own timer: late by at
  // most a scan period, plus this machine's scheduling.
  EXPECT_LT(steady_clock::now(), deadline + std::chrono::seconds(2));
}

TEST(FiberTest, ThreadsAndFibersWakeEachOther) {
  FiberPool pool(1);
  std::atomic<uint32_t> word{0};
  auto task = pool.Spawn([&] {
    word.store(1);
    fiber::WakeAll(word);
    while (word.load() == 1) fiber::WaitWhileEqual(word, 1, fiber::kNever);
    EXPECT_EQ(word.load(), 2u);
  });
  while (word.load() == 0) fiber::WaitWhileEqual(word, 0, fiber::kNever);
  word.store(2);
  fiber::WakeAll(word);
  task->Join();
}

// Future::Await on a fiber parks the fiber: the fiber that fulfils the
// promise runs on the same, only, thread.
TEST(FiberTest, FutureAwaitParksTheFiber) {
  FiberPool pool(1);
  Promise<int> promise;
  Future<int> future = promise.future();
  std::atomic<int> got{0};
  auto waiter = pool.Spawn([&] { got = *future.Await(); });
  auto setter = pool.Spawn([&] { promise.Set(42); });
  waiter->Join();
  setter->Join();
  EXPECT_EQ(got.load(), 42);

  Promise<int> never;
  Future<int> unset = never.future();
  std::atomic<bool> timed_out{false};
  auto timer = pool.Spawn([&] { timed_out = unset.AwaitWithTimeout(absl::Milliseconds(2)) == nullptr; });
  timer->Join();
  EXPECT_TRUE(timed_out.load());
  never.Set(1);  // the abandoned wait's continuation runs harmlessly
}

// One fiber joins another.
TEST(FiberTest, AFiberJoinsAnother) {
  FiberPool pool(1);
  std::atomic<uint32_t> go{0};
  std::atomic<int> order{0};
  auto first = pool.Spawn([&] {
    while (go.load() == 0) fiber::WaitWhileEqual(go, 0, fiber::kNever);
    order = 1;
  });
  auto second = pool.Spawn([&] {
    go = 1;
    fiber::WakeAll(go);
    first->Join();
    EXPECT_EQ(order.load(), 1);
    order = 2;
  });
  second->Join();
  EXPECT_EQ(order.load(), 2);
}

TEST(FiberTest, DestroyingThePoolWaitsForItsFibers) {
  std::atomic<int> finished{0};
  {
    FiberPool pool(2);
    for (int i = 0; i < 8; ++i) {
      pool.Spawn([&] {
        fiber::SleepUntil(steady_clock::now() + milliseconds(1));
        finished.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(finished.load(), 8);
}

}  // namespace
}  // namespace causeway
