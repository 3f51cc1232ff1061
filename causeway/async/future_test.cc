// Tests for causeway/async/future.h: readiness, which thread runs
// continuations, Then chaining, WhenAll and concurrent fulfilment. Threads
// synchronise only through futures, notifications and joins, never sleeps.

#include "causeway/async/future.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "causeway/base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway {
namespace {

TEST(FutureTest, DefaultIsInvalid) {
  Future<int> f;
  EXPECT_FALSE(f.valid());
  f = Future<int>::Ready(1);
  EXPECT_TRUE(f.valid());
}

TEST(FutureTest, ReadyHoldsItsValue) {
  Future<int> f = Future<int>::Ready(7);
  ASSERT_TRUE(f.valid());
  EXPECT_TRUE(f.IsReady());
  ASSERT_TRUE(f.Await().ok());
  EXPECT_EQ(*f.Await(), 7);
}

TEST(FutureTest, ReadyHoldsAnError) {
  Future<int> f = Future<int>::Ready(absl::NotFoundError("array 3"));
  EXPECT_TRUE(f.IsReady());
  EXPECT_EQ(f.Await().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.Await().status().message(), "array 3");
}

TEST(FutureTest, NotReadyUntilSet) {
  Promise<int> p;
  Future<int> f = p.future();
  EXPECT_TRUE(f.valid());
  EXPECT_FALSE(f.IsReady());
  EXPECT_FALSE(p.IsSet());
  p.Set(3);
  EXPECT_TRUE(f.IsReady());
  EXPECT_TRUE(p.IsSet());
  EXPECT_EQ(*f.Await(), 3);
}

TEST(FutureTest, TakeMovesTheValueOutOnceSetOnAnotherThread) {
  Promise<std::vector<float>> p;
  Future<std::vector<float>> f = p.future();
  std::vector<float> big(1 << 16, 2.5f);
  const float* storage = big.data();
  std::thread setter([&] { p.Set(std::move(big)); });
  absl::StatusOr<std::vector<float>> v = f.Take();  // waits for the setter
  setter.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->data(), storage) << "the same storage: moved, not copied";
  EXPECT_EQ(v->size(), size_t{1} << 16);
  EXPECT_EQ(Future<int>::Ready(absl::AbortedError("gone")).Take().status().code(),
            absl::StatusCode::kAborted);
}

TEST(FutureTest, CopiesShareState) {
  Promise<std::string> p;
  Future<std::string> a = p.future();
  Future<std::string> b = a;
  Promise<std::string> p2 = p;  // promises are copyable handles, too
  p2.Set("shared");
  EXPECT_TRUE(p.IsSet());
  EXPECT_EQ(*a.Await(), "shared");
  EXPECT_EQ(*b.Await(), "shared");
  EXPECT_EQ(&a.Await(), &b.Await());  // the same stored result
}

TEST(FutureTest, AwaitBlocksUntilAnotherThreadSets) {
  Promise<int> p;
  Future<int> f = p.future();
  std::thread setter([p] { p.Set(42); });
  const absl::StatusOr<int>& v = f.Await();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  setter.join();
}

TEST(FutureTest, AwaitSeesAnErrorSetByAnotherThread) {
  Promise<int> p;
  std::thread setter([p] { p.Set(absl::UnavailableError("host 2 lost")); });
  EXPECT_EQ(p.future().Await().status().code(), absl::StatusCode::kUnavailable);
  setter.join();
}

TEST(FutureTest, MoveOnlyValues) {
  Promise<std::unique_ptr<int>> p;
  Future<std::unique_ptr<int>> f = p.future();
  p.Set(std::make_unique<int>(5));
  ASSERT_TRUE(f.Await().ok());
  EXPECT_EQ(**f.Await(), 5);
}

TEST(FutureTest, AwaitWithTimeoutReturnsNullWhenUnset) {
  Promise<int> p;
  Future<int> f = p.future();
  EXPECT_EQ(f.AwaitWithTimeout(absl::ZeroDuration()), nullptr);
  EXPECT_EQ(f.AwaitWithTimeout(absl::Milliseconds(10)), nullptr);
  EXPECT_FALSE(f.IsReady());
}

TEST(FutureTest, AwaitWithTimeoutReturnsTheResultWhenSet) {
  Promise<int> p;
  Future<int> f = p.future();
  p.Set(absl::InternalError("boom"));
  const absl::StatusOr<int>* v = f.AwaitWithTimeout(absl::ZeroDuration());
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(v, &f.Await());
}

TEST(FutureTest, AwaitWithTimeoutWakesWhenAnotherThreadSets) {
  Promise<int> p;
  Future<int> f = p.future();
  std::thread setter([p] { p.Set(9); });
  const absl::StatusOr<int>* v = f.AwaitWithTimeout(absl::Seconds(60));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(**v, 9);
  setter.join();
}

// ---------------------------------------------------------------------------
// OnReady: which thread runs the continuation

TEST(FutureTest, OnReadyBeforeSetRunsOnTheSettingThread) {
  Promise<int> p;
  std::thread::id callback_thread;
  int seen = 0;
  int calls = 0;
  p.future().OnReady([&](const absl::StatusOr<int>& v) {
    callback_thread = std::this_thread::get_id();
    seen = *v;
    ++calls;
  });
  EXPECT_EQ(calls, 0);  // not run before the promise is set

  std::thread::id setter_thread;
  std::thread setter([&] {
    setter_thread = std::this_thread::get_id();
    p.Set(11);
    // Continuations run inside Set(), so they are done when it returns.
    EXPECT_EQ(calls, 1);
  });
  setter.join();

  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, 11);
  EXPECT_EQ(callback_thread, setter_thread);
  EXPECT_NE(callback_thread, std::this_thread::get_id());
}

TEST(FutureTest, OnReadyAfterSetRunsInlineOnTheCallingThread) {
  Promise<int> p;
  std::thread setter([p] { p.Set(12); });
  setter.join();

  std::thread::id callback_thread;
  int calls = 0;
  p.future().OnReady([&](const absl::StatusOr<int>& v) {
    callback_thread = std::this_thread::get_id();
    EXPECT_EQ(*v, 12);
    ++calls;
  });
  EXPECT_EQ(calls, 1);  // ran before OnReady returned
  EXPECT_EQ(callback_thread, std::this_thread::get_id());
}

TEST(FutureTest, EveryContinuationRunsExactlyOnce) {
  Promise<int> p;
  std::vector<int> calls(5, 0);
  for (int i = 0; i < 3; ++i) {
    p.future().OnReady([&calls, i](const absl::StatusOr<int>&) { ++calls[i]; });
  }
  p.Set(1);
  for (int i = 3; i < 5; ++i) {
    p.future().OnReady([&calls, i](const absl::StatusOr<int>&) { ++calls[i]; });
  }
  EXPECT_EQ(calls, std::vector<int>(5, 1));
}

TEST(FutureTest, ContinuationMayRegisterContinuationsAndSetPromises) {
  // Continuations run without internal locks held, so re-entering the same
  // future or fulfilling another promise from one must not deadlock.
  Promise<int> p;
  Promise<int> q;
  int inner = 0;
  p.future().OnReady([&](const absl::StatusOr<int>& v) {
    p.future().OnReady([&](const absl::StatusOr<int>& w) { inner = *w; });
    q.Set(*v + 1);
  });
  p.Set(1);
  EXPECT_EQ(inner, 1);
  ASSERT_TRUE(q.future().IsReady());
  EXPECT_EQ(*q.future().Await(), 2);
}

TEST(FutureTest, ContinuationSeesAnError) {
  Promise<int> p;
  absl::Status seen;
  p.future().OnReady([&](const absl::StatusOr<int>& v) { seen = v.status(); });
  p.Set(absl::DeadlineExceededError("late"));
  EXPECT_EQ(seen.code(), absl::StatusCode::kDeadlineExceeded);
}

// ---------------------------------------------------------------------------
// Then

TEST(FutureTest, ThenChainsValues) {
  Promise<int> p;
  Future<std::string> f =
      p.future()
          .Then([](const absl::StatusOr<int>& v) -> absl::StatusOr<int> {
            if (!v.ok()) return v.status();
            return *v * 2;
          })
          .Then([](const absl::StatusOr<int>& v) -> absl::StatusOr<std::string> {
            if (!v.ok()) return v.status();
            return absl::StrCat("value ", *v);
          });
  EXPECT_FALSE(f.IsReady());
  p.Set(21);
  ASSERT_TRUE(f.IsReady());
  EXPECT_EQ(*f.Await(), "value 42");
}

TEST(FutureTest, ThenPropagatesErrors) {
  Promise<int> p;
  int second_calls = 0;
  Future<int> f = p.future()
                      .Then([](const absl::StatusOr<int>& v) -> absl::StatusOr<int> {
                        if (!v.ok()) return v.status();
                        return *v + 1;
                      })
                      .Then([&](const absl::StatusOr<int>& v) -> absl::StatusOr<int> {
                        ++second_calls;
                        if (!v.ok()) return v.status();
                        return *v + 1;
                      });
  p.Set(absl::NotFoundError("array 5"));
  EXPECT_EQ(second_calls, 1);  // continuations see errors too
  EXPECT_EQ(f.Await().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.Await().status().message(), "array 5");
}

TEST(FutureTest, ThenCanTurnAValueIntoAnError) {
  Future<int> f = Future<int>::Ready(-1).Then(
      [](const absl::StatusOr<int>& v) -> absl::StatusOr<int> {
        if (*v < 0) return absl::InvalidArgumentError("negative");
        return *v;
      });
  ASSERT_TRUE(f.IsReady());  // source was ready, so Then ran inline
  EXPECT_EQ(f.Await().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FutureTest, ThenRunsOnTheSettingThread) {
  Promise<int> p;
  std::thread::id ran_on;
  Future<int> f = p.future().Then([&](const absl::StatusOr<int>& v) -> absl::StatusOr<int> {
    ran_on = std::this_thread::get_id();
    return *v;
  });
  std::thread::id setter_thread;
  std::thread setter([&] {
    setter_thread = std::this_thread::get_id();
    p.Set(1);
  });
  setter.join();
  EXPECT_EQ(*f.Await(), 1);
  EXPECT_EQ(ran_on, setter_thread);
}

// ---------------------------------------------------------------------------
// WhenAll

TEST(WhenAllTest, EmptyIsReadyAndOk) {
  Future<Unit> all = WhenAll(std::vector<Future<int>>{});
  ASSERT_TRUE(all.IsReady());
  EXPECT_TRUE(all.Await().ok());
}

TEST(WhenAllTest, ReadyOnlyWhenEveryInputIs) {
  std::vector<Promise<int>> promises(3);
  std::vector<Future<int>> futures;
  for (auto& p : promises) futures.push_back(p.future());
  Future<Unit> all = WhenAll(futures);
  promises[2].Set(2);
  promises[0].Set(0);
  EXPECT_FALSE(all.IsReady());
  promises[1].Set(1);
  ASSERT_TRUE(all.IsReady());
  EXPECT_TRUE(all.Await().ok());
}

TEST(WhenAllTest, FirstErrorInArgumentOrderWins) {
  std::vector<Promise<int>> promises(4);
  std::vector<Future<int>> futures;
  for (auto& p : promises) futures.push_back(p.future());
  Future<Unit> all = WhenAll(futures);
  // Errors arrive out of argument order; the earliest argument's wins.
  promises[3].Set(absl::InternalError("third"));
  promises[2].Set(absl::NotFoundError("second"));
  promises[1].Set(absl::UnavailableError("first"));
  EXPECT_FALSE(all.IsReady());  // still waits for input 0
  promises[0].Set(0);
  ASSERT_TRUE(all.IsReady());
  EXPECT_EQ(all.Await().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(all.Await().status().message(), "first");
}

TEST(WhenAllTest, AlreadyReadyInputs) {
  Future<Unit> ok = WhenAll(std::vector<Future<int>>{Future<int>::Ready(1), Future<int>::Ready(2)});
  ASSERT_TRUE(ok.IsReady());
  EXPECT_TRUE(ok.Await().ok());

  Future<Unit> bad = WhenAll(std::vector<Future<int>>{
      Future<int>::Ready(1), Future<int>::Ready(absl::AbortedError("x"))});
  ASSERT_TRUE(bad.IsReady());
  EXPECT_EQ(bad.Await().status().code(), absl::StatusCode::kAborted);
}

TEST(WhenAllTest, ContinuationRunsOnTheThreadThatSetsTheLastInput) {
  Promise<Unit> a;
  Promise<Unit> b;
  Future<Unit> all = WhenAll(std::vector<Future<Unit>>{a.future(), b.future()});
  std::thread::id ran_on;
  all.OnReady([&](const absl::StatusOr<Unit>&) { ran_on = std::this_thread::get_id(); });
  a.Set(Unit{});
  std::thread::id last_setter;
  std::thread t([&] {
    last_setter = std::this_thread::get_id();
    b.Set(Unit{});
  });
  t.join();
  EXPECT_EQ(ran_on, last_setter);
}

// ---------------------------------------------------------------------------
// Concurrency

TEST(FutureConcurrencyTest, ManyThreadsSetDistinctPromises) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 250;
  constexpr int kTotal = kThreads * kPerThread;
  std::vector<Promise<int>> promises(kTotal);
  std::vector<Future<int>> futures;
  futures.reserve(kTotal);
  for (auto& p : promises) futures.push_back(p.future());

  std::atomic<int> callbacks{0};
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < kTotal; ++i) {
    futures[i].OnReady([&callbacks, &sum](const absl::StatusOr<int>& v) {
      sum += *v;
      ++callbacks;
    });
  }
  Future<Unit> all = WhenAll(futures);

  // Thread t sets promises t, t + kThreads, ... so they interleave.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&promises, t] {
      for (int i = t; i < kTotal; i += kThreads) promises[i].Set(i);
    });
  }
  // Await from this thread while the setters run.
  EXPECT_TRUE(all.Await().ok());
  for (auto& t : threads) t.join();

  EXPECT_EQ(callbacks.load(), kTotal);
  EXPECT_EQ(sum.load(), int64_t{kTotal} * (kTotal - 1) / 2);
  for (int i = 0; i < kTotal; ++i) EXPECT_EQ(*futures[i].Await(), i);
}

TEST(FutureConcurrencyTest, OnReadyRacingWithSetRunsEachContinuationOnce) {
  // Half of the continuations are registered by a thread racing the setter;
  // each must run exactly once, whichever side wins.
  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    Promise<int> p;
    std::atomic<int> calls{0};
    Notification start;
    std::thread registrar([&] {
      start.WaitForNotification();
      for (int i = 0; i < 4; ++i) {
        p.future().OnReady([&calls](const absl::StatusOr<int>&) { ++calls; });
      }
    });
    std::thread setter([&] {
      start.WaitForNotification();
      p.Set(round);
    });
    for (int i = 0; i < 4; ++i) {
      p.future().OnReady([&calls](const absl::StatusOr<int>&) { ++calls; });
    }
    start.Notify();
    registrar.join();
    setter.join();
    ASSERT_EQ(calls.load(), 8) << "round " << round;
  }
}

TEST(FutureDeathTest, SettingTwiceIsAProgrammerError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Promise<int> p;
  p.Set(1);
  EXPECT_DEATH(p.Set(2), "promise fulfilled twice");
}

}  // namespace
}  // namespace causeway
